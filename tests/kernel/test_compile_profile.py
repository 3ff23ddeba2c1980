"""Compile profiles (``profile/compile_profile.py``, ``compile_window.py``, ``compile_breakdown.py``)
on real compiles: every compile of a cell gets one, its phases add up to torch_xla's CompileTime, its
kernels are the fusion map's, its lines add up to its kernels; the session is open only while the
cell's syncs may compile; the advice rests on measured numbers; every renderer shows it."""

import contextlib

import pytest
import torch

import xla_lab
from xla_lab import settings
from xla_lab.profile.compile_breakdown import NO_KERNEL_EVENTS, compile_views
from xla_lab.view.panel_model import panel_model
from xla_lab.view.report import Report
from xla_lab.view.static_html import capture_html

SETUP = """
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(0)
cp_model = torch.nn.Sequential(torch.nn.Linear({d}, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(dev)
cp_opt = torch.optim.SGD(cp_model.parameters(), lr=0.1)
cp_x = torch.randn(8, {d}).to(dev)
"""
STEP = """
for i in range({n}):
    loss = cp_model(cp_x).pow(2).mean()
    loss.backward(); cp_opt.step(); cp_opt.zero_grad()
    torch_xla.sync()
"""


@contextlib.contextmanager
def _counted_openings():
    """Every compile window that opens a profiler session while the block runs (once per opening)."""
    from xla_lab.profile import compile_window

    opened = []
    original = compile_window.CompileWindow._open

    def counted(self):
        opened.append(self)
        return original(self)

    compile_window.CompileWindow._open = counted
    try:
        yield opened
    finally:
        compile_window.CompileWindow._open = original


def _misses(c):
    return [s for s in c.steps if s.cache == "miss"]


def _check_profile(step):
    """What every compile profile promises, on one compiled step."""
    p = step.artifacts.compile_profile
    assert p is not None, "no compile profile"
    # the phases cut torch_xla's CompileTime of this compile into pieces that add up to it
    assert abs(sum(ph["ns"] for ph in p["phases"]) - p["compile_ns"]) <= 1e-6 * p["compile_ns"]
    assert abs(p["compile_ns"] / 1e9 - step.timings["compile_s"]) <= 0.01 * step.timings["compile_s"] + 1e-3
    assert {"HLO passes", "kernel emission", "LLVM codegen"} <= {ph["name"] for ph in p["phases"]}
    assert p["explained"] >= 0.95 and 0 < p["traced"] <= p["explained"]
    assert p["passes"] and p["pipelines"] and p["codegen"]["functions"] > 0
    # after the compile, the sync may wait for the step's own execution (its donated inputs freed on the
    # syncing thread): never longer than that execution took
    assert isinstance(p["execution_wait_ns"], float) and 0 <= p["execution_wait_ns"]
    assert p["execution_wait_ns"] <= step.timings["execute_s"] * 1e9 + 5e6
    # ... which the step's timings count as its own, not as tracing
    assert step.timings["execution_wait_s"] == p["execution_wait_ns"] / 1e9 and step.timings["trace_s"] >= 0
    counts = p["counts"]
    assert counts["kernels"] == len(step.artifacts.fusions) and counts["hlo_before"] > 0 and counts["hlo_after"] > 0
    # every kernel of the optimized module has a compile time or a stated reason, and nothing else does
    names = {k["name"] for k in step.artifacts.fusions}
    timed = {k["name"] for k in p["kernels"]}
    assert timed <= names
    assert bool(timed) == PER_KERNEL and p["kernel_events"] == PER_KERNEL
    return p


def _per_kernel() -> bool:
    """torch_xla 2.9's XLA records an emission event per kernel; 2.8's emits every kernel into one LLVM
    module and records none (its compile profiles say so instead)."""
    import torch_xla

    return tuple(int(x) for x in torch_xla.__version__.split(".")[:2]) >= (2, 9)


PER_KERNEL = _per_kernel()
needs_kernel_times = pytest.mark.skipif(not PER_KERNEL, reason="this torch_xla's XLA records no per-kernel compile events")


def test_every_compile_of_a_cell_has_a_profile_that_adds_up(ip, xla_cell, fresh_dim):
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    # the train step, then work left pending for the end-of-cell sync (the window closed on the steady loop
    # opens again for it)
    c = xla_cell(STEP.format(n=3) + "cp_eval = cp_model(torch.randn(4, %d).to(dev)).sum()\n" % fresh_dim)
    misses = _misses(c)
    assert len(misses) == 2 and misses[1].sync_cause.startswith("end of cell")
    for step in misses:
        _check_profile(step)
    assert not [n for n in c.notes if "compile profile" in n]
    (view,) = [v for v in compile_views(c) if v.step == misses[0].index]
    untimed = {n for names in view.untimed.values() for n in names}
    if not PER_KERNEL:
        assert list(view.untimed) == [NO_KERNEL_EVENTS] and not view.kernels and not view.lines
        return
    assert {k.name for k in view.kernels} | untimed == {k["name"] for k in misses[0].artifacts.fusions}
    # per-line (and per-op) compile times add up to the kernel times they came from
    kernels = sum(k.total_ns for k in view.kernels)
    assert abs(sum(ln.total_ns for ln in view.lines) - kernels) <= 1e-6 * kernels
    assert abs(sum(ln.total_ns for ln in view.model_lines) - kernels) <= 1e-6 * kernels
    assert abs(sum(ns for _, ns, _ in view.ops) - kernels) <= 1e-6 * kernels
    assert view.lines[0].label == f"[{c.execution_count}]:3"  # the line of the model's forward and backward


@needs_kernel_times
def test_a_python_loop_unrolled_into_the_graph_is_ranked_first(ip, xla_cell, fresh_dim):
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    # 60 passes of 4 ops (roll, cos, add, softmax) each, every pass a kernel of its own (another shift)
    c = xla_cell("""h = cp_model(cp_x)
y = h.repeat(1, 16)
for i in range(60):
    y = (y + y.roll(i % 13 + 1, dims=-1).cos()).softmax(-1)
loss = h.sum() + y.sum()
torch_xla.sync()
""")
    (view,) = compile_views(c)
    top = view.lines[0]
    assert top.label == f"[{c.execution_count}]:4", [(ln.label, ln.share) for ln in view.lines]
    assert top.share > 0.5 and len(top.kernels) >= 10
    heavy = [a for a in c.advice if a["kind"] == "heavy_line"]
    assert heavy and heavy[0]["line"]["line"] == 4
    text = Report(c).text()
    assert "fori_loop or scan compiles the body once" in text and f"[{c.execution_count}]:4" in text


def test_the_session_closes_on_a_steady_loop_and_opens_again_after_a_compile(ip, xla_cell, fresh_dim):
    """Open while the loop may compile; closed after two cache hits in a row (a compile then has no
    profile, and says why); open again after that compile, so the next one is profiled."""
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    c = xla_cell(f"""for n in (8, 8, 8, 8, 8, 5, 3):
    loss = cp_model(torch.randn(n, {fresh_dim}).to(dev)).pow(2).mean()
    loss.backward(); cp_opt.step(); cp_opt.zero_grad()
    torch_xla.sync()
""")
    misses = _misses(c)
    assert [s.index for s in misses][-2:] == [5, 6] and misses[0].index <= 1
    _check_profile(misses[0])
    assert misses[-2].artifacts.compile_profile is None
    assert any("no compile profile for step(s) 5: compiled after the cell's loop had hit the cache" in n for n in c.notes)
    _check_profile(misses[-1])
    # the two cache hits the session recorded have what their syncs waited for their execution (donated
    # inputs freed on the syncing thread: 0 when the execution had let go first); later hits, unrecorded, None
    hits = [s for s in c.steps if s.cache == "hit"]
    assert len(hits) >= 3
    for step in hits[:2]:
        wait = step.timings["execution_wait_s"]
        assert isinstance(wait, float) and 0 <= wait <= step.timings["execute_s"] + 5e-3, step.timings
    assert all(s.timings["execution_wait_s"] is None for s in hits[2:])


def test_a_cached_loop_run_again_starts_with_the_session_closed(ip, xla_cell, fresh_dim):
    """A cell whose last run compiled nothing runs again with no session (ending one would be most of a
    short loop's cost); a compile it then makes has no profile and says why, and the next one has."""
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    loop = f"""for n in sizes:
    loss = cp_model(torch.randn(n, {fresh_dim}).to(dev)).pow(2).mean()
    loss.backward(); cp_opt.step(); cp_opt.zero_grad()
    torch_xla.sync()
"""
    ip.user_ns["sizes"] = (8, 8, 8, 8)
    xla_cell(loop)  # compiles
    xla_cell(loop)  # all cached
    with _counted_openings() as opened:
        cached = xla_cell(loop)
        assert cached.compiles == 0 and not opened  # no session at all
        ip.user_ns["sizes"] = (8, 5, 3)
        changed = xla_cell(loop)
    misses = _misses(changed)
    assert [s.index for s in misses] == [1, 2] and len(opened) == 1
    assert misses[0].artifacts.compile_profile is None and misses[0].fusions  # (the HLO is there)
    assert any("no compile profile for step(s) 1: the cell's last run compiled nothing" in n for n in changed.notes)
    _check_profile(misses[1])


def test_the_end_of_cell_sync_opens_the_session_only_for_pending_work(ip, xla_cell, fresh_dim):
    """The loop's second run (after the run that compiled) opens the session once, at its start; the
    loop closes it, and the cell's end, with nothing pending, leaves it closed. Work left after the loop
    opens it again, and that compile has its profile."""
    from xla_lab.profile import compile_window

    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    loop = STEP.format(n=4)
    assert _misses(xla_cell(loop))  # compiles
    with _counted_openings() as opened:
        cached = xla_cell(loop)
        assert cached.compiles == 0 and len(opened) == 1 and opened[0].closed_by_steady == 1
        assert not compile_window._work_pending()
        opened.clear()  # (a new cell: it starts open, as its loop may compile)
        pending = xla_cell(STEP.format(n=4) + "cp_eval = cp_model(torch.randn(3, %d).to(dev)).sum()\n" % fresh_dim)
    assert len(opened) == 2 and opened[0] is opened[1] and opened[0].closed_by_steady == 1
    (miss,) = _misses(pending)
    assert miss.sync_cause.startswith("end of cell")
    _check_profile(miss)


def test_switched_off_there_is_no_session_and_no_note(ip, xla_cell, fresh_dim):
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    try:
        settings.reload({"XLA_LAB_COMPILE_PROFILE": "0"})
        c = xla_cell(STEP.format(n=1))
    finally:
        settings.reload()
    assert _misses(c) and all(s.artifacts.compile_profile is None for s in _misses(c))
    assert not [n for n in c.notes if "compile profile" in n]
    assert not [a for a in c.advice if a["kind"] in ("scan_layers", "heavy_line")]
    assert "compile of step" not in Report(c).text()


def test_profile_flag_shares_its_session_with_the_compile_profile(ip, xla_cell, fresh_dim):
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    c = xla_cell(STEP.format(n=2), "--profile")
    assert c.profile and c.profile["steps"]
    _check_profile(_misses(c)[0])


def test_a_running_user_trace_costs_the_profile_not_the_cell(ip, xla_cell, fresh_dim, tmp_path):
    import torch_xla.debug.profiler as xp

    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    xp.start_server(0) if False else None
    xp.start_trace(str(tmp_path))
    try:
        c = xla_cell(STEP.format(n=1))
    finally:
        xp.stop_trace()
    assert _misses(c) and _misses(c)[0].artifacts.compile_profile is None
    assert any("no compile profile" in n and "xp.start_trace" in n for n in c.notes)
    assert c.error is None


def test_every_renderer_shows_the_compile(ip, xla_cell, fresh_dim):
    from rich.console import Console

    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    c = xla_cell(STEP.format(n=2))
    report = Report(c)
    text = report.text()  # a cell's summary: the compile in a few lines
    assert "compile of step 0" in text and "LLVM codegen" in text and "named phases" not in text
    assert ("most kernel compile time: [" in text) == PER_KERNEL
    full = Report(c, max_rows=None).text()  # %xla show: every phase, the top lines
    assert "named phases: " in full and "scheduling and buffer assignment" in full
    assert ("kernel compile time by cell line" in full) == PER_KERNEL
    console = Console(record=True, width=200)
    console.print(report)
    assert "compile of step 0" in console.export_text()
    assert "compile of step 0" in report.html()
    model = panel_model(c)
    (entry,) = model["compile"]
    assert entry["step"] == 0 and entry["untimed"]
    if PER_KERNEL:
        assert entry["kernels"] and entry["lines"][0]["label"] == f"[{c.execution_count}]:3"
    assert abs(sum(ph["ns"] for ph in entry["phases"]) - entry["compile_ns"]) <= 1e-6 * entry["compile_ns"]
    assert "compile of step 0" in capture_html(c)


def test_recompiles_for_new_shapes_get_advice_with_their_line(ip, xla_cell, fresh_dim):
    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    c = xla_cell(f"""for n in (8, 5, 3):
    loss = cp_model(torch.randn(n, {fresh_dim}).to(dev)).pow(2).mean()
    torch_xla.sync()
""")
    (shapes,) = [a for a in c.advice if a["kind"] == "shapes"]
    assert shapes["evidence"]["compiles"] == 2 and shapes["line"]["line"] == 3
    assert "pad or bucket" in Report(c).text()


def test_scan_whatif_measures_both_and_touches_nothing_of_the_user(ip, xla_cell, fresh_dim):
    import torch_xla

    assert ip.run_cell(f"""
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear({fresh_dim}, {fresh_dim})
    def forward(self, x):
        return torch.relu(self.fc(x)) + x
class Stack(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(n))
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
stack_model = Stack(4).to(dev)
stack_opt = torch.optim.AdamW(stack_model.parameters(), lr=1e-3, weight_decay=0.1)
stack_x = torch.randn(2, {fresh_dim}).to(dev)
""").success
    c = xla_cell("stack_model(stack_x).sum().backward()\ntorch_xla.sync()\n")
    (advice,) = [a for a in c.advice if a["kind"] == "scan_layers"]
    assert advice["evidence"]["expr"] == "stack_model.layers" and advice["evidence"]["layers"] == 4
    before = [p.detach().cpu().clone() for p in ip.user_ns["stack_model"].parameters()]
    seed = torch_xla._XLAC._xla_get_rng_seed(str(torch_xla.device()))
    rng = torch.get_rng_state()
    result = ip.run_line_magic("xla", "whatif scan stack_model.layers")  # (on the call the cell recorded)
    assert result.unrolled_s > 0 and result.scanned_s > 0 and result.layers == 4
    assert result.input_shape == (2, fresh_dim) and "as the model passed them" in result.text()
    assert result.optimizer == "AdamW" and "could not be built" not in result.text()  # the notebook's
    # optimizer of those layers (its class and settings) updates the copy
    assert not ip.user_ns["stack_opt"].state  # ... a copy of it: the user's has no state yet
    assert result.step_compile_s == advice["evidence"]["compile_s"] and result.predicted_step_s is not None
    assert "scanned" in result.text() and ("recommended" in result.text())
    after = [p.detach().cpu() for p in ip.user_ns["stack_model"].parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert torch_xla._XLAC._xla_get_rng_seed(str(torch_xla.device())) == seed and torch.equal(torch.get_rng_state(), rng)


def test_whatif_bad_input_gets_one_clear_line(ip):
    from IPython.core.error import UsageError
    import pytest

    for line, words in [("whatif scan", "usage"), ("whatif scan nothing_here input=2x3", "cannot evaluate"),
                        ("whatif scan torch input=2xa", "input shape"), ("whatif scan torch input=2x3", "not a stack")]:
        with pytest.raises(UsageError, match=words):
            ip.run_line_magic("xla", line)


def test_a_trace_started_in_the_cell_gets_the_profiler_and_works(ip, xla_cell, fresh_dim, tmp_path):
    """XLA allows one profiler session: a ``xp.start_trace`` inside a cell ends the compile profile's
    window first, so the user's trace records as it would without xla_lab."""
    import os

    import torch_xla.debug.profiler as xp

    assert ip.run_cell(SETUP.format(d=fresh_dim)).success
    ip.user_ns["trace_dir"] = str(tmp_path)
    c = xla_cell(STEP.format(n=1) + f"""import torch_xla.debug.profiler as xp
xp.start_trace(trace_dir)
cp_y = cp_model(torch.randn(3, {fresh_dim}).to(dev)).sum()
torch_xla.sync()
xp.stop_trace()
""")
    misses = _misses(c)
    assert len(misses) == 2
    _check_profile(misses[0])  # compiled before the user's trace began
    assert misses[1].artifacts.compile_profile is None
    assert any("no compile profile for step(s) 1" in n and "xp.start_trace) began in the cell" in n for n in c.notes)
    assert any(files for _, _, files in os.walk(tmp_path))  # the user's trace was written
    assert not hasattr(xp.start_trace, "__wrapped__")  # torch_xla's own function is back
