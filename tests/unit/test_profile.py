"""The join of a profile's events to a cell's steps, on hand-made events (measured time on real
profiles is in tests/kernel/test_profile.py)."""

from __future__ import annotations


def test_join_pairs_ends_and_skips_a_step_that_ran_no_kernel():
    """The pure join on hand-made events: a kernel runs from its start to its later `end:` event
    (paired by flow id, or in order); a step whose graph ran no kernel gets no device time and does not
    take a later step's execution; an execution of another module is counted as not the cell's."""
    from xla_lab.profile.join import StepInfo, join_profile
    from xla_lab.profile.xplane import Event, Line, Plane

    def kernel(name, module, start, dur, flow=None):
        stats = {"hlo_module": module}
        if flow is not None:
            stats["_p"] = flow
        return Event(name, start, dur, stats)

    dispatch = "PjRtComputationClient::ExecuteComputation"
    host = Line("python", [Event(dispatch, 0, 5, {}), Event(dispatch, 100, 5, {}), Event(dispatch, 200, 5, {}),
                           Event(dispatch, 300, 5, {})])
    device = Line("tf_XLAPjRtCpuClient/1", [
        kernel("dot.1", "m.A", 10, 2, flow=7), kernel("add.2", "m.A", 40, 10),
        kernel("mul.3", "m.Other", 110, 10),
        kernel("dot.1", "m.A", 210, 2), kernel("add.2", "m.A", 240, 10),
    ])
    ends = Line("tf_XLAEigen/2", [Event("end: dot.1", 30, 1, {"_c": 7}), Event("end: dot.1", 230, 1, {})])
    steps = [StepInfo(0, "m.A", "ha", frozenset({"dot.1", "add.2"})),
             StepInfo(1, "m.B", "hb", frozenset({"copy"})),
             StepInfo(2, "m.A", "ha", frozenset({"dot.1", "add.2"}))]
    record = join_profile([Plane("/host:CPU", [host, device, ends])], steps)
    assert [r["step"] for r in record["steps"]] == [0, 2]
    kernels = record["graphs"]["ha"]["kernels"]
    assert kernels["dot.1"] == [2, 21 + 21, 21]  # 10 -> 31 by flow, 210 -> 231 in order
    assert kernels["add.2"] == [2, 20, 10]
    first = record["steps"][0]
    assert first["span_ns"] == 40 and first["busy_ns"] == 31 and first["kernel_ns"] == 31
    assert record["unmatched_executions"] == 1 and record["unmatched_ns"] == 10


def test_join_keeps_an_execution_whose_last_kernels_start_after_the_next_dispatch():
    """Steps are dispatched while the one before still runs (a loaded machine): step 0's last kernel
    starts after the dispatches of steps 1 and 2, and still belongs to step 0."""
    from xla_lab.profile.join import StepInfo, join_profile
    from xla_lab.profile.xplane import Event, Line, Plane

    dispatch = "PjRtComputationClient::ExecuteComputation"
    host = Line("python", [Event(dispatch, t, 1, {}) for t in (0, 10, 11)])
    k = lambda name, module, start: Event(name, start, 1, {"hlo_module": module})  # noqa: E731
    device = Line("tf_XLAPjRtCpuClient/1", [k("convert", "m.A", 1), k("dot.60", "m.A", 2), k("bcast", "m.A", 30),
                                            k("dot.3", "m.B", 31), k("mul", "m.B", 32), k("dot.3", "m.B", 40),
                                            k("mul", "m.B", 41)])
    steps = [StepInfo(0, "m.A", "ha", frozenset({"convert", "dot.60", "bcast"})),
             StepInfo(1, "m.B", "hb", frozenset({"dot.3", "mul"})), StepInfo(2, "m.B", "hb", frozenset({"dot.3", "mul"}))]
    record = join_profile([Plane("/host:CPU", [host, device])], steps)
    assert [r["step"] for r in record["steps"]] == [0, 1, 2] and record["unmatched_executions"] == 0
    assert record["graphs"]["ha"]["kernels"]["bcast"][0] == 1
    assert record["graphs"]["hb"]["kernels"] == {"dot.3": [2, 2.0, 1.0], "mul": [2, 2.0, 1.0]}
    assert [r["span_ns"] for r in record["steps"]] == [30, 2, 2]


def test_join_ends_no_kernel_after_its_execution_was_ready():
    """A parallel kernel's `end:` event can be recorded after the completion it signalled (0.2 ms on
    torch_xla 2.9's CPU client, up to 5 ms on 2.8's, while the next execution already ran): no kernel
    of a step ends after its dispatch plus the step's ExecuteTime; without that time, the events stand."""
    from xla_lab.profile.join import StepInfo, join_profile
    from xla_lab.profile.xplane import Event, Line, Plane

    dispatch = "PjRtComputationClient::ExecuteComputation"
    host = Line("python", [Event(dispatch, 0, 1, {}), Event(dispatch, 100, 1, {})])
    k = lambda name, start, dur, flow: Event(name, start, dur, {"hlo_module": "m.A", "_p": flow})  # noqa: E731
    device = Line("tf_XLAPjRtCpuClient/1", [k("dot.1", 2, 1, 1), k("add.2", 5, 10, 2), k("dot.1", 102, 1, 3),
                                            k("add.2", 105, 10, 4)])
    ends = Line("tf_XLAEigen/2", [Event("end: dot.1", 103, 0, {"_c": 1}), Event("end: dot.1", 150, 0, {"_c": 3})])
    kernels = frozenset({"dot.1", "add.2"})
    for execute_s, spans, dots in ((40e-9, [38, 38], [38 + 38, 38]), (None, [101, 48], [101 + 48, 101])):
        steps = [StepInfo(0, "m.A", "ha", kernels, execute_s), StepInfo(1, "m.A", "ha", kernels, execute_s)]
        record = join_profile([Plane("/host:CPU", [host, device, ends])], steps)
        assert [r["span_ns"] for r in record["steps"]] == spans, execute_s
        assert record["graphs"]["ha"]["kernels"]["dot.1"][1:] == dots, execute_s
