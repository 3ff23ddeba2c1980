"""The precompile queue on real torch_xla graphs: shadows leave the user's objects untouched, the
real step then compiles nothing, cells wait for a job in flight and are told, failures stay in the
job, and the controls work."""

from __future__ import annotations

import copy
import random
import time

import pytest
import torch

from queue_helpers import settle, wait_until_done
from xla_cells import run_xla

SETUP = """
import torch, torch_xla, xla_lab
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear({d}, {h}), torch.nn.Dropout(0.1), torch.nn.GELU(),
                            torch.nn.Linear({h}, 4)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

@xla_lab.step
def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

def batch(n):
    return torch.randn(n, {d}).to(dev), torch.randint(0, 4, (n,)).to(dev)
"""


@pytest.fixture
def queue(ip):
    """The kernel's queue, with the idle timer out of the way (tests run jobs explicitly) and the
    marked steps of the test forgotten afterwards."""
    q = xla_lab_queue()
    delay = q.idle_delay
    q.idle_delay = 1e6
    settle(q)
    q.jobs.clear()  # jobs other test modules' marked steps left behind
    yield q
    settle(q)
    q.idle_delay = delay
    q.paused = False
    q.marked.clear()
    q.jobs.clear()
    q._unclaimed.clear()


def xla_lab_queue():
    import xla_lab

    return xla_lab.queue()


def uncached() -> int:
    import torch_xla.debug.metrics as met

    return met.counter_value("UncachedCompile") or 0


def snapshot(ns) -> dict:
    """Everything of the user's that a job must not change, copied to the host."""
    import torch_xla

    model, opt = ns["model"], ns["opt"]

    def host(v):
        if isinstance(v, torch.Tensor):
            return v.detach().cpu().clone()
        if isinstance(v, dict):
            return {k: host(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(host(x) for x in v)
        return copy.deepcopy(v)

    plain = {k: v for k, v in vars(model).items() if k not in ("_parameters", "_buffers", "_modules")}
    return {
        "params": [host(p) for p in model.parameters()],
        "grads": [None if p.grad is None else host(p.grad) for p in model.parameters()],
        "opt_state": host(opt.state_dict()),
        "opt_attrs": {k: host(v) for k, v in vars(opt).items() if k not in ("state", "param_groups")},
        "model_attrs": {k: repr(v) for k, v in plain.items()},
        "training": [m.training for m in model.modules()],
        "rng_torch": torch.get_rng_state().clone(),
        "rng_xla": torch_xla._XLAC._xla_get_rng_seed("xla:0"),
        "rng_python": random.getstate(),
    }


def assert_same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_job_leaves_user_state_identical_and_the_real_step_compiles_nothing(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    _, first = run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    assert [s.cache for s in first.steps] == ["miss"]
    ip.run_line_magic("xla", f"queue add train_step x=5x{fresh_dim} y=5")
    queue.plan()  # post_execute planned already; planning again adds nothing
    assert [j.reason for j in queue.jobs] == ["steady state (the first step created optimizer state)",
                                              "added by hand"]
    before = snapshot(ip.user_ns)
    queue.run_pending()
    after = snapshot(ip.user_ns)
    assert_same(before, after)
    done = [j for j in queue.jobs if j.state == "compiled"]
    assert len(done) == 2, [(j.label, j.state, j.error) for j in queue.jobs]
    assert all(j.compile_s > 0 and j.shadow_bytes > 0 for j in done)
    assert queue.shadow_bytes_peak > 0

    compiles = uncached()
    _, steady = run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    _, tail = run_xla(ip, "x, y = batch(5)\nloss = train_step(model, opt, x, y)", "-q")
    assert uncached() == compiles  # both real steps ran graphs the jobs compiled
    for capture in (steady, tail):
        (step,) = capture.steps
        assert step.cache == "precompiled" and step.saved_s and step.saved_s > 0
        assert step.hlo_after and step.fusions  # the job's HLO is shown for the real step
    assert sum(j.used for j in queue.jobs) == 2
    assert queue.saved_s == pytest.approx(steady.steps[0].saved_s + tail.steps[0].saved_s)
    from xla_lab.view.report import to_text

    assert "1 precompiled (saved" in to_text(steady)


def test_a_cell_started_during_a_job_waits_and_is_told(ip, queue, fresh_dim, capsys):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2).replace(
        "torch.nn.Linear({h}, 4)".format(h=fresh_dim + 2),
        ", ".join([f"torch.nn.Linear({fresh_dim + 2}, {fresh_dim + 2}), torch.nn.GELU()"] * 24)
        + f", torch.nn.Linear({fresh_dim + 2}, 4)"))
    run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    queue.plan()
    assert any(j.state == "pending" for j in queue.jobs)
    capsys.readouterr()
    queue._schedule(0.0)
    deadline = time.time() + 60
    while time.time() < deadline and not any(j.phase == "compiling" for j in queue.jobs):
        time.sleep(0.005)
    job = next(j for j in queue.jobs if j.phase == "compiling")
    result = ip.run_cell("after_the_job = 1")  # pre_execute: must wait for the compile
    assert result.success
    out = capsys.readouterr().out
    assert "waiting for the precompile job" in out and job.label in out
    assert "waited" in out
    assert job.state == "compiled"
    assert queue.last_wait is not None and queue.last_wait.seconds > 0
    _, capture = run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    assert capture.steps[0].cache == "precompiled"


def test_a_failing_job_is_reported_and_harms_nothing(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2) + """
@xla_lab.step
def picky_step(model, opt, x, y):
    out = train_step.fn(model, opt, x, y)
    if x.shape[0] == 3:
        print("about to fail")
        raise ValueError("three is not a batch size")
    return out
""")
    run_xla(ip, "x, y = batch(8)\nloss = picky_step(model, opt, x, y)", "-q")
    before = snapshot(ip.user_ns)
    ip.run_line_magic("xla", f"queue add picky_step x=3x{fresh_dim} y=3")
    queue.run_pending()
    assert_same(before, snapshot(ip.user_ns))
    failed = [j for j in queue.jobs if j.state == "failed"]
    assert len(failed) == 1 and "three is not a batch size" in failed[0].error
    assert "about to fail" in failed[0].output
    import torch_xla

    assert not any(torch_xla._XLAC._check_device_tensor_need_materialization(""))  # nothing left behind
    from xla_lab.view.queue_view import to_text

    assert "failed" in to_text(queue) and "three is not a batch size" in to_text(queue)
    _, capture = run_xla(ip, "x, y = batch(8)\nloss = picky_step(model, opt, x, y)\nfloat(loss)", "-q")
    assert capture.error is None


def test_a_step_whose_state_lost_a_value_fails_in_the_users_code(ip, queue, fresh_dim):
    """A parameter XLA lost (see capture/recovery.py) is a LostTensor stand-in: the marked step's
    bookkeeping skips it, the step raises in the user's own code, and the queue keeps working."""
    from xla_lab.capture.recovery import LostTensorError, replace_with_stand_in

    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    replace_with_stand_in(ip.user_ns["model"][0].weight, "lost in a test")
    result, capture = run_xla(ip, "x, y = batch(8)\nloss2 = train_step(model, opt, x, y)", "-q")
    err = result.error_in_exec
    assert isinstance(err, LostTensorError) and "lost in a test" in str(err)
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "train_step" in frames  # raised in the user's step, not in xla_lab's bookkeeping
    queue.run_pending()  # a job planned from that state fails on its own; nothing else breaks
    assert all(j.state in ("compiled", "failed") for j in queue.jobs)
    assert ip.run_cell("%xla queue").success
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))  # a new model: the step works again
    _, capture = run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)\nfloat(loss)", "-q")
    assert capture.error is None


def test_pause_resume_and_clear(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    ip.run_line_magic("xla", "queue pause")
    queue.idle_delay = 0.0
    queue.kernel_idle()  # what post_execute does
    time.sleep(0.2)
    assert queue.paused and queue._timer is None
    assert all(j.state == "pending" for j in queue.jobs) and queue.jobs
    ip.run_line_magic("xla", "queue clear")
    from xla_lab.view.queue_view import to_text

    # the CPU client cannot read the persistent cache back, and the queue says so
    assert "persistent compile cache: off: the CPU client cannot load compiled graphs back" in to_text(queue)
    assert not [j for j in queue.jobs if j.state == "pending"]
    queue.idle_delay = 1e6
    ip.run_line_magic("xla", f"queue add train_step x=6x{fresh_dim} y=6")
    ip.run_line_magic("xla", "queue resume")
    wait_until_done(queue)
    assert [j.state for j in queue.jobs] == ["compiled"]


def test_steps_that_break_the_rule_are_explained_and_never_run(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2) + """
losses = []

@xla_lab.step
def global_step(x, y):
    global last_loss
    opt.zero_grad()
    last_loss = torch.nn.functional.cross_entropy(model(x), y)
    losses.append(last_loss)
    return last_loss
""")
    step = ip.user_ns["global_step"]
    problems = " | ".join(step.problems)
    assert "assigns the global 'last_loss'" in problems
    assert "uses the global 'opt'" in problems and "uses the global 'model'" in problems
    assert "uses the global 'losses'" in problems
    run_xla(ip, "x, y = batch(8)\nloss = global_step(x, y)", "-q")
    queue.plan()
    assert not [j for j in queue.jobs if j.variant.step is step]
    from xla_lab.view.queue_view import to_text

    assert "global_step is not precompiled" in to_text(queue)


def test_planner_finds_tail_batches_buckets_modes_and_related_steps(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2) + """
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(21, 6, {d}), torch.randint(0, 4, (21, 6)))
loader = DataLoader(data, batch_size=8)

@xla_lab.step(buckets=[6, 12, 24], bucket_dims={{"x": 1, "y": 1}})
def seq_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    return loss

@xla_lab.step(mode="eval")
def eval_step(model, x):
    with torch.no_grad():
        return model(x).argmax(-1)
""".format(d=fresh_dim))
    from xla_lab.precompile.planner import plan

    ip.run_cell("xb, yb = next(iter(loader))\nloss = seq_step(model, opt, xb.to(dev), yb.to(dev))\ntorch_xla.sync()")
    variants = plan(queue.steps(), ip.user_ns)
    by_reason = {v.reason: v for v in variants}
    steady = next(v for r, v in by_reason.items() if r.startswith("steady state"))
    assert steady.shapes == {"x": (8, 6, fresh_dim), "y": (8, 6)} and steady.training is True
    tail = by_reason["last short batch of loader (5 of 8)"]
    assert tail.shapes == {"x": (5, 6, fresh_dim), "y": (5, 6)}
    assert by_reason["declared bucket 12"].shapes == {"x": (8, 12, fresh_dim), "y": (8, 12)}
    assert "declared bucket 6" not in by_reason  # the current shape is the steady-state variant
    related = by_reason["eval_step with the arguments of seq_step"]
    assert related.shapes == {"x": (8, 6, fresh_dim)} and related.training is False
    order = [v.reason for v in variants]
    assert order.index(steady.reason) < order.index(tail.reason) < order.index("declared bucket 12")
    # The eval job runs on a shadow in eval mode and leaves the user's model in train mode.
    queue.plan()
    queue.run_pending()
    assert ip.user_ns["model"].training
    assert {j.state for j in queue.jobs} <= {"compiled", "cached"}, [(j.label, j.error) for j in queue.jobs]
    compiles = uncached()
    ip.run_cell("model.eval()\npred = eval_step(model, xb.to(dev))\ntorch_xla.sync()\nmodel.train()")
    assert uncached() == compiles


def test_live_queue_widget_follows_the_queue_and_keeps_a_static_fallback(ip, queue, fresh_dim):
    from xla_lab.view.queue_view import live_widget

    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    widget = live_widget(queue, min_interval=0.0)
    assert "pending" in widget.value and "steady state" in widget.value
    queue.run_pending()
    time.sleep(0.05)
    assert "compiled, unused" in widget.value and "pending" not in widget.value.split("</b>", 1)[1]
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "compiled, unused" in bundle["text/plain"] and "<table>" in bundle["text/html"]
    assert "0x" not in bundle["text/plain"]


def test_plain_cells_that_run_a_precompiled_graph_use_it(ip, queue, fresh_dim):
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    queue.run_pending()
    (job,) = [j for j in queue.jobs if j.state == "compiled"]
    compiles = uncached()
    ip.run_cell("x, y = batch(8)\nloss = train_step(model, opt, x, y)\ntorch_xla.sync()")
    assert uncached() == compiles
    assert job.used == 1 and job.saved_s == pytest.approx(job.compile_s)


def test_a_cell_that_waited_says_so_in_its_capture(ip, queue, fresh_dim):
    from xla_lab.precompile.queue import Wait

    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2))
    original = queue.kernel_busy

    def busy():  # as if a job had been compiling when the cell started
        in_flight = original()
        queue.last_wait = Wait(1.25, "train_step(x 8, y 8) train")
        return in_flight

    queue.kernel_busy = busy
    try:
        _, capture = run_xla(ip, "x, y = batch(8)\nloss = train_step(model, opt, x, y)", "-q")
    finally:
        del queue.kernel_busy
    assert any("waited 1.250 s for the precompile job train_step(x 8, y 8) train" in n for n in capture.notes)


def test_functions_marked_before_the_extension_loaded_are_found(ip, queue):
    """``@xla_lab.step`` before ``%load_ext xla_lab`` (or in a kernel where it was unloaded) marks the
    function; loading then finds it in the notebook's namespace. A re-run definition replaces it."""
    from xla_lab import session
    from xla_lab.precompile.marked import MarkedFunction, mark

    early = mark(lambda x: x * 2)
    early.name = "early_step"
    ip.user_ns["early_step"] = early
    try:
        session.current().loaded(ip.user_ns)
        assert queue.marked["early_step"] is early and queue._on_call in early.listeners
        again = mark(lambda x: x * 3)
        again.name = "early_step"
        queue.add(again)
        assert queue.marked["early_step"] is again and queue._on_call not in early.listeners
        assert isinstance(again, MarkedFunction)
    finally:
        del ip.user_ns["early_step"]


BN_SETUP = """
import torch, torch_xla, xla_lab
from torch import nn
dev = torch_xla.device()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, {c}, 3, padding=1), nn.BatchNorm2d({c}), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear({c}, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum={momentum})

@xla_lab.step
def bn_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

def images(n):
    return torch.randn(n, 3, 8, 8).to(dev), torch.randint(0, 10, (n,)).to(dev)
"""


@pytest.mark.parametrize("momentum", [0.9, 0.0], ids=["sgd-momentum", "sgd"])
def test_batchnorm_steps_are_precompiled(ip, queue, fresh_dim, momentum):
    """BatchNorm's num_batches_tracked is 0-dim: cloned through ``.to(device)`` it became a constant in
    the job's graph but is a parameter in the real one. And without optimizer state the second step
    still compiles a new graph (the counter moved from the host into a graph output): the planner
    plans it although its key has run."""
    ip.run_cell(BN_SETUP.format(c=fresh_dim, momentum=momentum))
    _, first = run_xla(ip, "x, y = images(8)\nloss = bn_step(model, opt, x, y)", "-q")
    assert [s.cache for s in first.steps] == ["miss"]
    queue.plan()
    queue.run_pending()
    (job,) = [j for j in queue.jobs if j.state == "compiled"]
    compiles = uncached()
    _, second = run_xla(ip, "x, y = images(8)\nloss = bn_step(model, opt, x, y)", "-q")
    assert [s.cache for s in second.steps] == ["precompiled"], second.notes
    assert uncached() == compiles and job.used == 1


def test_a_real_step_that_misses_a_jobs_graph_is_explained(ip, queue, fresh_dim):
    """The job copies the last call's arguments; a Python flag that changes the graph is not part of
    a call's key, so the real step misses the job's graph. The cell says so, and why."""
    ip.run_cell(SETUP.format(d=fresh_dim, h=fresh_dim + 2) + """
@xla_lab.step
def flag_step(model, opt, x, y, twice):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if twice:
        loss = loss + loss.tanh()
    loss.backward()
    opt.step()
    return loss
""")
    run_xla(ip, "x, y = batch(8)\nloss = flag_step(model, opt, x, y, False)", "-q")
    queue.plan()
    queue.run_pending()
    (job,) = [j for j in queue.jobs if j.state == "compiled"]
    _, real = run_xla(ip, "x, y = batch(8)\nloss = flag_step(model, opt, x, y, True)", "-q")
    assert [s.cache for s in real.steps] == ["miss"]
    note = next(n for n in real.notes if n.startswith(f"precompile job #{job.number}"))
    assert "step 0 compiled another one: compared with the job's graph" in note
    assert "aten::tanh" in note and job.missed and job.used == 0


# --- a marked step called several times before one sync ------------------------------------------
GROUP_SETUP = BN_SETUP + """
from torch.utils.data import DataLoader, TensorDataset

@xla_lab.step(mode="eval", buckets=[4, 8], bucket_dims={{"x": 0}})
def eval_step(model, x):
    return model(x).argmax(-1)

@xla_lab.step
def accum_step(model, opt, x, y, last):
    loss = nn.functional.cross_entropy(model(x), y) / 3
    loss.backward()
    if last:
        opt.step()
        opt.zero_grad()
    return loss

torch.manual_seed(1)
host_images = [torch.randn(8, 3, 8, 8) for _ in range(3)]
train_data = TensorDataset(torch.randn(52, 3, 8, 8), torch.randint(0, 10, (52,)))
loader = DataLoader(train_data, batch_size=8)  # 7 batches, the last of 4: groups of 3, 3 and 1
"""

EVAL = """
model.eval()
preds = [eval_step(model, x.to(dev)) for x in {batches}]
torch_xla.sync()
model.train()
"""

ACCUM = """
losses = []
for i, (x, y) in enumerate(loader):
    if i == {stop}:
        break
    last = i % 3 == 2 or i == len(loader) - 1
    losses.append(accum_step(model, opt, x.to(dev), y.to(dev), last))
    if last:
        torch_xla.sync()
"""


@pytest.mark.parametrize("calls", [2, 3])
def test_an_eval_comprehension_is_precompiled_as_one_graph_of_its_calls(ip, queue, fresh_dim, calls):
    """``[eval_step(model, x) for x in batches]`` then one sync: the graph holds every call. The first
    time, the miss of the one-call job says so and what to do; from then on the queue compiles the
    group's graph for its variants (here a new batch size, from the step's buckets), so the cell that
    needs one compiles nothing in the foreground."""
    ip.run_cell(GROUP_SETUP.format(c=fresh_dim, momentum=0.9))
    run_xla(ip, "x, y = images(8)\nloss = bn_step(model, opt, x, y)", "-q")
    queue.plan()
    queue.run_pending()  # among the jobs: eval_step with bn_step's arguments, one call
    batches = f"host_images[:{calls}]"
    _, first = run_xla(ip, EVAL.format(batches=batches), "-q")
    assert [s.cache for s in first.steps] == ["miss"]
    note = next(n for n in first.notes if "eval_step ran" in n)
    holds = "both" if calls == 2 else f"all {calls}"
    assert f"eval_step ran {calls} times before one sync, so the graph holds {holds} calls" in note
    assert "Sync after each call" in note and f"compiles the {calls}-call graph for next time" in note
    queue.plan()
    labels = [j.label for j in queue.jobs if j.state == "pending"]
    assert f"eval_step(x 4x3x8x8) x{calls} in one graph eval" in labels, labels
    queue.run_pending()
    assert all(j.state in ("compiled", "cached") for j in queue.jobs), [(j.label, j.error) for j in queue.jobs]
    compiles = uncached()
    _, small = run_xla(ip, EVAL.format(batches=f"[x[:4] for x in {batches}]"), "-q")
    assert [s.cache for s in small.steps] == ["precompiled"], small.notes
    assert uncached() == compiles
    assert len(ip.user_ns["preds"]) == calls and ip.user_ns["preds"][0].shape == (4,)


def test_gradient_accumulation_without_a_sync_per_micro_step_is_precompiled(ip, queue, fresh_dim):
    """Three micro-steps, then one sync (the optimizer steps in the last): after one such group the
    queue compiles the group in its steady state (the first created the optimizer's state) and the
    epoch's last, shorter group (52 samples in batches of 8: 7 batches, the last of 4), so the epoch
    compiles nothing in the foreground."""
    ip.run_cell(GROUP_SETUP.format(c=fresh_dim, momentum=0.9))
    _, first = run_xla(ip, ACCUM.format(stop=3), "-q")
    assert [s.cache for s in first.steps] == ["miss"]
    queue.plan()
    reasons = [j.reason for j in queue.jobs if j.variant.step.name == "accum_step"]
    assert "the 3 calls that run as one graph, again (their first run created optimizer state)" in reasons
    assert "the last group of loader's 7 batches: 1 call" in reasons, reasons
    queue.run_pending()
    assert all(j.state in ("compiled", "cached") for j in queue.jobs), [(j.label, j.error) for j in queue.jobs]
    compiles = uncached()
    _, epoch = run_xla(ip, ACCUM.format(stop=-1), "-q")
    assert [s.cache for s in epoch.steps] == ["precompiled", "hit", "precompiled"], epoch.notes
    assert uncached() == compiles


def test_groups_give_the_same_losses_and_predictions_with_the_queue_on_and_off(ip, queue, fresh_dim):
    results = []
    for queue_on in (True, False):
        ip.run_cell(GROUP_SETUP.format(c=fresh_dim, momentum=0.9))
        ip.run_cell("torch.manual_seed(5)")
        for body in (ACCUM.format(stop=3), EVAL.format(batches="host_images[:2]"), ACCUM.format(stop=-1),
                     EVAL.format(batches="[x[:4] for x in host_images]")):
            run_xla(ip, body, "-q")
            if queue_on:
                queue.plan()
                queue.run_pending()
        ns = ip.user_ns
        results.append(([t.cpu() for t in ns["losses"]], [t.cpu() for t in ns["preds"]],
                        [p.detach().cpu() for p in ns["model"].parameters()]))
        queue.jobs.clear()
    (losses_on, preds_on, params_on), (losses_off, preds_off, params_off) = results
    assert all(torch.equal(a, b) for a, b in zip(losses_on + preds_on + params_on, losses_off + preds_off + params_off))
    assert len(losses_on) == 7 and len(preds_on) == 3


def test_a_loop_without_a_sync_and_the_other_mode_are_precompiled(ip, queue, fresh_dim):
    """``for x in batches: out = predict(model, x)`` then one sync: one graph of the three calls, whose
    only output of theirs is the last result (each assignment drops the one before). Once the step
    also ran in train mode, the queue compiles the group in that mode too."""
    ip.run_cell(GROUP_SETUP.format(c=fresh_dim, momentum=0.9) + """
@xla_lab.step
def predict(model, x):
    return model(x).softmax(-1)
""")
    loop = "model.{mode}()\nfor x in host_images:\n    out = predict(model, x.to(dev))\ntorch_xla.sync()"
    _, first = run_xla(ip, loop.format(mode="eval"), "-q")
    assert [s.cache for s in first.steps] == ["miss"]
    run_xla(ip, "model.train()\nout = predict(model, host_images[0].to(dev))", "-q")
    queue.plan()
    (other,) = [j for j in queue.jobs if j.reason == "the other mode this step ran in"]
    assert other.label == "predict(x 8x3x8x8) x3 in one graph train" and other.variant.held == [False, False, True]
    queue.run_pending()
    assert other.state == "compiled", other.error
    compiles = uncached()
    _, again = run_xla(ip, loop.format(mode="train"), "-q")
    assert [s.cache for s in again.steps] == ["precompiled"], "\n".join(again.notes)
    assert uncached() == compiles and other.used == 1
