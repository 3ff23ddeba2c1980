"""The join of a profile's events to a cell's steps, on hand-made events (measured time on real
profiles is in tests/kernel/test_profile.py)."""

from __future__ import annotations

import pytest


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


def _plane(dispatches, kernels, compiles=()):
    """One host plane: dispatch events, kernels (name, start, duration, module), compile events."""
    from xla_lab.profile.xplane import Event, Line, Plane

    dispatch = "PjRtComputationClient::ExecuteComputation"
    host = Line("python", [Event(dispatch, t, 1, {}) for t in dispatches]
                + [Event("XLAGraphExecutor::Compile", start, end - start, {}) for start, end in compiles])
    device = Line("tf_XLAPjRtCpuClient/1", [Event(n, s, d, {"hlo_module": m}) for n, s, d, m in kernels])
    return Plane("/host:CPU", [host, device])


def test_a_kernels_one_time_warm_up_is_left_out_of_its_time():
    """Found: a cell's first profiled run read a 32x64 @ 64x64 matmul as 5x 6.01 ms: the process's first
    matrix multiply ran 30 ms (oneDNN's gemm generates its kernels on first use), the other four 20-60
    µs, and the mean made the kernel 200x slower than it is. The first run is left out, and said."""
    from xla_lab.profile.join import StepInfo, join_profile

    runs = [30e6, 40e3, 25e3, 30e3, 20e3]  # ns
    starts = [10 + i * 40e6 for i in range(5)]
    kernels = [("dot.5", s, d, "m.A") for s, d in zip(starts, runs)] + \
              [("fusion", s + d + 10, 2e3, "m.A") for s, d in zip(starts, runs)]
    steps = [StepInfo(i, "m.A", "ha", frozenset({"dot.5", "fusion"})) for i in range(5)]
    record = join_profile([_plane([s - 5 for s in starts], kernels)], steps)
    dot = record["graphs"]["ha"]["compute"]["dot.5"]
    assert dot["runs"] == 4 and dot["compute_ns"] == sum(runs[1:]) and dot["left_out"] == {"warm-up": [1, 30e6]}
    assert record["graphs"]["ha"]["kernels"]["dot.5"][0] == 5  # (the recorded runs are all kept)
    assert record["graphs"]["ha"]["compute"]["fusion"]["left_out"] == {}
    assert record["steps"][0]["left_out_ns"] == 30e6 and record["steps"][0]["compute_ns"] == 2e3
    # a kernel whose runs all take long is not a warm-up; neither is a first run only a little slower
    steady = [(n, s, 30e6 if n == "dot.5" else d, m) for n, s, d, m in kernels]
    assert join_profile([_plane([s - 5 for s in starts], steady)], steps)["graphs"]["ha"]["compute"]["dot.5"]["runs"] == 5
    mild = [(n, s, 300e3 if (n, s) == ("dot.5", starts[0]) else d, m) for n, s, d, m in kernels]
    assert join_profile([_plane([s - 5 for s in starts], mild)], steps)["graphs"]["ha"]["compute"]["dot.5"]["runs"] == 5


def test_runs_beside_a_compile_are_left_out_and_breakdown_says_so():
    from xla_lab.profile.join import StepInfo, join_profile

    kernels = [("dot.1", 10, 50, "m.A"), ("dot.1", 100, 10, "m.A"), ("dot.1", 200, 10, "m.A")]
    steps = [StepInfo(i, "m.A", "ha", frozenset({"dot.1"})) for i in range(3)]
    record = join_profile([_plane([5, 95, 195], kernels, compiles=[(0, 40)])], steps)
    dot = record["graphs"]["ha"]["compute"]["dot.1"]
    assert dot["runs"] == 2 and dot["compute_ns"] == 20 and dot["left_out"] == {"beside a compile": [1, 50]}


def test_compute_time_shares_each_instant_and_never_exceeds_the_step():
    """A step's kernels that run side by side share the instants they overlap: its compute time is the
    union of its kernels' intervals, within its dispatch-to-ready time (ExecuteTime), whatever their sum.
    Another step's kernels running then are that step's own (found: sharing with them halved the time of
    a tiny matmul whose executions ran back to back)."""
    from xla_lab.profile.join import StepInfo, join_profile

    # step 0: two kernels side by side (0-100, 50-150), step 1 starts while step 0 runs (140-200)
    kernels = [("a", 0, 100, "m.A"), ("b", 50, 100, "m.A"), ("c", 140, 60, "m.B")]
    steps = [StepInfo(0, "m.A", "ha", frozenset({"a", "b"}), 160e-9), StepInfo(1, "m.B", "hb", frozenset({"c"}), 200e-9)]
    record = join_profile([_plane([-5, 0], kernels)], steps)
    first, second = record["steps"]
    assert record["graphs"]["ha"]["compute"]["a"]["compute_ns"] == 50 + 50 / 2
    assert record["graphs"]["ha"]["compute"]["b"]["compute_ns"] == 50 / 2 + 50
    assert record["graphs"]["ha"]["compute"]["a"]["shared_ns"] == 25
    assert first["compute_ns"] == 150 == first["busy_ns"] <= first["wall_ns"] == 160
    assert second["compute_ns"] == 60 and second["wall_ns"] == 200
    for row in record["steps"]:
        assert row["compute_ns"] + row["left_out_ns"] <= row["busy_ns"] <= row["wall_ns"]
    # shares in thirds, whose float sum passed the union by its last digit (found on mixer_dynamo)
    thirds = [("k0", 389, 224, "m.A"), ("k1", 102, 331, "m.A"), ("k2", 172, 414, "m.A")]
    row = join_profile([_plane([-5], thirds)], [StepInfo(0, "m.A", "ha", frozenset({"k0", "k1", "k2"}))])["steps"][0]
    assert row["compute_ns"] + row["left_out_ns"] <= row["busy_ns"] == 613 - 102
    assert row["compute_ns"] == pytest.approx(row["busy_ns"])


def test_the_roofline_reads_as_a_share_of_the_roof_never_a_verdict():
    from xla_lab.profile.breakdown import KernelTime, _roofline, fmt_share

    tiny = KernelTime("h", "dot.5", "dot", 4, 4 * 30e3, 30e3, 1.0, flops=262_144, bytes=32_768)
    _roofline(tiny, {"flops_per_s": 100e9, "bytes_per_s": 20e9})
    assert tiny.roof == "compute" and tiny.roof_text == "8.7% of the compute roof"
    slow = KernelTime("h", "dot.5", "dot", 1, 6e6, 6e6, 1.0, flops=262_144, bytes=32_768)
    _roofline(slow, {"flops_per_s": 100e9, "bytes_per_s": 20e9})
    assert slow.roof_text == "0.044% of the compute roof"
    copy = KernelTime("h", "copy", "loop", 10, 10 * 2e3, 2e3, 1.0, flops=0, bytes=4096)
    _roofline(copy, {"flops_per_s": 100e9, "bytes_per_s": 20e9})
    assert copy.roof_text == "launch overhead, 10% of the memory roof"
    assert [fmt_share(x) for x in (0.35, 0.035, 0.00012)] == ["35%", "3.5%", "0.012%"]


def test_a_kernel_above_the_measured_peak_raises_it(monkeypatch, tmp_path):
    """Found: peaks measured while the machine was busy (93 GFLOP/s, cached; 183-198 on the quiet machine)
    put tutorial 07's matmuls at 150% of the compute roof. A kernel faster than the peak has it measured
    again, and the peak is at least what the kernel achieved."""
    from xla_lab.profile import peaks

    monkeypatch.delenv("XLA_LAB_PEAKS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # (read when asked: peaks.cache_file)
    measured = iter([{"flops_per_s": 93e9, "bytes_per_s": 40e9, "source": "busy"},
                     {"flops_per_s": 120e9, "bytes_per_s": 50e9, "source": "measured"}])
    monkeypatch.setattr(peaks, "measure", lambda: next(measured))
    assert peaks.peaks("CPU")["flops_per_s"] == 93e9  # (measured once, cached)
    raised = peaks.at_least("CPU", 140e9)
    assert raised["flops_per_s"] == 140e9 and raised["bytes_per_s"] == 50e9
    assert "the best rate a kernel achieved" in raised["source"]
    assert peaks.peaks("CPU") == raised  # (kept for the next profile)
    assert peaks.at_least("TPU", 1e15) is None


def test_the_runs_right_after_a_warm_up_are_its_tail():
    """Seen on a tiny matmul, each of 20 steps waited for: 34 ms, then 42, 36, 24, 40, 17, 20, 16, 12 µs,
    then 6-7 µs from the 10th run on: the first half's runs taking over twice a steady run are the
    warm-up's tail (not only those in a row: found, one fast run among them cut the tail short)."""
    from xla_lab.profile.breakdown import KernelTime
    from xla_lab.profile.join import StepInfo, join_profile

    runs = [34e6, 42e3, 36e3, 12e3, 40e3, 17e3, 20e3, 16e3, 24e3] + [7e3] * 11
    starts = [10 + i * 40e6 for i in range(len(runs))]
    steps = [StepInfo(i, "m.A", "ha", frozenset({"dot.5"})) for i in range(len(runs))]
    record = join_profile([_plane([s - 5 for s in starts], [("dot.5", s, d, "m.A") for s, d in zip(starts, runs)])], steps)
    dot = record["graphs"]["ha"]["compute"]["dot.5"]
    tail = [d for d in runs[1:10] if d > 14e3]
    assert dot["left_out"] == {"warm-up": [1 + len(tail), runs[0] + sum(tail)]} and dot["runs"] == 20 - 1 - len(tail)
    assert dot["median_ns"] == 7e3
    k = KernelTime("ha", "dot.5", "dot", 12, dot["compute_ns"], 12e3, 1.0, flops=0, bytes=0,
                   left_out={"warm-up": (8, 34.2e6)})
    assert k.left_out_text == "first run and 7 slow runs after it 34.20 ms: a one-time warm-up, left out"
