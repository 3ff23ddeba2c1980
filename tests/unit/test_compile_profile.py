"""The compile profile's reading of XLA's compile events (``profile/compile_profile.py``), the advice's
loop rule and the comparison line, on event trees shaped as torch_xla 2.9's CPU client records them
(``design.md`` "Compile-time facts"; the real compiles are in tests/kernel/test_compile_profile.py)."""

from xla_lab.profile.compile_advice import _in_unrolled_loop
from xla_lab.profile.compile_profile import compile_profiles, kernel_name
from xla_lab.profile.xplane import Event, Line, Plane

MS = 1e6


def ev(event, start_ms, dur_ms, **stats):
    return Event(event, start_ms * MS, dur_ms * MS, stats)


def _planes(extra_python=(), codegen=()):
    python = [
        ev("XLAGraphExecutor::Compile", 0, 110),
        ev("PjRtComputationClient::Compile", 10, 100),
        ev("PjRtCpuClient::Compile", 12, 95),
        ev("HLO passes through layout assignment", 15, 20),
        ev("algsimp", 16, 5), ev("RunInvariantCheckers", 22, 2), ev("fusion", 25, 8),
        ev("CpuCompiler::RunBackend", 40, 65, name="cell_3.17"),
        ev("CpuCompiler::CompileCpuExecutable", 40, 65),
        ev("ThunkEmitter::EmitEntryComputation", 45, 10),
        ev("Codegen", 70, 30, num_compiled_functions=12, num_default_parts=4),
        ev("JitCompiler::Compile", 70, 30),
        *extra_python,
    ]
    threads = list(codegen) or [ev("FusionCompiler::Compile", 46, 12, module="add_fusion.3_kernel_module", op_count=7),
                                 ev("FusionCompiler::Compile", 47, 20, module="dot_fusion.clone_kernel_module", op_count=3),
                                 ev("TaskDispatcher::dispatch", 71, 25)]
    return [Plane("/host:CPU", [Line("python", python), Line("tf_xla-cpu-codegen/1", threads)])]


def test_phases_cut_compile_time_into_pieces_that_add_up():
    (p,) = compile_profiles(_planes())
    assert p["module"] == "cell_3.17" and p["compile_ns"] == 100 * MS and p["lowering_ns"] == 10 * MS
    phases = {ph["name"]: ph["ns"] / MS for ph in p["phases"]}
    assert abs(sum(phases.values()) - 100) < 1e-6
    # the client builds the module (10-15), the passes run (15-35), 35-40 is in no known place
    assert phases["HLO module setup"] == 2 + 3 and phases["HLO passes"] == 20 and phases["other (untraced)"] == 5
    # the backend schedules and assigns buffers before kernel emission (40-45)
    assert phases["scheduling and buffer assignment"] == 5
    # kernel emission: ThunkEmitter (45-55) and the compiling thread's wait for the codegen threads (to 67)
    assert phases["kernel emission"] == 22
    # LLVM codegen: the LLVM modules' set-up after emission (67-70) and Codegen (70-100)
    assert phases["LLVM codegen"] == 33
    assert phases["backend teardown"] == 5 and phases["executable wrap-up"] == 2 + 3
    assert abs(p["explained"] - 0.95) < 1e-9 and abs(p["traced"] - 0.75) < 1e-9
    assert [ph["name"] for ph in p["phases"] if ph["traced"]] == ["HLO passes", "kernel emission", "LLVM codegen"]


def test_kernels_by_name_with_thread_time_and_passes_by_own_time():
    (p,) = compile_profiles(_planes())
    assert [k["name"] for k in p["kernels"]] == ["dot_fusion.clone", "add_fusion.3"]
    assert p["kernel_thread_ns"] == 32 * MS and p["kernel_threads"] == 1
    assert p["codegen"] == {"ns": 30 * MS, "functions": 12, "parts": 4, "thread_ns": 25 * MS, "threads": 1}
    passes = {x["name"]: x["ns"] / MS for x in p["passes"]}
    assert passes["HLO passes through layout assignment"] == 20 - 5 - 2 - 8  # its own time, less its passes'
    assert passes["fusion"] == 8 and passes["RunInvariantCheckers"] == 2
    assert p["pipelines"] == [{"name": "HLO passes through layout assignment", "ns": 20 * MS}]


def test_two_compiles_are_two_profiles_and_other_events_are_not_passes():
    second = [ev("PjRtComputationClient::Compile", 200, 50), ev("PjRtCpuClient::Compile", 200, 50),
              ev("dce", 205, 5), ev("ThreadpoolListener::Record", 220, 1)]
    profiles = compile_profiles(_planes(extra_python=second))
    assert [p["compile_ns"] / MS for p in profiles] == [100, 50]
    late = profiles[1]
    assert late["module"] is None and late["lowering_ns"] is None and late["kernels"] == []
    assert {x["name"] for x in late["passes"]} == {"dce"}


def test_kernel_names_drop_the_module_suffix():
    assert kernel_name("add_fusion.3_kernel_module") == "add_fusion.3"
    assert kernel_name("copy_bitcast_fusion.17.clone_kernel_module") == "copy_bitcast_fusion.17.clone"
    assert kernel_name("plain") == "plain"


def test_a_loop_that_syncs_is_a_training_loop_not_an_unrolled_one():
    source = "for i in range(3):\n    y = y * 2\nfor s in range(4):\n    loss = step()\n    torch_xla.sync()\n"
    assert _in_unrolled_loop(source, 2)
    assert not _in_unrolled_loop(source, 4)
    assert not _in_unrolled_loop(source, 1)  # the for line itself is not its body
    assert not _in_unrolled_loop("def f(:\n", 1)


def test_another_backend_s_steps_are_phases_of_their_own_name_and_its_passes_stay_passes():
    """A GPU-like compile: no CPU events; its client's compile holds the pass pipelines, a C++ step
    (``::`` in its name) is a phase of its own with what runs inside it (``PTX->CUBIN``)."""
    python = [ev("PjRtComputationClient::Compile", 0, 100),
              ev("PjRtStreamExecutorClient::CompileInternal", 5, 90),
              ev("optimization", 10, 30), ev("algsimp", 12, 10),
              ev("GpuCompiler::CompileToBackendResult", 45, 40), ev("PTX->CUBIN", 50, 20)]
    (p,) = compile_profiles([Plane("/host:CPU", [Line("python", python)])])
    phases = {ph["name"]: ph["ns"] / MS for ph in p["phases"]}
    assert phases == {"HLO module setup": 10, "HLO passes": 30, "GpuCompiler::CompileToBackendResult": 40,
                      "other (untraced)": 20}
    assert abs(p["traced"] - 0.7) < 1e-9 and abs(p["explained"] - 0.8) < 1e-9
    assert p["kernel_events"] is False and p["module"] is None
    assert p["pipelines"] == [{"name": "optimization", "ns": 30 * MS}]


def well_formed(profile) -> bool:
    """Does a saved graph keep this compile profile when it loads (the typed format checks it)?"""
    from xla_lab.capture.records import GraphArtifacts

    notes: list[str] = []
    art = GraphArtifacts.from_dict({"graph_hash": "h" * 32, "compile_profile": profile}, notes)
    assert bool(notes) == (art.compile_profile is None)  # (a part left out is said)
    return art.compile_profile is not None


def test_a_damaged_profile_is_not_shown_rather_than_failing_a_view():
    """A capture file may carry a damaged or hand-made profile: every field the views read is checked
    when it loads, and a damaged profile is left out with a note."""
    import copy

    (p,) = compile_profiles(_planes())
    p["counts"] = {"hlo_before": 3, "hlo_after": 4, "kernels": 2, "functions": 12}
    assert well_formed(p)
    for path, junk in [(("passes", 0), None), (("passes", 0, "name"), 3), (("phases", 0, "ns"), "x"),
                       (("kernels", 0, "op_count"), "seven"), (("codegen", "parts"), "four"), (("counts", "kernels"), []),
                       (("compile_ns",), 0), (("explained",), None), (("pipelines",), {"a": 1}), (("step",), "zero"),
                       (("kernels",), None)]:
        bad = copy.deepcopy(p)
        target = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = junk
        assert not well_formed(bad), path
    assert not well_formed([p])
    kernels_gone = copy.deepcopy(p)
    del kernels_gone["kernels"]  # (found by fuzzing: the panel read p["kernels"])
    assert not well_formed(kernels_gone)


def test_a_long_full_capture_compile_says_what_the_dump_cost_and_that_lean_capture_exists():
    from xla_lab.capture.records import CellCapture, GraphArtifacts, StepRecord
    from xla_lab.profile.compile_advice import LONG_COMPILE_S, advise

    def capture(seconds: float, lean: bool, files: int | None) -> CellCapture:
        art = GraphArtifacts("h", "cell_3", lean=lean, dump_files=files, dump_bytes=(files or 0) * 10_000)
        step = StepRecord(0, "cell_3", "h", "miss", "torch_xla.sync()", artifacts=art)
        step.timings["compile_s"] = seconds
        return CellCapture(cell_id="c", execution_count=3, source="x", started_at=0.0, steps=[step])

    (advice,) = [a for a in advise(capture(LONG_COMPILE_S + 1, False, 2070)) if a["kind"] == "dump_cost"]
    assert "2,070 files" in advice["text"] and "%xla mode lean" in advice["text"]
    assert advice["evidence"] == {"compile_s": LONG_COMPILE_S + 1, "dump_files": 2070, "dump_bytes": 20_700_000}
    for quiet in (capture(LONG_COMPILE_S - 1, False, 2070), capture(LONG_COMPILE_S + 1, True, None)):
        assert not [a for a in advise(quiet) if a["kind"] == "dump_cost"]


def test_the_syncs_wait_for_its_own_execution_after_the_compile():
    """torch_xla frees a step's donated inputs on the thread that synced when it lets go of them last: that
    thread then waits for the execution ("Wait for donation holds"), after the compile, inside the sync."""
    from xla_lab.profile.compile_breakdown import CompileView
    from xla_lab.view.compile_summary import headline

    sync = [ev("SyncTensorsGraph", -1, 200), ev("Wait for donation holds", 120, 60),  # (after the compile: counted)
            ev("SyncTensorsGraph", 300, 70), ev("PjRtComputationClient::Compile", 301, 50),
            ev("Wait for donation holds", 360, 5)]  # (another sync's: not this compile's)
    first, second = compile_profiles(_planes(extra_python=sync))
    assert first["execution_wait_ns"] == 60 * MS and second["execution_wait_ns"] == 5 * MS
    (alone,) = compile_profiles(_planes())
    assert alone["execution_wait_ns"] is None  # (no sync around it: e.g. torch.compile's runs)

    view = CompileView("a" * 32, "cell_3", 0, first, [], {}, [], [], [])
    assert well_formed(first) and well_formed(dict(first, execution_wait_ns=None))
    assert not well_formed(dict(first, execution_wait_ns="60 ms"))
    assert "then the sync waited 0.06 s for the step's own execution" in headline(view)
    assert "waited" not in headline(CompileView("a" * 32, "cell_3", 0, dict(first, execution_wait_ns=2e5),
                                                [], {}, [], [], []))


# --- a sync's wait for its step's execution, cache hits included ----------------------------------
def test_a_session_s_events_are_placed_in_unix_time_by_its_start():
    """XLA rebases a session's events on its start; the "Task Environment" plane says when that was."""
    from pathlib import Path

    from xla_lab.profile.xplane import read_space, session_start_ns

    data = (Path(__file__).resolve().parents[1] / "fixtures" / "lean" / "lean_session.xplane.pb").read_bytes()
    planes = read_space(data, frozenset({"SyncTensorsGraph"}))
    start = session_start_ns(planes)
    assert isinstance(start, int) and 1.7e18 < start < 2e18
    syncs = [e for p in planes for line in p.lines for e in line.events if e.name == "SyncTensorsGraph"]
    assert syncs and all(0 <= e.start_ns < 60e9 for e in syncs)  # (seconds from the start, not since 1970)
    assert session_start_ns([p for p in planes if p.name != "Task Environment"]) is None


def _hit(index: int, trace: float, wait=None):
    from xla_lab.capture.records import StepRecord

    step = StepRecord(index=index, graph_name="g", graph_hash="h", cache="hit", sync_cause="torch_xla.sync()")
    step.timings = {"trace_s": trace, "execution_wait_s": wait}
    return step


def test_a_cached_step_gets_what_its_sync_waited_for_its_execution():
    """Each explicit sync the session recorded (its ``SyncTensorsGraph`` inside the hook's call) gives its
    step the donation waits inside it, out of ``trace_s``; waits outside any sync, and steps whose sync the
    session did not record, give nothing; a step already measured (a compile) is left alone."""
    from xla_lab.profile.attach import count_hit_waits
    from xla_lab.profile.compile_profile import sync_waits

    base_ns = 1_000 * 10**9  # (the session started at unix time 1000 s)
    python = [ev("SyncTensorsGraph", 10, 10), ev("Wait for donation holds", 12, 5),
              ev("SyncTensorsGraph", 30, 1), ev("Wait for donation holds", 40, 3)]
    planes = [Plane("/host:CPU", [Line("python", python)]),
              Plane("Task Environment", [], {"profile_start_time": base_ns})]
    waits = sync_waits(planes)
    assert waits == [(base_ns + 10 * MS, base_ns + 20 * MS, 5 * MS), (base_ns + 30 * MS, base_ns + 31 * MS, 0.0)]
    assert sync_waits(planes[:1]) == []  # (no start: nothing can be placed)
    steps = [_hit(0, 0.020), _hit(1, 0.004), _hit(2, 0.008), _hit(3, 0.5, wait=0.2)]
    windows = {0: (1000.0099, 1000.0205), 1: (1000.0299, 1000.0312), 2: (1000.0395, 1000.045), 3: (1000.0099, 1000.0205)}
    count_hit_waits(steps, windows, waits)
    assert [s.timings["execution_wait_s"] for s in steps] == [0.005, 0.0, None, 0.2]
    assert [round(s.timings["trace_s"], 6) for s in steps] == [0.015, 0.004, 0.008, 0.5]
    count_hit_waits([_hit(4, 0.02)], {}, waits)  # (an implicit sync has no window: nothing)
