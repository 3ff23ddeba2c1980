"""Lean capture on the model zoo, against full capture of the same cells: each mode runs the whole zoo in a
fresh process (``tests/lean_run.py``: the mode is chosen before the runtime starts, lean with
``%xla mode lean`` as a user would), and the steps, graphs, memory, lines, timings and views are compared.
A graph's hash, kernels and buffer assignment do not depend on the capture mode, so they must be equal;
a lean kernel's lines come from the optimized module's own call stacks, so its model lines are those full
capture finds or fewer (full matches ops by type and line, which can add a twin op's line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xla_lab.capture.analysis import LEAN_BEFORE
from xla_lab.capture.recorder import LEAN_REASON
from xla_lab.view.panel_model import LEAN_GRAPH

ZOO = Path(__file__).resolve().parent / "zoo"
if str(ZOO) not in sys.path:
    sys.path.insert(0, str(ZOO))
import zoo  # noqa: E402

RUN = Path(__file__).resolve().parents[1] / "lean_run.py"
# (the module's fixture runs the zoo twice, each in a fresh process: 90 s each on a loaded 2-core machine)
pytestmark = pytest.mark.timeout(900)
ENTRIES = [e.name for e in zoo.ZOO if e.name != "mlp_eager"]  # (eager mode has no graph steps)


def _run(mode: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PT_XLA_"))}
    env["PJRT_DEVICE"] = "CPU"
    proc = subprocess.run([sys.executable, str(RUN), mode, str(out)], env=env, capture_output=True, text=True,
                          timeout=420)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("lean")
    return {mode: _run(mode, tmp / f"{mode}.json") for mode in ("lean", "full")}


def test_lean_mode_has_no_dump_and_full_mode_has_one(runs):
    assert runs["lean"]["_runtime"] == {"mode": "lean", "hlo_dump": False, "dump_files": []}
    assert runs["full"]["_runtime"]["mode"] == "full" and runs["full"]["_runtime"]["hlo_dump"]


@pytest.mark.parametrize("name", ENTRIES)
def test_steps_are_full_captures(runs, name):
    """Every sync, its graph, cache state, cause and line: as full capture (torch_xla's per-execution
    analysis) records them; no step of an unknown graph. The losses are the same."""
    lean, full = runs["lean"][name], runs["full"][name]
    assert lean["ok"] and full["ok"]
    assert lean["losses"] == full["losses"]
    key = lambda s: (s["index"], s["graph_hash"], s["cache"], s["sync_cause"], s["sync_line"])  # noqa: E731
    assert [key(s) for s in lean["capture"]["steps"]] == [key(s) for s in full["capture"]["steps"]]
    assert not lean["capture"]["notes"], lean["capture"]["notes"]


@pytest.mark.parametrize("name", ENTRIES)
def test_graphs_kernels_and_memory_are_full_captures(runs, name):
    """Each compiled graph: the same optimized module (kernel names and kinds, loops) and the same buffer
    assignment (peak, parameters, outputs, temporaries, largest buffers), read from the profiler session."""
    lean, full = runs["lean"][name]["capture"]["artifacts"], runs["full"][name]["capture"]["artifacts"]
    assert set(lean) == set(full) and lean
    for graph_hash, art in lean.items():
        ref = full[graph_hash]
        assert art["lean"] and not ref["lean"]
        assert ref["dump_files"] > 0 and ref["dump_bytes"] > 0 and art["dump_files"] is None  # (what lean saves)
        assert [(k["name"], k["kind"]) for k in art["fusions"]] == [(k["name"], k["kind"]) for k in ref["fusions"]]
        # (growing_temp_bytes reads values' shapes: the dump's text reader skips a tuple's, the proto has it)
        memory = {k: v for k, v in art["memory"].items() if k not in ("largest", "growing_temp_bytes")}
        assert memory == {k: v for k, v in ref["memory"].items() if k not in ("largest", "growing_temp_bytes")}
        assert [(b["allocation"], b["bytes"], b["kind"]) for b in art["memory"]["largest"]] == \
            [(b["allocation"], b["bytes"], b["kind"]) for b in ref["memory"]["largest"]]
        assert len(art["loops"] or []) == len(ref["loops"] or [])
        assert art["compile_profile"] and art["compile_profile"]["counts"]["kernels"] == len(art["fusions"])


def _refs(lines: list[dict]) -> set:
    return {(ln.get("cell"), ln.get("file"), ln["line"]) for ln in lines}


@pytest.mark.parametrize("name", ENTRIES)
def test_every_kernel_has_the_lines_full_capture_gives(runs, name):
    lean, full = runs["lean"][name]["capture"]["artifacts"], runs["full"][name]["capture"]["artifacts"]
    for graph_hash, art in lean.items():
        by_name = {k["name"]: k for k in full[graph_hash]["fusions"]}
        for k in art["fusions"]:
            assert k["lines"] and k["model_lines"], k["name"]
            ref = by_name[k["name"]]
            assert _refs(k["lines"]) == _refs(ref["lines"]), k["name"]
            assert _refs(k["model_lines"]) <= _refs(ref["model_lines"]), k["name"]


@pytest.mark.parametrize("name", ENTRIES)
def test_timings_are_torch_xlas_own(runs, name):
    run = runs["lean"][name]
    steps = run["capture"]["steps"]
    for key, metric in (("compile_s", "CompileTime"), ("execute_s", "ExecuteTime")):
        assert sum(s["timings"][key] or 0.0 for s in steps) == pytest.approx(run["metrics"][metric]["total_s"], abs=1e-6)
    assert sum(s["cache"] == "miss" for s in steps) == run["metrics"]["CompileTime"]["count"]


@pytest.mark.parametrize("name", ENTRIES)
def test_views_draw_what_lean_has_and_say_what_it_has_not(runs, name):
    """The summary, the static page and the panel are drawn; the graph before optimization and the lazy
    graph say lean capture has none and how to get them; every miss's reason states its precision."""
    run = runs["lean"][name]
    for view, text in run["views"].items():
        assert not text.startswith("ERROR"), text[-3000:]
    panel = json.loads(run["views"]["panel"])
    for graph in panel["graphs"].values():
        assert graph["nodes"] == [] and graph["absent"] == LEAN_GRAPH
    arts = run["capture"]["artifacts"]
    assert all(a["hlo_before"] == LEAN_BEFORE and a["hlo_after"].startswith("HloModule") for a in arts.values())
    assert "lean capture" in run["views"]["html"]
    for step in run["capture"]["steps"]:
        if step["cache"] == "miss":
            assert step["recompile_reason"].endswith(LEAN_REASON)


def test_measured_time_of_cached_steps_is_joined_to_the_same_kernels(runs):
    """``%%xla --profile`` in lean capture: the cached steps' device time lands on the kernels of the
    graphs lean capture recorded, as in full capture."""
    lean, full = runs["lean"]["_profiled"], runs["full"]["_profiled"]
    assert lean["steps"] == full["steps"] > 0
    assert lean["kernels"] == full["kernels"] and lean["kernels"]


def test_a_loop_longer_than_the_kept_samples_keeps_every_step(runs):
    """torch_xla keeps the last 1,024 samples of a metric: in lean capture, where the steps come from
    them, the first steps of a 1,100-step loop come from its explicit syncs (with no timings, said)."""
    long, full = runs["lean"]["_long"], runs["full"]["_long"]
    assert long["steps"] == full["steps"] >= 1100
    assert (long["caches"], long["graphs"]) == (full["caches"], full["graphs"])
    assert any("1024 samples" in note for note in long["notes"]), long["notes"]
    assert not any("unknown" in note for note in long["notes"]), long["notes"]


def test_mode_cannot_change_once_the_runtime_started(ip, capsys):
    """Once the runtime started (here, by the line below), %xla mode lean says why it cannot, and nothing
    changes."""
    from xla_lab import session

    assert ip.run_cell("import torch, torch_xla\n(torch.ones(2, device=torch_xla.device()) + 1).cpu()").success
    ip.run_line_magic("xla", "mode lean")
    out = capsys.readouterr().out
    assert "too late to change the capture mode" in out and "%xla mode lean" in out
    assert session.get().runtime.mode == "full"
    ip.run_line_magic("xla", "mode")
    assert "capture mode full" in capsys.readouterr().out
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        ip.run_line_magic("xla", "mode thin")


def test_precompiled_graphs_are_claimed_and_shown_in_lean_capture(tmp_path):
    """The precompile queue in lean capture: its jobs' modules reach the store from a profiler session's
    list of live modules, and the real steps that run them are "precompiled" with their HLO and kernels."""
    run = _run("queue", tmp_path / "queue.json")
    assert [state for _, state, _ in run["jobs"]] == ["compiled", "compiled"], run["jobs"]
    for capture in run["runs"]:
        (step,) = capture["steps"]
        art = capture["artifacts"][step["graph_hash"]]
        assert step["cache"] == "precompiled" and step["saved_s"] > 0, capture["notes"]
        assert art["lean"] and art["fusions"] and art["memory"]["peak_bytes"] > 0
    fit = run["fit"]  # %xla fit's compile-only jobs: their peaks from the sessions' buffer assignments
    assert fit["state"] == "done" and fit["compiles"] <= 4, fit
    assert fit["answer"]["peak"] <= fit["budget"]["bytes"] < fit["next_up"]["peak"]
    assert abs(fit["prediction_error"]) < 0.05


def test_an_execution_dispatched_while_the_one_before_runs_is_named_by_its_own_program(fresh_dim):
    """A sync returns once its graph is dispatched, so the next graph is dispatched while the one
    before still runs, and runs after it (it waits its turn, then the pool thread that ran the one
    before hands it on). Lean capture names a cache hit's graph by the program each execution ran
    (``lean_modules.executed_programs``): the kernels that ran first after the second dispatch are the
    first graph's, and must not name the second (CI saw mixer_dynamo's sync named after the backward
    graph torch.compile had just run)."""
    if os.environ.get("PJRT_CPU_ASYNC_CLIENT", "").lower() in ("0", "false"):
        pytest.skip("a synchronous CPU client runs each graph inside its dispatch: none is dispatched while "
                    "another runs")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    from xla_lab.profile.lean_modules import LeanModules, executed_programs
    from xla_lab.profile.xplane import read_space

    dev = torch_xla.device()
    a = torch.randn(384, 384, device=dev)
    small = torch.randn(fresh_dim, device=dev)

    def two_graphs():
        x = a
        for _ in range(100):  # (tens of milliseconds: it still runs when the second graph is dispatched)
            x = torch.tanh(x @ a)
        torch_xla.sync()
        y = small * 2 + 1
        torch_xla.sync()
        return x, y

    two_graphs()  # (compiled here; the session records cached runs)
    xm.wait_device_ops()
    session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
    for _ in range(3):
        two_graphs()
    xm.wait_device_ops()
    data = session.stop()

    modules = {m.number: m for m in LeanModules().new([data])}
    has_dot = {number: b"dot" in m.module_proto for number, m in modules.items()}
    programs = executed_programs(data)
    assert len(programs) == 6 and all(p in has_dot for p in programs), (programs, has_dot)
    assert [has_dot[p] for p in programs] == [True, False] * 3
    # the case this test is about happened: the first kernel that began after the small graph's first
    # dispatch was the big graph's
    events = [e for plane in read_space(data) for line in plane.lines for e in line.events]
    dispatches = sorted(e.start_ns for e in events if e.name == "PjRtComputationClient::ExecuteComputation")
    first_after = min((e.start_ns, e.stats["program_id"]) for e in events
                      if isinstance(e.stats.get("program_id"), int) and e.start_ns > dispatches[1])
    assert first_after[1] == programs[0]
