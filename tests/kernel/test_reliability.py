"""Reliability: bad cells, interrupts, numerics and long sessions, on the real CPU client.

Every bad-cell test ends the same way: the user's error is raised as theirs (its traceback reaches the
cell's line), nothing half-traced joins the next cell's graph (the next ``%%xla`` cell runs the same
graph, by torch_xla's hash and node count, as a fresh process running the same code), and the
workbench keeps working.
"""

from __future__ import annotations

import _thread
import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import xla_lab
from queue_helpers import settle
from xla_cells import run_xla
from xla_lab.capture.recovery import LostTensor, LostTensorError

ROOT = Path(__file__).resolve().parents[2]
PROBE_DIM = 23  # the probe's graph, compared with a fresh process's

PROBE_SETUP = f"""
import torch, torch_xla
dev = torch_xla.device()
pw = torch.ones({PROBE_DIM}, {PROBE_DIM}).to(dev)
px = torch.ones({PROBE_DIM}, 4).to(dev)
torch_xla.sync()
"""
PROBE = "probe = torch.tanh(pw @ px).sum() * 3"


def hlo_shape(text):
    """The HLO without what differs between processes for the same graph: module and cell names, op
    metadata (source files and lines)."""
    import hashlib
    import re

    if text is None:
        return None
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    text = re.sub(r"\bcell_\d+", "cell", text)
    return hashlib.sha1(text.encode()).hexdigest()


FRESH_SCRIPT = inspect.getsource(hlo_shape) + textwrap.dedent("""
    import json, os, sys
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    import xla_lab
    assert ip.run_cell(sys.argv[1]).success
    ip.run_cell("%%xla -q\\n" + sys.argv[2])
    c = xla_lab.last()
    print("RESULT" + json.dumps([[s.graph_hash, s.ir_nodes, hlo_shape(s.hlo_before)] for s in c.steps]))
""")


def _fresh(setup: str, cell: str) -> list:
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("XLA_FLAGS", None)
    for k in ("XLA_LAB_PID", "PT_XLA_DEBUG_FILE", "PT_XLA_DEBUG_LEVEL", "XLA_SAVE_TENSORS_FILE"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", FRESH_SCRIPT, setup, cell], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT")), None)
    assert line, out.stdout[-2000:] + out.stderr[-4000:]
    return json.loads(line[len("RESULT"):])


@pytest.fixture(scope="module")
def fresh_probe():
    """The probe cell's steps (graph hash, node count, HLO) in a fresh kernel."""
    return _fresh(PROBE_SETUP, PROBE)


@pytest.fixture
def probe(ip, fresh_probe):
    """Set up the probe's tensors, flush what earlier tests left pending; then ``probe()`` runs the
    probe cell and checks it equals the fresh kernel's."""
    assert ip.run_cell(PROBE_SETUP).success
    assert ip.run_cell("%%xla -q\npass").success  # nothing of earlier tests pending

    def check():
        result, capture = run_xla(ip, PROBE, "-q")
        assert result.success, result.error_in_exec
        assert capture.error is None
        assert [[s.graph_hash, s.ir_nodes, hlo_shape(s.hlo_before)] for s in capture.steps] == fresh_probe
        return capture

    return check


def _cell_lines(exc: BaseException, capture) -> list[int]:
    """Lines of the cell's own file in the traceback of ``exc``."""
    lines = []
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<ipython-input-"):
            lines.append(tb.tb_lineno)
        tb = tb.tb_next
    return lines


def _workbench_is_clean():
    import torch_xla

    from xla_lab.capture.steps import HOOK_FUNCTION

    assert torch_xla._XLAC._xla_step_marker.__name__ != HOOK_FUNCTION  # the sync hook is gone
    assert torch_xla._XLAC._get_current_graph_name() == ""  # graph names are not the cell's
    assert not any(torch_xla._XLAC._check_device_tensor_need_materialization(""))


# --- bad cells -----------------------------------------------------------------------------------
def _ends_the_process(what: str):
    """torch_xla 2.8 ends the process (a failed C++ check) where 2.9 raises: nothing to test there."""
    import torch_xla

    from xla_lab import compat

    return pytest.mark.skipif(compat.errors_end_the_process(torch_xla.__version__),
                              reason=f"torch_xla {torch_xla.__version__} ends the process on {what} "
                                     "(compat.KNOWN_ON), with or without xla_lab")


@_ends_the_process("an op of mismatched shapes")
def test_error_mid_trace(ip, probe):
    result, c = run_xla(ip, """
t = pw @ px
u = t.relu()
v = u @ pw  # (23x4) @ (23x23): torch raises while tracing, before any sync
never = 1
""", "-q")
    err = result.error_in_exec
    assert isinstance(err, RuntimeError) and "cannot matrix-multiply" in str(err)
    assert _cell_lines(err, c)[-1] == 4  # the traceback ends in the user's line
    assert c.error.startswith("RuntimeError") and "never" not in ip.user_ns
    # What was traced before the error ran as the cell's last step, so no cell inherits it.
    assert [s.sync_cause for s in c.steps] == ["end of cell"]
    _workbench_is_clean()
    probe()
    assert ip.run_cell("float(u.sum())").success  # the user's tensors from before the error work


def test_error_mid_loop(ip, probe):
    result, c = run_xla(ip, """
acc = pw.sum(0)
for i in range(5):
    acc = acc * 2 + 1
    torch_xla.sync()
    if i == 2:
        raise ValueError(f"stop at {i}")
""", "-q")
    err = result.error_in_exec
    assert isinstance(err, ValueError) and str(err) == "stop at 2"
    assert _cell_lines(err, c)[-1] == 7
    assert [s.sync_cause for s in c.steps] == ["torch_xla.sync()"] * 3
    assert [s.sync_line for s in c.steps] == [5, 5, 5]
    _workbench_is_clean()
    probe()
    assert ip.run_cell("assert float(acc[0]) == 23 * 8 + 7").success


def test_error_mid_compile_keeps_the_kernel_usable(ip, probe, capsys):
    """XLA rejects the graph while compiling it. torch_xla then loses every tensor that was pending in
    that graph, and while one lives *every* later sync of the kernel fails ('Check failed:
    tensor_data'): xla_lab swaps them for empty tensors and names them."""
    assert ip.run_cell("from torch_xla.experimental.stablehlo_custom_call import stablehlo_custom_call\n"
                       "doomed = pw * 2").success  # pending, made by a plain cell before the failure
    result, c = run_xla(ip, """
bad = stablehlo_custom_call([pw], 'no_such_target', [[23, 23]], [torch.float32], api_version=1)
also = bad + doomed
torch_xla.sync()
after = 1
""", "-q")
    err = result.error_in_exec
    assert isinstance(err, ValueError) and "no_such_target" in str(err)
    assert _cell_lines(err, c)[-1] == 4  # the user's sync, not xla_lab's frames
    last = err.__traceback__
    while last.tb_next is not None:
        last = last.tb_next
    assert last.tb_frame.f_code.co_filename.endswith("torch_xla/torch_xla.py")  # not xla_lab's sync hook
    assert "after" not in ip.user_ns
    note = next(n for n in c.notes if "lost the values" in n)
    assert "bad" in note and "also" in note and "doomed" in note
    assert "xla_lab: XLA could not compile" in capsys.readouterr().err
    doomed = ip.user_ns["doomed"]  # lost anyway; now a stand-in that says so when used
    assert isinstance(doomed, LostTensor) and "could not compile" in repr(doomed)
    with pytest.raises(LostTensorError, match="could not compile the graph .*no_such_target"):
        doomed.shape
    assert tuple(ip.user_ns["pw"].shape) == (23, 23)  # tensors with data were not in the failure
    _workbench_is_clean()
    probe()
    assert ip.run_cell("x2 = (pw + 1).sum()\ntorch_xla.sync()\nfloat(x2)").success  # plain cells too


def test_compile_error_caught_in_the_cell_keeps_the_steps_right(ip, probe):
    """A compile that failed still left its dump: the next compile of the cell must not take it."""
    result, c = run_xla(ip, """
from torch_xla.experimental.stablehlo_custom_call import stablehlo_custom_call
try:
    bad3 = stablehlo_custom_call([pw], 'no_such_target', [[23, 23]], [torch.float32], api_version=1)
    torch_xla.sync()
except ValueError as exc:
    caught = str(exc)
fine = torch.cos(pw).sum()
""", "-q")
    assert result.success and "no_such_target" in ip.user_ns["caught"]
    (step,) = c.steps
    assert step.sync_cause == "end of cell" and step.cache == "miss"
    assert "cosine" in step.hlo_before and "no_such_target" not in step.hlo_before
    assert "cosine" in step.hlo_after
    _workbench_is_clean()
    probe()


def test_error_mid_compile_in_a_plain_cell(ip, probe):
    result = ip.run_cell("from torch_xla.experimental.stablehlo_custom_call import stablehlo_custom_call\n"
                         "bad2 = stablehlo_custom_call([pw], 'no_such_target', [[23, 23]], [torch.float32], "
                         "api_version=1)\ntorch_xla.sync()")
    assert isinstance(result.error_in_exec, ValueError)
    _workbench_is_clean()  # post_run_cell repaired the lost tensors
    probe()


# A graph that compiles but cannot run: its output needs 256 TiB, more than any address space, so the
# allocation fails when the graph runs, whatever the machine's memory and overcommit settings.
UNRUNNABLE = "torch.zeros(2**48, dtype=torch.uint8, device=dev) + 1"


def test_graph_failing_while_running(ip, probe, capsys):
    """XLA runs a graph after the sync returns; if the run fails (out of memory) its outputs are
    placeholders never filled, and once the failure is reported a graph that uses one crashes
    torch_xla 2.9 (segmentation fault). The cell fails with XLA's error, the outputs are swapped for
    stand-ins that say what happened, and the kernel lives."""
    result, c = run_xla(ip, f"""
ahead = pw * 2
huge = {UNRUNNABLE}
""", "-q")
    err = result.error_in_exec
    assert type(err).__name__ == "GraphRunError" and "Out of memory" in str(err)
    assert c.error and "Out of memory" in c.error
    note = next(n for n in c.notes if "lost the values" in n)
    assert "ahead" in note and "huge" in note
    assert "xla_lab: XLA could not compile or run" in capsys.readouterr().err
    assert isinstance(ip.user_ns["ahead"], LostTensor) and isinstance(ip.user_ns["huge"], LostTensor)
    # Using a lost value is a clear error in the cell (torch_xla alone would crash the process here).
    result, c2 = run_xla(ip, "from_lost = ahead @ px\n", "-q")
    assert isinstance(result.error_in_exec, LostTensorError)
    assert "failed while running the graph" in str(result.error_in_exec)
    assert "Out of memory" in str(result.error_in_exec)
    assert _cell_lines(result.error_in_exec, c2)[-1] == 1
    assert "from_lost" not in ip.user_ns
    assert float(ip.user_ns["pw"].sum()) == 23 * 23  # tensors outside the failed graph keep their values
    _workbench_is_clean()
    probe()


@_ends_the_process("reading a tensor whose graph failed while running")
def test_train_step_failing_while_running(ip, probe):
    """When the failing graph updates tensors in place (a train step's parameters), XLA 2.9's CPU
    client fails inside the run instead, and the outputs hold the error: nothing says so until a value
    is read, then the read raises XLA's error in the user's cell (torch_xla's behaviour), and graphs
    that use them carry the error instead of crashing. The kernel and the workbench stay usable."""
    assert ip.run_cell("lin = torch.nn.Linear(23, 4).to(dev)\nlin_opt = torch.optim.SGD(lin.parameters(), lr=0.1)\n"
                       "torch_xla.sync()").success
    result, c = run_xla(ip, f"""
lin_opt.zero_grad()
lin(pw).sum().backward()
lin_opt.step()
huge = {UNRUNNABLE}
""", "-q")
    assert result.success and len(c.steps) == 1
    result, c = run_xla(ip, "w0 = lin.weight.detach().cpu()\n", "-q")
    assert isinstance(result.error_in_exec, RuntimeError) and "Out of memory" in str(result.error_in_exec)
    assert _cell_lines(result.error_in_exec, c)[-1] == 1
    result = ip.run_cell("print(float(lin(pw).sum()))")
    assert isinstance(result.error_in_exec, RuntimeError) and "Out of memory" in str(result.error_in_exec)
    assert ip.run_cell("lin = torch.nn.Linear(23, 4).to(dev)\nassert lin(pw).shape == (23, 4)").success
    _workbench_is_clean()
    probe()


def test_graph_failing_while_running_in_plain_cells(ip, probe):
    """Without %%xla the failed run shows only when a later cell reads a value (torch_xla's own
    behaviour); from then on the lost tensors are stand-ins and the kernel lives."""
    assert ip.run_cell(f"ahead = pw * 2\nhuge2 = {UNRUNNABLE}\ntorch_xla.sync()").success  # runs after the sync
    result = ip.run_cell("float(ahead.sum())")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert isinstance(ip.user_ns["ahead"], LostTensor) and isinstance(ip.user_ns["huge2"], LostTensor)
    result = ip.run_cell("again = ahead + 1\ntorch_xla.sync()")
    assert isinstance(result.error_in_exec, LostTensorError)
    assert ip.run_cell("fine = (pw + 1).sum()\ntorch_xla.sync()\nassert float(fine) == 2 * 23 * 23").success
    _workbench_is_clean()
    probe()


def _compile_started(dump_dir: Path, name: str, timeout: float = 60.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.name.endswith("before_optimizations.txt") and f".{name}." in p.name for p in dump_dir.iterdir()):
            return True
        time.sleep(0.002)
    return False


class _InterruptWhenCompiling:
    """Interrupt the main thread as a kernel interrupt would, once XLA starts compiling graph ``name``
    (XLA writes the HLO before optimization to the dump when a compile starts)."""

    def __init__(self, name: str):
        from xla_lab.session import current

        self.dump_dir, self.name = current().runtime.dump_dir, name
        self.fired, self.stop = threading.Event(), threading.Event()

    def _watch(self):
        deadline = time.time() + 120
        while not self.stop.is_set() and time.time() < deadline:
            try:
                names = [p.name for p in self.dump_dir.iterdir()]
            except OSError:
                return
            if any(n.endswith("before_optimizations.txt") and f".{self.name}." in n for n in names):
                self.fired.set()
                _thread.interrupt_main()
                return
            time.sleep(0.002)

    def __enter__(self):
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()


CHAIN = "x = pw[0]\nfor i in range({n}):\n    x = x * 1.0001 + 0.5\n"  # n: a graph no other test compiled


def test_interrupt_during_the_end_of_cell_compile(ip, probe, fresh_dim):
    """Found: the interrupt surfaced inside xla_lab's end-of-cell sync and skipped the capture: no
    record, the sync hook left installed, later graphs named after the cell, xla_lab's frames in
    the traceback. Now it is held until the capture is recorded and raised as the cell's."""
    n = len(xla_lab.history())
    with _InterruptWhenCompiling(f"kbd_end_{fresh_dim}") as watch:
        result, c = run_xla(ip, CHAIN.format(n=2500), f"-q -n kbd_end_{fresh_dim}")
    assert watch.fired.is_set()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert len(xla_lab.history()) == n + 1 and c.error.startswith("KeyboardInterrupt")
    assert [s.cache for s in c.steps] == ["miss"] and c.steps[0].hlo_after  # the compile finished
    _workbench_is_clean()
    probe()


def test_interrupt_during_a_compile_in_the_cell(ip, probe, fresh_dim):
    """XLA's compile (C++) cannot be interrupted: Python raises the interrupt when it returns, at the
    user's sync; the graph ran, the cell stops there."""
    with _InterruptWhenCompiling(f"kbd_mid_{fresh_dim}") as watch:
        result, c = run_xla(ip, CHAIN.format(n=2400) + "torch_xla.sync()\nnot_reached = 1\n",
                            f"-q -n kbd_mid_{fresh_dim}")
    assert watch.fired.is_set()
    err = result.error_in_exec
    assert isinstance(err, KeyboardInterrupt)
    assert _cell_lines(err, c)[-1] == 4 and "not_reached" not in ip.user_ns
    assert [s.cache for s in c.steps] == ["miss"] and c.steps[0].sync_cause == "torch_xla.sync()"
    # the compile ran to its end: its profile is kept (or, never silently, dropped with a note)
    assert c.steps[0].artifacts.compile_profile is not None or any("compile profile" in n for n in c.notes)
    _workbench_is_clean()
    probe()


def test_interrupt_while_a_cell_waits_for_a_queue_job(ip, probe, fresh_dim, capsys):
    """Found: an interrupt in ``pre_execute``'s wait for a compiling job was caught by IPython as an
    'Error in callback' and the cell then ran *while the job compiled* (a foreground sync during a
    background compile fails or crashes). Now the wait goes on, says why, and the interrupt reaches
    the cell after the job: the cell raises KeyboardInterrupt without running.
    (tests/kernel/test_kernel_queue.py does the same in real kernels, at several moments.)"""
    q = xla_lab.queue()
    delay, q.idle_delay = q.idle_delay, 1e6
    settle(q)
    q.jobs.clear()  # jobs earlier tests' marked steps left behind
    h = fresh_dim + 2
    layers = ", ".join([f"torch.nn.Linear({h}, {h}), torch.nn.GELU()"] * 24)
    try:
        assert ip.run_cell(f"""
import xla_lab
torch.manual_seed(0)
qmodel = torch.nn.Sequential(torch.nn.Linear({fresh_dim}, {h}), {layers}, torch.nn.Linear({h}, 4)).to(dev)
qopt = torch.optim.AdamW(qmodel.parameters(), lr=1e-3)

@xla_lab.step
def qstep(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
""").success
        run_xla(ip, f"qx, qy = torch.randn(8, {fresh_dim}).to(dev), torch.randint(0, 4, (8,)).to(dev)\n"
                    "qloss = qstep(qmodel, qopt, qx, qy)", "-q")
        q.plan()
        assert any(j.state == "pending" for j in q.jobs)
        q._schedule(0.0)
        deadline = time.time() + 60
        while time.time() < deadline and not any(j.phase == "compiling" for j in q.jobs):
            time.sleep(0.002)
        job = next((j for j in q.jobs if j.phase == "compiling"), None)
        assert job is not None, (q.blocked, [(j.label, j.state, j.phase, j.error) for j in q.jobs])

        def interrupt_the_wait():
            while not q._busy:
                time.sleep(0.001)
            time.sleep(0.05)
            if job.phase == "compiling":
                _thread.interrupt_main()

        threading.Thread(target=interrupt_the_wait, daemon=True).start()
        capsys.readouterr()
        try:
            result = ip.run_cell("ran_after_the_job = qmodel[0].weight.sum()\ntorch_xla.sync()")
        except KeyboardInterrupt:  # pragma: no cover - only if the job ended before the interrupt
            pytest.skip("the job finished before the interrupt arrived")
        err = capsys.readouterr().err
        assert isinstance(result.error_in_exec, KeyboardInterrupt), result.error_in_exec
        assert "the cell did not run" in str(result.error_in_exec)
        assert "ran_after_the_job" not in ip.user_ns
        assert "cannot be interrupted; the interrupt reaches the cell when the job ends" in err
        assert "Error in callback" not in err
        assert job.state == "compiled"
        assert ip.run_cell("ran_after_the_job = qmodel[0].weight.sum()\ntorch_xla.sync()").success
        _, c = run_xla(ip, "qx, qy = torch.randn(8, {0}).to(dev), torch.randint(0, 4, (8,)).to(dev)\n"
                           "qloss = qstep(qmodel, qopt, qx, qy)".format(fresh_dim), "-q")
        assert [s.cache for s in c.steps] == ["precompiled"]
        ip.run_line_magic("xla", "queue run")  # the queue works on
    finally:
        settle(q)
        q.idle_delay = delay
        q.marked.clear()
        q.jobs.clear()
        q._unclaimed.clear()
    _workbench_is_clean()
    probe()


@pytest.mark.parametrize("body", [
    "n = sum(range(10))",  # no XLA work
    "import torch\ncpu = torch.ones(3) * 2\ncpu_sum = float(cpu.sum())",  # CPU tensors only
    "def helper(a):\n    return a @ pw\n\nclass Thing:\n    def go(self):\n        return helper(px)",  # definitions
])
def test_cells_without_xla_work(ip, probe, body):
    result, c = run_xla(ip, body, "-q")
    assert result.success and c.steps == [] and c.error is None and not c.notes
    _workbench_is_clean()
    probe()


# --- numerics ------------------------------------------------------------------------------------
TRAIN_SETUP = """
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(1234)
nmodel = torch.nn.Sequential(torch.nn.Linear(12, {h}), torch.nn.GELU(), torch.nn.LayerNorm({h}),
                             torch.nn.Linear({h}, 3)).to(dev)
nopt = torch.optim.AdamW(nmodel.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(99)
batches = [(torch.randn(8, 12, generator=gen), torch.randint(0, 3, (8,), generator=gen)) for _ in range(6)]
batches.append((torch.randn(5, 12, generator=gen), torch.randint(0, 3, (5,), generator=gen)))

def nstep(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
"""
TRAIN_CELLS = ["for x, y in batches[:1]:\n    loss = nstep(nmodel, nopt, x.to(dev), y.to(dev))\n    torch_xla.sync()",
               "for x, y in batches[1:6]:\n    loss = nstep(nmodel, nopt, x.to(dev), y.to(dev))\n    torch_xla.sync()",
               "for x, y in batches[6:]:\n    loss = nstep(nmodel, nopt, x.to(dev), y.to(dev))\n    torch_xla.sync()"]
PLAIN_SCRIPT = TRAIN_SETUP + "\n".join(TRAIN_CELLS) + """
import sys
torch.save([p.detach().cpu() for p in nmodel.parameters()] + [float(loss.detach())], sys.argv[1])
"""


def _params(ip) -> list:
    return [p.detach().cpu() for p in ip.user_ns["nmodel"].parameters()] + [float(ip.user_ns["loss"].detach())]


def plain_params(h: int, tmp_path) -> list:
    """The train loop in a process with plain torch_xla (no xla_lab, no IPython)."""
    import torch

    out = tmp_path / f"params_{h}.pt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PT_XLA"))}
    env["PJRT_DEVICE"] = "CPU"
    proc = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT.replace("{h}", str(h)), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)


def _assert_bitwise(a: list, b: list) -> None:
    import torch

    assert len(a) == len(b)
    for x, y in zip(a[:-1], b[:-1]):
        assert x.dtype == y.dtype and torch.equal(x, y)
    assert a[-1] == b[-1]  # the last loss, as a Python float


def test_train_loop_is_bitwise_identical_under_xla_cells(ip, tmp_path):
    assert ip.run_cell(TRAIN_SETUP.replace("{h}", "16")).success
    for cell in TRAIN_CELLS:
        result, c = run_xla(ip, cell, "-q")
        assert result.success and c.error is None
    _assert_bitwise(_params(ip), plain_params(16, tmp_path))


def test_train_loop_is_bitwise_identical_with_the_queue_on(ip, tmp_path):
    q = xla_lab.queue()
    delay, q.idle_delay = q.idle_delay, 1e6
    settle(q)
    q.jobs.clear()  # jobs earlier tests' marked steps left behind
    try:
        assert ip.run_cell(TRAIN_SETUP.replace("{h}", "18").replace("def nstep", "@xla_lab.step\ndef nstep")
                           .replace("import torch, torch_xla", "import torch, torch_xla, xla_lab")).success
        assert ip.user_ns["nstep"].problems == []
        caches = []
        for cell in TRAIN_CELLS:
            result, c = run_xla(ip, cell, "-q")
            assert result.success and c.error is None
            caches += [s.cache for s in c.steps]
            ip.run_line_magic("xla", "queue run")
        assert any(j.state == "compiled" for j in q.jobs), [(j.label, j.state, j.error) for j in q.jobs]
        assert "precompiled" in caches  # a real step ran a graph the queue compiled
        _assert_bitwise(_params(ip), plain_params(18, tmp_path))
    finally:
        settle(q)
        q.idle_delay = delay
        q.marked.clear()
        q.jobs.clear()
        q._unclaimed.clear()


# --- long sessions -------------------------------------------------------------------------------
def test_artifact_store_is_an_lru_with_a_cap(ip, probe, xla_cell, fresh_dim):
    from xla_lab.capture.store import EVICTED
    from xla_lab.session import current

    store = current().store
    saved = store.max_graphs, store.max_bytes
    store.max_graphs, store.max_bytes = 3, 0
    try:
        caps = []
        for k in range(5):
            d = fresh_dim + 200 + k
            caps.append(xla_cell(f"lru{k} = (torch.ones({d}, 3).to(dev) * 2).sum()", "-q"))
            assert len(store.kept()) <= 3
        assert store.evictions >= 2
        old, new = caps[0].steps[-1], caps[-1].steps[-1]
        assert old.artifacts.evicted and old.hlo_before == EVICTED and old.ir_text is None
        assert not new.artifacts.evicted and new.hlo_before.startswith("HloModule")
        # Captures that ran an evicted graph still render, and say so.
        from xla_lab.view.static_html import report_html
        from xla_lab.view.report import to_text

        from xla_lab.view.panel_model import panel_model

        assert "evicted to bound memory" in report_html([caps[0]])
        to_text(caps[0])
        json.dumps(panel_model(caps[0]))
        assert xla_lab.CellCapture.from_json(caps[0].to_json()).steps[-1].artifacts.evicted
        # The byte cap: one graph's text is over it, so only the most recent graph keeps its text.
        store.max_graphs, store.max_bytes = 0, 1
        xla_cell(f"lru_b = (torch.ones({fresh_dim + 300}, 3).to(dev) * 5).sum()", "-q")
        assert len(store.kept()) == 1 and store.size_bytes() > 0
    finally:
        store.max_graphs, store.max_bytes = saved
    assert ip.run_cell("%xla status").success


def test_store_forgets_the_oldest_stubs_beyond_its_bound(ip, probe, xla_cell, fresh_dim):
    """Evicted graphs keep a small stub, at most ``max_stubs`` of them (10 per kept graph): a session
    compiling new graphs all day does not grow by a stub per graph."""
    from xla_lab.session import current

    store = current().store
    saved = store.max_graphs, store.max_bytes
    store.max_graphs, store.max_bytes = 1, 0
    try:
        assert store.max_stubs == 10
        hashes = []
        for k in range(14):
            c = xla_cell(f"stub{k} = (torch.ones({fresh_dim + 400 + k}, 2).to(dev) * 3).sum()", "-q")
            hashes.append(c.steps[-1].graph_hash)
            assert len(store) - len(store.kept()) <= store.max_stubs
        assert store.get(hashes[0]) is None  # forgotten: the oldest stub went first
        assert store.get(hashes[-2]).evicted and not store.get(hashes[-1]).evicted
        # A capture whose graph's stub is gone still renders, and its HLO says the graph was evicted.
        from xla_lab.capture.store import EVICTED
        from xla_lab.view.report import to_text

        oldest = xla_lab.history()[-14]
        assert oldest.steps[-1].graph_hash == hashes[0] and oldest.steps[-1].hlo_before == EVICTED
        assert "1 step, 1 compiled" in to_text(oldest)
    finally:
        store.max_graphs, store.max_bytes = saved


def test_dump_directory_and_logs_stay_empty_between_cells(ip, probe, xla_cell, fresh_dim):
    from xla_lab.session import current

    s = current()
    xla_cell(f"dd1 = (torch.ones({fresh_dim}, 5).to(dev) * 3).sum()\nfloat(dd1)", "-q")
    ip.run_cell(f"dd2 = (torch.ones({fresh_dim}, 6).to(dev) * 3).sum()\ntorch_xla.sync()")  # a plain cell
    assert list(s.runtime.dump_dir.iterdir()) == []
    assert s.runtime.debug_file.stat().st_size == 0
    if s.runtime.ir_log:
        assert s.runtime.ir_file.stat().st_size == 0
    files = [p for p in s.runtime.workdir.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1 << 20, files


def test_history_keeps_the_last_captures_up_to_its_cap(ip, capsys):
    """A capture is small, but a day of cells adds up: the oldest are dropped past XLA_LAB_MAX_HISTORY."""
    from xla_lab import session as session_mod

    s = session_mod.get()
    old_cap, old_dropped = s.max_history, s.dropped_history
    s.max_history = len(s.history) + 2
    try:
        for i in range(4):
            assert ip.run_cell(f"%%xla -q -n capped\nimport torch, torch_xla\ncap_t = torch.ones(3, device=torch_xla.device()) * {i}").success
        assert len(s.history) == s.max_history and s.dropped_history == old_dropped + 2
        assert s.history[-1].graph_name == "capped"
        ip.run_line_magic("xla", "history")
        assert "older captures dropped" in capsys.readouterr().out
    finally:
        s.max_history, s.dropped_history = old_cap, old_dropped
