"""Lean capture's pure parts, without a device: the modules and executions a profiler session recorded
(``tests/fixtures/lean``: one tiny graph compiled twice-run under a session, with XLA's dump on, so the
session's ``HloProto`` and the dump describe the same program: made by its ``make_fixtures.py``), and
the join of executions, compiles and syncs that stands in for torch_xla's per-execution analysis
(``steps.pair_lean``). The zoo in lean mode, against full mode, is tests/kernel/test_lean.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_lab.capture import steps as joins
from xla_lab.capture.metrics import Sample
from xla_lab.capture.xla_logs import Frame, SyncEvent
from xla_lab.hlo.hlo_proto import read_hlo_proto, with_shapes
from xla_lab.hlo.memory import memory_summary, parse_buffer_assignment
from xla_lab.hlo.parser import parse_module
from xla_lab.hlo.proto_frames import ProtoError, instruction_stacks
from xla_lab.profile.lean_modules import LeanModules, executed_programs, hlo_protos
from xla_lab.profile.xplane import ProfileFormatError, parse_space

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lean"


@pytest.fixture(scope="module")
def session_bytes() -> bytes:
    return (FIXTURES / "lean_session.xplane.pb").read_bytes()


def test_the_session_holds_the_compiled_module_with_its_id(session_bytes):
    protos = hlo_protos(session_bytes)
    assert len(protos) == 1
    name, module_id, raw = protos[0]
    assert name.startswith("SyncTensorsGraph.") and module_id == 0
    module = read_hlo_proto(raw)
    assert module.name == name and module.module_id == 0 and module.module_proto


def test_allocations_from_the_proto_are_the_dumps(session_bytes):
    """Every allocation: the same index, size, kind, parameter and values as XLA's dump text; the
    summaries (peak from the memory report, parameters, outputs, temporaries, largest buffers) agree."""
    module = read_hlo_proto(hlo_protos(session_bytes)[0][2])
    dumped = parse_buffer_assignment((FIXTURES / "lean_buffer_assignment.txt").read_text())
    after = parse_module((FIXTURES / "lean_after_optimizations.txt").read_text())
    names = {ins.name: ins for ins in after.instructions()}
    lean = with_shapes(module.allocations, lambda n: names[n].shape_text if n in names else None)
    assert [(a.index, a.size, a.kind, a.parameter, a.live_out) for a in lean] == \
        [(a.index, a.size, a.kind, a.parameter, a.live_out) for a in dumped]
    for a, d in zip(lean, dumped):  # (the text's reader skips a tuple's value; the proto has it)
        assert {v[:2] for v in d.values} <= {v[:2] for v in a.values}
        for (name, _, shape), (_, _, dumped_shape) in zip(sorted(a.values), sorted(d.values)):
            assert dumped_shape.startswith(shape), (name, shape, dumped_shape)  # (the dump adds the layout)
    full = memory_summary((FIXTURES / "lean_memory_usage_report.txt").read_text(),
                          (FIXTURES / "lean_buffer_assignment.txt").read_text())
    summary = memory_summary(None, None, allocations=lean)
    assert {k: v for k, v in summary.items() if k != "largest"} == {k: v for k, v in full.items() if k != "largest"}
    assert [(b["allocation"], b["bytes"], b["kind"]) for b in summary["largest"]] == \
        [(b["allocation"], b["bytes"], b["kind"]) for b in full["largest"]]


def test_the_optimized_module_carries_each_ops_call_stack(session_bytes):
    """The session's module keeps torch_xla's frame table: the ops of the cell's code have stacks that
    reach the fixture's script (what lean capture maps kernels to lines with)."""
    module = read_hlo_proto(hlo_protos(session_bytes)[0][2])
    stacks = instruction_stacks(module.module_proto)
    assert stacks
    assert any(f.file.endswith("make_fixtures.py") for stack in stacks.values() for f in stack)
    assert any(f.file.endswith("linear.py") for stack in stacks.values() for f in stack)  # inside nn.Linear
    # ops with one stack share one list: a large optimized module has ~100,000 instructions and a few
    # dozen stacks, and the analysis reads each distinct list once (it was a copy per instruction)
    assert len({id(stack) for stack in stacks.values()}) == len({tuple(stack) for stack in stacks.values()})
    assert len(stacks) > len({id(stack) for stack in stacks.values()})


def test_each_execution_is_named_by_its_program(session_bytes):
    assert executed_programs(session_bytes) == [0, 0]


def _space(lines: dict[str, list[tuple]]) -> bytes:
    """An XSpace of one ``/host:CPU`` plane: line name -> events (name, start ns, duration ns, int stats)."""
    space = parse_space(b"")
    plane = space.planes.add()
    plane.name = b"/host:CPU"
    names: dict[str, int] = {}
    stat_ids: dict[str, int] = {}

    def key(table: dict, text: str, entries) -> int:
        if text not in table:
            table[text] = len(table) + 1
            entry = entries.add()
            entry.key = entry.value.id = table[text]
            entry.value.name = text.encode()
        return table[text]

    for n, (line_name, events) in enumerate(lines.items()):
        line = plane.lines.add()
        line.id, line.name = n, line_name.encode()
        for name, start, duration, stats in events:
            ev = line.events.add()
            ev.metadata_id = key(names, name, plane.event_metadata)
            ev.offset_ps, ev.duration_ps = int(start * 1000), int(duration * 1000)
            for stat, value in stats.items():
                st = ev.stats.add()
                st.metadata_id, st.int64_value = key(stat_ids, stat, plane.stat_metadata), value
    return space.SerializeToString()


DISPATCH_EVENT = "PjRtComputationClient::ExecuteComputation"
WAIT, HAND, TASK = ("ThunkExecutor::Execute (wait for completion)", "ThreadpoolListener::Record",
                    "ThreadpoolListener::StartRegion")


def test_executions_are_given_to_their_dispatches_in_order_not_to_the_last_dispatch_before_them():
    """As the CPU client runs them: one that ran before the session's first dispatch (dispatched before
    it opened); dispatch 0 hands its graph (program 4) to the client's pool; dispatch 1 is made while
    that still runs (a kernel of 4 begins after it), and its graph (3) is handed on later by the pool
    thread; dispatch 2 runs its graph (5) inside the dispatch; dispatch 3 had not run when the session
    ended; dispatch 4 runs one graph (8) on two devices (SPMD), handed on through a pool task that
    hands out one task per device. The first kernel after dispatch 1 is program 4's: it must not name
    dispatch 1."""
    data = _space({
        "tf_pytorchxla/1": [(DISPATCH_EVENT, 100, 10, {}), (HAND, 105, 0, {"_p": 1}),
                            (DISPATCH_EVENT, 120, 5, {}),
                            (DISPATCH_EVENT, 300, 10, {}), ("fusion", 303, 1, {"program_id": 5}), (WAIT, 305, 1, {}),
                            (DISPATCH_EVENT, 400, 1, {}),
                            ("PjRtComputationClient::ExecuteReplicated", 500, 10, {}), (HAND, 505, 0, {"_p": 3})],
        "tf_XLAPjRtCpuClient/2": [("dot.1", 50, 1, {"program_id": 9}), (WAIT, 52, 1, {}),
                                  (TASK, 106, 0, {"_c": 1}), ("dot.2", 107, 1, {"program_id": 4}), (WAIT, 108, 50, {}),
                                  (HAND, 190, 0, {"_p": 2}),
                                  (TASK, 200, 0, {"_c": 2}), ("add", 201, 1, {"program_id": 3}), (WAIT, 202, 1, {})],
        "tf_XLAEigen/3": [("dot.3", 150, 30, {"program_id": 4})],
        "tf_XLAPjRtCpuClient/4": [(TASK, 506, 0, {"_c": 3}), (HAND, 507, 0, {"_p": 4}), (HAND, 507.5, 0, {"_p": 5})],
        "tf_XLAPjRtCpuClient/5": [(TASK, 508, 0, {"_c": 4}), ("mul", 509, 1, {"program_id": 8}), (WAIT, 510, 1, {})],
        "tf_XLAPjRtCpuClient/6": [(TASK, 508, 0, {"_c": 5}), ("mul", 509.5, 1, {"program_id": 8}), (WAIT, 511, 1, {})],
    })
    assert executed_programs(data) == [4, 3, 5, None, 8]


def test_a_profile_without_wait_events_names_each_dispatch_by_the_first_kernel_after_it():
    """Another runtime's profile: the first kernel after a dispatch, unless the next dispatch began
    before it."""
    data = _space({"tf_pytorchxla/1": [(DISPATCH_EVENT, 100, 1, {}), (DISPATCH_EVENT, 110, 1, {}),
                                       (DISPATCH_EVENT, 130, 1, {})],
                   "device/2": [("k", 105, 1, {"program_id": 2}), ("k", 140, 1, {"program_id": 6})]})
    assert executed_programs(data) == [2, None, 6]


def test_modules_are_handed_out_once_and_executions_placed_in_the_cell(session_bytes):
    lean = LeanModules()
    problems: list[str] = []
    first = lean.new([session_bytes], problems)
    assert [m.number for m in first] == [0] and first[0].allocations and not problems
    assert lean.new([session_bytes]) == []  # seen: a later session lists the live module again
    # the session opened after 5 executions; the cell started at 4 and ran 4: its 2nd and 3rd ran it
    assert lean.programs([(session_bytes, 5)], 4, 4) == [None, 0, 0, None]


def test_bad_bytes_are_a_problem_not_a_crash():
    problems: list[str] = []
    assert LeanModules().new([b"\x0a\x05junk!"], problems) == []
    assert problems and "could not be read" in problems[0]
    with pytest.raises(ProtoError):
        read_hlo_proto(b"\x0a\x03abc")
    with pytest.raises(ProfileFormatError):
        executed_programs(b"not a profile")


# --- pair_lean ----------------------------------------------------------------------------------
CELL = "<ipython-input-7-abc>"


def _frames(line: int, *inner: tuple[str, str]) -> list[Frame]:
    return [Frame(fn, file, 1) for fn, file in inner] + [Frame("<module>", CELL, line)]


def _sync(enter: float, line: int, final: bool = False) -> joins.ExplicitSync:
    return joins.ExplicitSync(enter=enter, exit=enter + 0.001, executed=True, final=final,
                              frames=_frames(line, ("sync", "/x/site-packages/torch_xla/torch_xla.py")))


def _ex(start: float, seconds: float = 0.01) -> Sample:
    return Sample(end=start + seconds, seconds=seconds)


def test_a_loop_with_a_value_read_names_every_step():
    """Per iteration: an implicit sync (``.item()``) then ``torch_xla.sync()``; the first iteration
    compiles both graphs, later ones hit: each hit gets the graph and the frames of the step that synced
    at its place, with or without the profile's program ids."""
    item = SyncEvent("compile", "", "cell_7", "aaa", frames=_frames(3, ("item", "/x/site-packages/torch/_tensor.py")))
    step = SyncEvent("compile", "", "cell_7", "bbb", frames=_frames(4, ("_xla_lab_step_marker", "/x/xla_lab/x.py")))
    syncs = [_sync(1.0, 4), _sync(2.0, 4), _sync(3.0, 4)]
    executions = [_ex(0.5), _ex(1.01), _ex(1.5), _ex(2.01), _ex(2.5), _ex(3.01)]
    compiles = [Sample(end=0.49, seconds=0.4), Sample(end=1.0, seconds=0.4)]
    for programs in (None, [1, 2, 1, 2, None, None]):
        paired = joins.pair_lean([item, step], syncs, executions, compiles, programs=programs, graph_of={})
        assert [(p.event.graph_hash, p.miss, p.explicit is not None) for p in paired] == [
            ("aaa", True, False), ("bbb", True, True), ("aaa", False, False), ("bbb", False, True),
            ("aaa", False, False), ("bbb", False, True)]
        steps = joins.steps_of(paired, CELL, ["", "", "v = loss.item()", "torch_xla.sync()"])
        assert [s.sync_line for s in steps] == [3, 4, 3, 4, 3, 4]
        assert steps[2].sync_cause == steps[0].sync_cause and ".item()" in steps[0].sync_cause


def test_the_profile_names_a_hit_where_the_place_cannot():
    """Two graphs synced from one line (a shape that alternates): the place would say the last one; the
    program the profile recorded says which."""
    first = SyncEvent("compile", "", "c", "h8", frames=_frames(2))
    second = SyncEvent("compile", "", "c", "h16", frames=_frames(2))
    syncs = [_sync(t, 2) for t in (1.0, 2.0, 3.0, 4.0)]
    executions = [_ex(t + 0.01) for t in (1.0, 2.0, 3.0, 4.0)]
    compiles = [Sample(end=1.0, seconds=0.5), Sample(end=2.0, seconds=0.5)]
    by_place = joins.pair_lean([first, second], syncs, executions, compiles)
    assert [p.event.graph_hash for p in by_place] == ["h8", "h16", "h16", "h16"]
    profiled = joins.pair_lean([first, second], syncs, executions, compiles, programs=[10, 11, 10, 11], graph_of={})
    assert [p.event.graph_hash for p in profiled] == ["h8", "h16", "h8", "h16"]


def test_earlier_runs_name_the_hits_of_a_cell_run_again():
    first = joins.pair_lean([SyncEvent("compile", "", "c", "abc", frames=_frames(2))], [_sync(1.0, 2)], [_ex(1.01)],
                            [Sample(end=1.0, seconds=0.5)])
    steps = joins.steps_of(first, CELL, ["", "torch_xla.sync()"])
    known = joins.lean_sites(steps, first)
    again = joins.pair_lean([], [_sync(5.0, 2)], [_ex(5.01)], [], known)
    assert again[0].event.graph_hash == "abc" and not again[0].miss
    assert joins.pair_lean([], [_sync(5.0, 2)], [_ex(5.01)], [])[0].event.graph_hash == "unknown"


def test_torch_compile_runs_name_their_graph_and_are_not_syncs():
    """torch.compile's openxla backend runs a traced graph through ``_run_cached_graph``: the hook's
    record carries the hash it was given; the step is that call's, not a ``torch_xla.sync()``."""
    run = joins.ExplicitSync(enter=1.0, exit=1.1, executed=True, graph_hash="fwd",
                             frames=[Frame("optimized_mod", "/x/site-packages/torch_xla/_dynamo/dynamo_bridge.py", 5)]
                             + _frames(3))
    paired = joins.pair_lean([], [run], [_ex(1.01)], [])
    assert paired[0].event.graph_hash == "fwd" and paired[0].explicit is None
    steps = joins.steps_of(paired, CELL, ["", "", "out = model(x)"])
    assert steps[0].sync_cause.startswith("torch.compile(backend=\"openxla\") ran its compiled forward graph")


def test_the_end_of_cell_sync_is_its_own_place():
    paired = joins.pair_lean([SyncEvent("compile", "", "c", "tail", frames=_frames(9))], [_sync(1.0, 3, final=True)],
                             [_ex(1.01)], [Sample(end=1.0, seconds=0.2)])
    steps = joins.steps_of(paired, CELL, [""] * 9)
    assert steps[0].sync_cause == "end of cell" and steps[0].graph_hash == "tail" and steps[0].cache == "miss"


def _bridge_frames() -> list[Frame]:
    return [Frame("optimized_mod", "/x/site-packages/torch_xla/_dynamo/dynamo_bridge.py", 5)] + _frames(3)


def test_a_torch_compile_run_that_syncs_its_inputs_first_is_two_steps():
    """torch.compile's bridge first syncs the graph's pending inputs (``_xla_sync_multi``, waited for),
    then runs the graph (``_run_cached_graph``), whose execution begins after the call returned: two
    records, two steps, each with the bridge's frames; the inputs' graph named by its program."""
    inputs = joins.ExplicitSync(enter=0.95, exit=0.99, executed=True, tensors=True, frames=_bridge_frames())
    run = joins.ExplicitSync(enter=1.0, exit=1.001, executed=True, graph_hash="bwd", frames=_bridge_frames())
    paired = joins.pair_lean([], [inputs, run], [_ex(0.96, 0.001), _ex(1.003)], [], programs=[7, 8],
                             graph_of={7: "inputs"})
    assert [(p.event.graph_hash, p.explicit) for p in paired] == [("inputs", None), ("bwd", None)]
    steps = joins.steps_of(paired, CELL, ["", "", "out = model(x)"])
    assert all(s.sync_cause.startswith("torch.compile(backend=\"openxla\") ran its compiled") for s in steps)


def test_an_execution_that_ended_before_a_record_was_entered_is_not_its():
    """A short graph waited for just before torch.compile's run was entered (here 20 us before: a value
    read), and the run's own execution starting late, after the call returned and after the next sync
    was entered (a loaded machine): each execution still goes to whoever handed it over. (Pairing by
    time with a slack gave the first one to the run, and the run's graph hash to it.)"""
    run = joins.ExplicitSync(enter=1.0, exit=1.0004, executed=True, graph_hash="bwd", frames=_bridge_frames())
    sync = _sync(1.001, 4)
    executions = [Sample(end=0.99998, seconds=0.00005), _ex(1.0012, 0.002), _ex(1.004)]
    paired = joins.pair_lean([], [run, sync], executions, [], programs=[7, 8, 9], graph_of={7: "g7", 9: "g9"})
    assert [(p.event.graph_hash, p.explicit) for p in paired] == [("g7", None), ("bwd", None), ("g9", sync)]
    owners = joins._owners([run, sync], executions)
    assert [how for how, _ in owners] == [None, "ran", "sync"]

