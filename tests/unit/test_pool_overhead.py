"""Pooling runs of the capture-overhead benchmark (``benchmarks/pool_overhead.py``): the ratios it takes from
the saved rounds, the three-in-a-row verdict and the pooled interval. Pure: saved runs written here in the
format ``bench_capture_overhead.py --json`` writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import pool_overhead as pool  # noqa: E402


def _run(lean: float, full: float = 1.0, rounds: int = 4, big: str = "12") -> dict:
    """A saved run whose lean rounds all cost ``lean`` times plain's (full's ``full``), compile and loops."""
    plain = {"loop": 1.8, "loop_cpu": 1.7, "short": 1.6, "short_cpu": 1.5, "tiny": 0.06, "tiny_cpu": 0.05}

    def scaled(f: float) -> dict:
        return {k: v * f for k, v in plain.items()}

    compile_round = {"compile_s": 2.0, "wall_s": 2.5, "cpu_s": 4.0}
    compiled = lambda f: [{k: v * f for k, v in compile_round.items()} for _ in range(rounds)]  # noqa: E731
    return {
        "code": "abc1234", "started": "2026-12-03T08:00:00",
        "steady": {"plain": [dict(plain) for _ in range(rounds)], "full": [scaled(full) for _ in range(rounds)],
                   "lean": [scaled(lean) for _ in range(rounds)]},
        "compile": {"2": {"plain": compiled(1.0), "full": compiled(full), "lean": compiled(lean)},
                    big: {"plain": compiled(1.0), "full": compiled(full), "lean": compiled(lean)}},
    }


def test_every_goal_is_read_from_the_saved_rounds():
    run = _run(lean=1.01, full=1.02)
    got = {f.label: f.ratios(run) for f in pool.FIGURES}
    assert got["short loop (3 ms), lean"] == pytest.approx([1.01] * 4)
    assert got["Adam loop (9 ms), full"] == pytest.approx([1.02] * 4)
    assert got["big model first two steps, lean wall"] == pytest.approx([1.01] * 4)
    assert pool.meets(run)
    assert not pool.meets(_run(lean=1.025))  # (over the loops' 1.02, under the compiles' 1.03)


def test_three_in_a_row_needs_three_adjacent_runs_that_meet_every_goal():
    good, bad = _run(1.0), _run(1.05)
    assert not pool.three_in_a_row([good, good, bad, good, good])
    assert pool.three_in_a_row([bad, good, good, good])
    partial = dict(good, compile={})  # (a run stopped before its compile rows measured no compile goal)
    assert pool.meets(partial) and not pool.three_in_a_row([good, partial, good])


def test_pooled_interval_covers_the_rounds_and_narrows_with_more_runs():
    noisy = [[1.0, 1.04, 0.98, 1.02], [1.03, 1.01, 0.99, 1.05], [0.97, 1.02, 1.0, 1.01]]
    low, high = pool.pooled_interval(noisy, reps=2000)
    assert 0.97 <= low <= 1.01 <= high <= 1.05
    wide = pool.pooled_interval(noisy[:1], reps=2000)
    assert wide[1] - wide[0] >= high - low


def test_the_script_prints_each_goal_per_run_and_pooled(tmp_path):
    paths = []
    for i, lean in enumerate((1.0, 1.01, 1.04)):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(_run(lean, big="6")))
        paths.append(str(path))
    out = subprocess.run([sys.executable, str(BENCHMARKS / "pool_overhead.py"), *paths, "--bootstrap", "200"],
                         capture_output=True, text=True, check=True).stdout
    assert "short loop (3 ms), lean (goal <= 1.02)" in out and "runs meeting it 2/3" in out
    assert "big model first two steps, lean CompileTime" in out  # (any --big-layers)
    assert "pooled: median 1.010 of 12 rounds" in out
    chances = [float(c) for c in re.findall(r"chance that one more run meets it: ([0-9.]+)", out)]
    assert len(chances) == 7 and chances[0] == 1.0  # (full capture's loop: 1.0 in every run)
    assert all(0.5 <= c <= 0.8 for c in chances[1:])  # (lean's goals: met in two of the three runs, sampled)
    assert "chance that one more run meets every goal (its parts drawn from these runs, rounds resampled):" in out
    assert out.rstrip().endswith("three runs in a row meeting every goal: no")


def _noisy(run: dict, layers: str, mode: str, ratios: list[float]) -> dict:
    """``run`` with ``mode``'s rounds of the ``layers`` compile path at these ratios to plain's."""
    run = json.loads(json.dumps(run))
    run["compile"][layers][mode] = [{k: v * r for k, v in p.items()}
                                    for p, r in zip(run["compile"][layers]["plain"], ratios)]
    return run


def test_the_chance_of_a_run_meeting_the_goals_follows_its_rounds():
    assert pool.chance_per_run([_run(1.0), _run(0.99)], reps=200) == (1.0, pytest.approx(
        {f.label: 1.0 for f in pool.FIGURES if f.goal is not None}))
    every, each = pool.chance_per_run([_run(1.0), _run(1.04, full=1.04)], reps=2000)  # (one misses every goal)
    assert 0.4 <= every <= 0.6 and all(0.4 <= p <= 0.6 for p in each.values())
    # a goal whose rounds straddle it is met now and then; the others always
    straddling = _noisy(_run(1.0), "12", "lean", [0.95, 1.0, 1.05, 1.1])
    every, each = pool.chance_per_run([straddling], reps=2000)
    assert 0.1 <= every <= 0.9 and every == pytest.approx(min(each.values()), abs=0.05)
    assert each["short loop (3 ms), lean"] == 1.0 and each["2-layer first two steps, lean wall"] == 1.0
    # a part's figures come from the same resampled rounds: CompileTime and wall time miss together
    assert each["big model first two steps, lean CompileTime"] == each["big model first two steps, lean wall"]
    assert pool.chance_per_run([dict(_run(1.0), steady=None, compile={})], reps=10) is None


def test_null_runs_are_pooled_apart_from_the_runs_that_measure_capture():
    """A --null run's "lean" is plain torch_xla again: pooled with real runs it would dilute lean's cost."""
    real, null = _run(1.04), dict(_run(1.0), null=True)
    out = pool.report([real, null, real], ["A", "N", "B"], reps=100)
    measured, noise = out.split("\n\n")
    assert "2 runs: A (" in measured and "N (" not in measured and "NULL RUNS" not in measured
    assert "runs meeting it 0/2" in measured
    assert noise.startswith("NULL RUNS, plain torch_xla in every place") and "1 runs: N (" in noise
    assert "runs meeting it 1/1" in noise
    assert not pool.is_null(real) and pool.is_null(null)


def test_a_null_run_puts_plain_torch_xla_in_every_place():
    import bench_capture_overhead as bench

    assert [bench.worker_mode(m, null=True) for m in ("plain", "full", "lean")] == ["plain"] * 3
    assert [bench.worker_mode(m, null=False) for m in ("plain", "full", "lean")] == ["plain", "full", "lean"]


def test_runs_under_different_pjrt_settings_are_flagged():
    """PJRT_CPU_ASYNC_CLIENT=0 changes which thread waits for an execution: such runs are not like with like."""
    plain, synced = _run(1.0), dict(_run(1.0), pjrt_env={"PJRT_CPU_ASYNC_CLIENT": "0"})
    assert "NOTE" not in pool.report([plain, _run(1.01)], ["a", "b"], 50)
    assert "NOTE" not in pool.report([synced, synced], ["a", "b"], 50)
    assert "different PJRT settings: a defaults, b PJRT_CPU_ASYNC_CLIENT=0" in pool.report([plain, synced], ["a", "b"], 50)


def test_runs_of_differently_sized_loops_are_flagged():
    """The cached loops are sized to the machine (hidden blocks): a run of other sizes is not like with like."""
    first, sized = _run(1.0), dict(_run(1.0), blocks={"loop": 2, "short": 7})
    assert "NOTE" not in pool.report([first, dict(_run(1.0), blocks={"loop": 1, "short": 2})], ["a", "b"], 50)
    assert "NOTE" not in pool.report([sized, sized], ["a", "b"], 50)
    assert "differ between runs (hidden blocks): a Adam 1 short 2, b Adam 2 short 7" in pool.report(
        [first, sized], ["a", "b"], 50)


def test_the_benchmark_sizes_its_loops_on_the_line_through_two_points():
    import bench_capture_overhead as bench

    assert bench.blocks_for({"2": 1.33, "6": 2.72}, 3.0) == 7
    assert bench.blocks_for({1: 5.9, 5: 16.3}, 9.0) == 2
    assert bench.blocks_for({1: 5.0, 5: 4.0}, 9.0) == 1  # (noise: the first models)
    assert bench.blocks_for({1: 10.5, 5: 20.0}, 9.0) == 0  # (one core: no hidden block at all)
    assert bench.blocks_for({2: 1.0, 6: 1.1}, 100.0) == 40  # (bounded)
    assert bench.loops_setup(bench.LOOP_BLOCKS, bench.SHORT_BLOCKS).startswith(bench.SETUP_MLP)


def test_the_benchmark_prints_the_ratios_pooling_reads():
    """bench_capture_overhead.py prints its medians through the same formulas (one place for both scripts)."""
    import bench_capture_overhead as bench

    run = _run(lean=1.01, full=1.02)
    turns = run["steady"]
    for t in turns["full"]:
        t["always"] = t["loop"] * 1.5  # (--track-lines always: over plain's loop)
    assert pool.steady_ratios(turns, "lean", "short") == pool.FIGURES[2].ratios(run)
    assert pool.steady_ratios(turns, "full", "always", "loop") == pytest.approx([1.53] * 4)
    assert pool.steady_ratios(turns, "lean", "always", "loop") == []  # (not measured in lean)
    assert pool.compile_ratios(run["compile"]["2"], "lean", "wall_s") == pytest.approx([1.01] * 4)
    assert bench.quartiles([1.01]) == "1.010..1.010"  # (--rounds 1)
    assert bench.quartiles([1.0, 1.1, 1.2, 1.3]) == bench.quartiles([1.3, 1.2, 1.1, 1.0])


def _twin(run: dict, beside: dict[str, float]) -> dict:
    """``run`` as a twin run writes it: no ``plain`` rounds, but the plain process beside each mode
    (``plain_full``, ``plain_lean``), here ``beside[mode]`` times as slow as the plain rounds given."""
    run = json.loads(json.dumps(run))
    for part in [run["steady"], *run["compile"].values()]:
        plain = part.pop("plain")
        for mode, f in beside.items():
            part[f"plain_{mode}"] = [{k: v * f for k, v in p.items()} for p in plain]
    return dict(run, layout="twin")


def test_a_twin_run_compares_each_mode_with_the_plain_process_beside_it():
    """In a twin run plain torch_xla runs twice a round, once beside full's process and once beside lean's:
    each mode's ratio is over its own neighbour, never the other's."""
    run = _twin(_run(lean=1.02, full=1.02), {"full": 1.0, "lean": 1.02})
    got = {f.label: f.ratios(run) for f in pool.FIGURES}
    assert got["Adam loop (9 ms), lean"] == pytest.approx([1.0] * 4)
    assert got["Adam loop (9 ms), full"] == pytest.approx([1.02] * 4)
    assert got["big model first two steps, lean wall"] == pytest.approx([1.0] * 4)
    assert got["2-layer first two steps, full wall"] == pytest.approx([1.02] * 4)
    assert pool.meets(run) and pool.layout(run) == "twin" and pool.layout(_run(1.0)) == "turns"


def test_runs_of_different_layouts_are_pooled_apart():
    """Taking turns on two cores and running side by side on one core each are different measurements."""
    turns, twin = _run(1.0), _twin(_run(1.0), {"full": 1.0, "lean": 1.0})
    out = pool.report([turns, twin, twin], ["T", "W1", "W2"], reps=50)
    first, second = out.split("\n\n")
    assert "1 runs: T (" in first and "TWIN LAYOUT" not in first
    assert "TWIN LAYOUT" in second and "2 runs: W1 (" in second and "T (" not in second


def test_a_twin_run_pins_its_processes_to_one_core_each():
    """on_core starts a child on one core (before torch_xla sizes its thread pools); pin moves every thread."""
    import os

    import bench_capture_overhead as bench

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    cores = sorted(os.sched_getaffinity(0))[:2]
    child = subprocess.Popen([sys.executable, "-c", "import threading, sys; "
                              "threading.Thread(target=sys.stdin.read, daemon=True).start(); print('up', flush=True); "
                              "sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             preexec_fn=bench.on_core(cores[0]))
    try:
        assert child.stdout.readline().strip() == "up"  # (its second thread started)
        assert os.sched_getaffinity(child.pid) == {cores[0]}
        bench.pin(child.pid, cores[1])
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) >= 2 and all(os.sched_getaffinity(t) == {cores[1]} for t in tids)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert bench.on_core(None) is None
