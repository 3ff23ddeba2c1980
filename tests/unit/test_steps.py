"""The joins of ``xla_lab/capture/steps.py`` without compiling anything: on what real ``%%xla`` cells
recorded on this machine (``tests/fixtures/cells``, made by its ``make_fixtures.py``: sync logs,
metric samples, sync-hook records) they give the steps the live recorder gave, and the cell's
timings add up to torch_xla's metrics; and on small hand-made inputs, the cases fixtures rarely show
(a compile XLA rejected, missing samples; recompile baselines are in test_recompile_reasons.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xla_lab.capture import steps as joins
from xla_lab.capture.metrics import Sample
from xla_lab.capture.records import StepRecord
from xla_lab.capture.xla_logs import Frame, SyncEvent, hash_text, parse_debug_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cells"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def replay(data: dict):
    """The joins, as the recorder runs them, on a fixture's inputs."""
    inp = data["input"]
    events = parse_debug_log(inp["sync_log"])
    explicit = [joins.ExplicitSync(**r) for r in inp["explicit"]]
    samples = {k: [Sample(end, seconds) for end, seconds in v] for k, v in inp["samples"].items()}
    paired = joins.pair_executions(events, inp["modules"], explicit)
    steps = joins.steps_of(paired, inp["cell_file"], inp["source"].splitlines())
    of_step = [p.explicit for p in paired]
    outside = joins.assign_timings(steps, of_step, samples, inp["t0"])
    joins.assign_fallbacks(steps, of_step, inp["fallbacks_at_start"], inp["fallbacks_at_end"])
    return paired, steps, outside


def test_fixtures_are_there():
    assert set(CASES) >= {"train_loop", "implicit", "fallback", "device_loader"}


@pytest.mark.parametrize("name", CASES)
def test_joins_give_the_recorded_steps_again(name):
    data = load(name)
    paired, steps, outside = replay(data)
    recorded = data["steps"]
    assert [(s.graph_hash, s.cache, s.sync_cause, s.sync_line, s.sync_code, s.fallback_ops) for s in steps] == \
        [(r["graph_hash"], r["cache"], r["sync_cause"], r["sync_line"], r["sync_code"], r["fallback_ops"]) for r in recorded]
    for s, r in zip(steps, recorded):  # (the compile profile's execution wait comes after the joins: None here)
        assert s.timings == pytest.approx({"execution_wait_s": None, **r["timings"]}, abs=1e-9)
    assert outside == pytest.approx(data["outside_steps"])
    # each miss takes a dump of its own, in compile order
    assert [p.module for p in paired if p.miss] == list(range(sum(1 for p in paired if p.miss)))


@pytest.mark.parametrize("name", CASES)
def test_timings_add_up_to_torch_xlas_metrics(name):
    data = load(name)
    _, steps, outside = replay(data)
    totals = data["metrics"]["totals_s"]
    assert sum(s.timings["compile_s"] or 0 for s in steps) == pytest.approx(totals["compile"])
    assert sum(s.timings["execute_s"] or 0 for s in steps) == pytest.approx(totals["execute"])
    for kind in ("to_device", "from_device"):
        shown = sum(s.timings[f"{kind}_s"] for s in steps) + outside.get(f"{kind}_s", 0.0)
        assert shown == pytest.approx(totals[kind])
    assert len(steps) == data["input"]["counts"]["execute"]
    assert sum(1 for s in steps if s.cache == "miss") == data["input"]["counts"]["compile"]
    assert all(s.timings["trace_s"] is not None and s.timings["trace_s"] >= 0 for s in steps)


def test_what_each_fixture_shows():
    causes = {name: [s.sync_cause for s in replay(load(name))[1]] for name in CASES}
    assert causes["train_loop"] == ["torch_xla.sync()"] * 4
    assert [s.cache for s in replay(load("train_loop"))[1]] == ["miss", "miss", "hit", "hit"]
    assert causes["implicit"] == ["implicit: .item() reads the value",
                                  "implicit: tensor printed (print/repr/format needs its value)",
                                  "implicit: Python read a tensor's value (data-dependent code or a CPU fallback)",
                                  "xm.mark_step()"]
    assert set(causes["device_loader"]) == {"torch_xla.sync() by the device loader (MpDeviceLoader)"}
    fallback = replay(load("fallback"))[1]
    assert fallback[-1].fallback_ops == {"linalg_cholesky_ex": 1}  # counted at the next explicit sync
    assert [s.sync_line for s in fallback] == [3, 4, 6]


# --- hand-made inputs -----------------------------------------------------------------------------
def ev(kind: str, h: str, *functions: str) -> SyncEvent:
    return SyncEvent(kind=kind, graph_hash=h, frames=[Frame(f, "x.py", 1) for f in functions])


def test_a_rejected_compile_does_not_take_the_next_compiles_dump():
    """XLA rejected graph A (compiled, never executed) after dumping it; B then compiled and ran: B's
    HLO is the second dump, not the first."""
    events = [ev("compile", "A"), ev("compile", "B"), ev("execute", "B", joins.HOOK_FUNCTION)]
    (p,) = joins.pair_executions(events, 2, [joins.ExplicitSync(0, 1, executed=True)])
    assert p.miss and p.module == 1 and p.explicit is not None
    # without a dump for every compile, misses take the dumps in turn
    (p,) = joins.pair_executions(events, 1, [])
    assert p.module == 0


def test_explicit_records_that_ran_nothing_are_skipped():
    records = [joins.ExplicitSync(0, 1, executed=False), joins.ExplicitSync(1, 2, executed=True, final=True)]
    (p,) = joins.pair_executions([ev("execute", "A", joins.HOOK_FUNCTION)], 0, records)
    assert p.explicit is records[1] and not p.miss
    (s,) = joins.steps_of([p], "cell.py", ["x = 1"])
    assert s.sync_cause == "end of cell" and s.sync_line is None


def test_steps_without_a_sync_log_come_from_the_samples():
    samples = {"compile": [Sample(10.0, 1.0)], "execute": [Sample(10.5, 0.2), Sample(11.0, 0.1)]}
    steps = joins.steps_from_metrics(samples, "g")
    assert [s.cache for s in steps] == ["miss", "hit"]


def test_steps_older_than_the_kept_samples_have_no_timings():
    """torch_xla keeps 1024 samples per metric: in a longer cell the first steps get none."""
    steps = [StepRecord(index=i, graph_name="g", graph_hash="h", cache="hit", sync_cause="torch_xla.sync()")
             for i in range(3)]
    samples = {"execute": [Sample(5.0, 0.5), Sample(6.0, 0.5)], "compile": [], "to_device": [], "from_device": []}
    joins.assign_timings(steps, [joins.ExplicitSync(i, 4.5 + i) for i in range(3)], samples, 0.0)
    assert [s.timings["execute_s"] for s in steps] == [None, 0.5, 0.5]


def test_an_upload_just_after_a_sync_belongs_to_the_next_step():
    """A loop's next batch can be on the device 20-100 us after the sync returned (seen here: 83 us);
    it is the next step's, not the one that just ended (a fixed slack of 0.1 ms once gave it away)."""
    steps = [StepRecord(index=i, graph_name="g", graph_hash="h", cache="hit", sync_cause="torch_xla.sync()")
             for i in range(2)]
    exits = [10.0, 11.0]
    samples = {"execute": [Sample(10.0, 0.1), Sample(11.0, 0.1)], "compile": [], "from_device": [],
               "to_device": [Sample(9.5, 1e-5), Sample(10.0 + 50e-6, 1e-5)]}
    outside = joins.assign_timings(steps, [joins.ExplicitSync(e - 0.5, e) for e in exits], samples, 9.0)
    assert [s.timings["to_device_s"] for s in steps] == [1e-5, 1e-5]
    assert outside == {}


def test_a_value_read_s_step_ends_with_its_transfer_even_when_the_execution_is_stamped_later():
    """An implicit sync (``.item()``) waits for the execution and then the value's transfer, which itself
    waited for the execution. torch_xla stamps the execution's end on another thread, often a few ms after
    the transfer's (seen: 0.1724 against 0.1762 s): the step ends with its transfer, the next step keeps
    its own transfer and compile (the next transfer after the execution's end once ended the step, which
    then took the next compile's time as its trace), and the time covered by both is counted once."""
    steps = [StepRecord(index=i, graph_name="g", graph_hash=f"h{i}", cache="miss", sync_cause="implicit")
             for i in range(2)]
    samples = {"compile": [Sample(10.10, 0.10), Sample(10.30, 0.08)],
               "execute": [Sample(10.16, 0.055), Sample(10.31, 0.005)],
               "from_device": [Sample(10.158, 0.05), Sample(10.312, 0.001)], "to_device": []}
    joins.assign_timings(steps, [None, None], samples, 10.0)
    # step 0: 10.0 -> 10.158: compile 0.1, execution and transfer 10.105 -> 10.158 (0.053): trace 0.005
    assert steps[0].timings["from_device_s"] == pytest.approx(0.05)
    assert steps[0].timings["trace_s"] == pytest.approx(0.005)
    # step 1: 10.158 -> 10.312: compile 0.08, execution 10.305 -> 10.31 and transfer 10.311 -> 10.312: trace 0.068
    assert steps[1].timings["from_device_s"] == pytest.approx(0.001)
    assert steps[1].timings["trace_s"] == pytest.approx(0.068)


def test_a_compiling_sync_s_wait_for_its_execution_is_its_own_timing_not_trace():
    """The compile profile measures what a compiling sync then waited for the step's own execution (torch_xla
    freed its donated inputs on the syncing thread); the step's window up to the sync's return held it, so
    it comes out of ``trace_s`` into ``execution_wait_s``, once, never below zero."""
    from xla_lab.capture.records import CellCapture
    from xla_lab.view.report import totals_line

    steps = [StepRecord(index=i, graph_name="g", graph_hash=f"h{i}", cache="miss", sync_cause="torch_xla.sync()")
             for i in range(3)]
    samples = {"execute": [Sample(11.0, 0.3), Sample(14.0, 0.3), Sample(16.0, 0.3)],
               "compile": [Sample(10.0, 1.0), Sample(13.0, 2.0), Sample(15.5, 0.5)], "to_device": [], "from_device": []}
    joins.assign_timings(steps, [joins.ExplicitSync(s, e) for s, e in ((9.0, 10.5), (12.0, 13.7), (15.0, 16.0))],
                         samples, 9.0)
    assert [round(s.timings["trace_s"], 6) for s in steps] == [0.5, 1.2, 1.8]
    assert all(s.timings["execution_wait_s"] is None for s in steps)
    joins.count_execution_wait(steps[0], 0.3)
    joins.count_execution_wait(steps[0], 0.3)  # (counted once: a second reading changes nothing)
    joins.count_execution_wait(steps[1], 5.0)  # (more than the window held: trace stays at zero)
    joins.count_execution_wait(steps[2], None)  # (no profiler session recorded the sync: nothing known)
    assert [round(s.timings["trace_s"], 6) for s in steps] == [0.2, 0.0, 1.8]
    assert [s.timings["execution_wait_s"] for s in steps] == [0.3, 5.0, None]

    capture = CellCapture(cell_id="c", execution_count=3, source="", started_at=9.0, steps=steps[:1])
    assert totals_line(capture).endswith(" | syncs waited 0.300 s for their step's execution")
    steps[0].timings["execution_wait_s"] = 5e-4  # (below a millisecond: not worth a word)
    assert "waited" not in totals_line(capture)


def test_implicit_causes_are_named_from_frames_and_code():
    printed = [Frame("__format__", "/torch/_tensor.py", 1)]
    assert joins.implicit_cause(printed, "print(t)") == "implicit: tensor printed (print/repr/format needs its value)"
    assert joins.implicit_cause([], "v = t.tolist()") == "implicit: .tolist() reads the value"
    assert joins.implicit_cause([Frame("__bool__", "/torch/_tensor.py", 1)], "if t:") == \
        "implicit: tensor used as a Python number/bool"


def test_a_cached_loops_repeated_blocks_are_parsed_once_and_read_the_same():
    """A 1,000-step cell writes the same execution block 1,000 times: it is parsed once (the cost of
    reading the log was about 0.1 ms per step) and every copy reads exactly as a fresh parse would."""
    log = load("train_loop")["input"]["sync_log"]
    events = parse_debug_log(log)
    hits = [e for e in events if e.kind == "execute"][-1]
    edges = [i for i in range(len(log)) if log.startswith(("Execution Analysis: ====", "Compilation Analysis: ===="), i)
             and (i == 0 or log[i - 1] == "\n")]
    last_block = log[edges[-2]:] + "\n"
    tripled = log + last_block * 3 + "Post Compilation Analysis: ================\n"
    again = parse_debug_log(tripled)
    assert len(again) == len(events) + 3
    assert again[-1] is again[-2] is again[-3]  # one parse, shared (events are read-only)
    assert (again[-1].graph_hash, again[-1].frames) == (hits.graph_hash, hits.frames)
    fresh = parse_debug_log(last_block)[0]
    assert fresh is not again[-1] and fresh == again[-1]
    # the joins give every copy the same cause and line
    paired = joins.pair_executions(again, 0, [])
    steps = joins.steps_of(paired, load("train_loop")["input"]["cell_file"], load("train_loop")["input"]["source"].splitlines())
    assert len({(s.sync_cause, s.sync_line) for s in steps[-3:]}) == 1


def test_a_hash_from_the_bindings_reads_as_the_logs_write_it():
    """torch::lazy::HashToString: the high 64 bits unpadded, the low 64 bits always 16 digits."""
    def raw(high, low):
        return ((high << 64) | low).to_bytes(16, "little")

    assert hash_text(raw(0x07AE121A3F2F7D49, 0xA2A82F0FFBD1AD3)) == "7ae121a3f2f7d490a2a82f0ffbd1ad3"
    assert hash_text(raw(0xABCDEF0123456789, 0x1)) == "abcdef01234567890000000000000001"
    assert hash_text(raw(0, 0x5)) == "00000000000000005"
