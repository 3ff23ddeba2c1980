"""The ranks of a launch, joined from what its workers wrote (``capture/ranks.py``), compared and
rendered: pure tests on a launch directory written here in the workers' own format (the same files
are made live in tests/kernel/test_multiprocess.py)."""

from __future__ import annotations

import json

from xla_lab.capture.analysis import CellFiles
from xla_lab.capture.ranks import divergences, read_launch, stragglers
from xla_lab.capture.records import CellCapture
from xla_lab.capture.store import ArtifactStore
from xla_lab.view.panel_model import panel_model
from xla_lab.view.report import to_html, to_text

CELL = "/tmp/ipykernel_1/cell3.py"


def _block(kind: str, graph_hash: str, name: str, rank: int) -> str:
    """One analysis block as torch_xla writes it (one frame: the rank's trampoline)."""
    prefix = {"compile": "Compilation Analysis: ", "execute": "Execution Analysis: "}[kind]
    cause = "Compilation Cause" if kind == "compile" else "Execution Cause"
    lines = [f"{prefix}{'=' * 80}", f"{prefix}{cause}", f"{prefix}  most likely user code", f"{prefix}Graph Info: ",
             f"{prefix}  Graph Name: {name}", f"{prefix}  Graph Hash: {graph_hash}",
             f"{prefix}  Number of Graph Inputs: 2", f"{prefix}  Number of Graph Outputs: 1",
             f"{prefix}Python Frame Triggered Execution: ", f"{prefix}  _xla_lab_rank_{rank} (worker.py:1)",
             f"{prefix}  ..........", f"{prefix}{'-' * 80}", f"{prefix}{'=' * 80}"]
    return "\n" + "\n".join(lines) + "\n"


def _launch(tmp_path, plan, pid=4242, finished=True, ended=(0, 1, 2)):
    """``plan``: per rank, its syncs as (graph hash, compiled, seconds in the step), the ranks one
    after the other."""
    launch = tmp_path / "launch_1"
    (launch / f"p{pid}").mkdir(parents=True)
    log, records = "", [{"kind": "process", "pid": pid, "started": 100.0, "graph_name": "cell_3"},
                        {"kind": "stack", "id": 0, "frames": [["sync", "/v/lib/python3.11/site-packages/torch_xla/torch_xla.py", 87],
                                                              ["train", CELL, 6]]}]
    clock = 100.0
    for rank, syncs in enumerate(plan):
        records.append({"kind": "rank", "rank": rank, "device": f"xla:{rank}", "thread": rank, "started": clock})
        for graph_hash, compiled, seconds in syncs:
            if compiled:  # (workers log compiles only)
                log += _block("compile", graph_hash, "cell_3", rank)
            records.append({"kind": "sync", "rank": rank, "stack": 0, "enter": clock + seconds - 0.001,
                            "exit": clock + seconds, "compiled": int(compiled), "hashes": [graph_hash] if compiled else [],
                            "compile_s": 0.5 if compiled else 0.0,
                            "ok": True})
            clock += seconds
        if rank in ended:
            records.append({"kind": "end", "rank": rank, "ended": clock, "status": "ok"} if rank != 1 else
                           {"kind": "end", "rank": rank, "ended": clock, "status": "raised", "error": "ValueError: no"})
    if finished:
        records.append({"kind": "done", "ended": clock, "metrics": {"execute": [6, 0.012]}, "note": None})
    (launch / f"p{pid}.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{\"kind\": \"sy")  # cut last line
    (launch / f"p{pid}" / "sync.log").write_text(log)
    return launch


def _read(launch):
    return read_launch(launch, 1, store=ArtifactStore(), cells=CellFiles({CELL: 3}), cell_file=CELL,
                       source_lines=[], execution_count=4)


def test_each_rank_gets_its_own_steps_with_the_logged_graph_hashes(tmp_path):
    ranks, processes, notes = _read(_launch(tmp_path, [[("aaa", True, 0.6)] + [("aaa", False, 0.1)] * 3,
                                                       [("aaa", False, 0.1)] * 4,
                                                       [("aaa", False, 0.5)] + [("aaa", False, 0.4)] * 3]))
    assert processes == 1 and [r.rank for r in ranks] == [0, 1, 2]
    assert [r.device for r in ranks] == ["xla:0", "xla:1", "xla:2"]
    assert [[s.cache for s in r.steps] for r in ranks] == [["miss", "hit", "hit", "hit"], ["hit"] * 4, ["hit"] * 4]
    assert {s.graph_hash for r in ranks for s in r.steps} == {"aaa"}
    assert ranks[0].steps[0].timings["compile_s"] == 0.5 and ranks[0].steps[1].timings["compile_s"] == 0.0
    assert [round(x, 3) for x in ranks[0].step_s] == [0.6, 0.1, 0.1, 0.1]
    assert ranks[0].lines[0] == {"cell": 3, "line": 6, "code": None}
    assert ranks[1].status == "raised" and ranks[1].error == "ValueError: no"
    assert any("6 graph executions" in n for n in notes)
    assert divergences(ranks) == []
    # rank 0's compile is not held against it; rank 2's slow cached steps are
    assert stragglers(ranks) == ["rank 2 is a straggler: its cached steps take 400.0 ms (median), "
                                 "4.00x the median rank's 100.0 ms"]


def test_ranks_that_ran_different_graphs_or_synced_apart_are_named(tmp_path):
    ranks, _, _ = _read(_launch(tmp_path, [[("aaa", True, 0.1)], [("aaa", False, 0.1)], [("bbb", True, 0.1), ("bbb", False, 0.1)]],
                                ended=(0, 2)))
    found = divergences(ranks)
    assert found[0] == "the ranks synced a different number of times (rank 0: 1, rank 1: 1, rank 2: 2)"
    # rank 1's hit at step 0 could be of either graph compiled there: it is left unknown, and said so
    assert found[1] == ("step 0 at [3]:6: rank 2 ran a different graph from rank 0's (rank 1 hit the cache "
                        "there: which of these graphs it ran is not known)")
    assert ranks[1].status == "raised" or ranks[1].status == "killed"


def test_a_killed_worker_keeps_what_its_ranks_recorded(tmp_path):
    ranks, _, _ = _read(_launch(tmp_path, [[("aaa", True, 0.1)], [("aaa", False, 0.1)]], finished=False, ended=()))
    assert [r.status for r in ranks] == ["killed", "killed"]
    assert "without a word" in ranks[0].error and [len(r.steps) for r in ranks] == [1, 1]


def test_ranks_travel_in_the_capture_json_and_every_view_shows_them(tmp_path):
    ranks, processes, _ = _read(_launch(tmp_path, [[("aaa", True, 0.1)], [("bbb", True, 0.1)], [("aaa", False, 0.1)]]))
    c = CellCapture(cell_id="c", execution_count=4, source="xmp.spawn(train)", started_at=1.0, ranks=ranks,
                    launches=[{"launch": 1, "function": "<lambda>", "start_method": "fork", "processes": processes,
                               "error": None}])
    back = CellCapture.from_json(c.to_json())
    assert back == c
    text = to_text(c)
    assert "3 ranks in 1 worker process (1 launch): 3 rank steps" in text
    assert "launch 1: <lambda> (fork), 1 worker process" in text
    assert "! step 0 at [3]:6: rank 1 ran a different graph from rank 0's (rank 2 hit the cache" in text
    from rich.console import Console

    from xla_lab.view.report import to_rich

    terminal = Console(width=300, record=True, color_system=None)
    terminal.print(to_rich(c))
    assert "! step 0 at [3]:6: rank 1 ran a different graph from rank 0's" in terminal.export_text()
    html = to_html(c)
    assert "&lt;lambda&gt;" in html and "<lambda>" not in html
    model = panel_model(c)
    assert [r["rank"] for r in model["summary"]["ranks"]] == [0, 1, 2]
    assert model["summary"]["ranks"][1]["status"] == "raised"
    assert model["summary"]["warnings"][0].startswith("step 0 at [3]:6: rank 1 ran a different graph")


def test_syncs_that_coordinate_the_ranks_say_so():
    """HF Trainer's logging gathers the loss with xm.mesh_reduce: a value read to coordinate the ranks."""
    from xla_lab.capture.steps import implicit_cause
    from xla_lab.capture.xla_logs import Frame

    site = "/v/lib/python3.11/site-packages/"
    frames = [Frame("_maybe_convert_to_cpu", site + "torch_xla/core/xla_model.py", 1400),
              Frame("mesh_reduce", site + "torch_xla/core/xla_model.py", 1442),
              Frame("_nested_gather", "/home/u/trainer_pt_utils.py", 197)]
    cause = implicit_cause(frames, None, CELL, {CELL: 3})
    assert cause.startswith("implicit: xm.mesh_reduce() gathers a value from every rank"), cause
    assert cause.endswith("in trainer_pt_utils.py:197 (_nested_gather)")
    rendezvous = [Frame("rendezvous", site + "torch_xla/core/xla_model.py", 1300), Frame("train", CELL, 9)]
    assert implicit_cause(rendezvous, "xm.rendezvous('epoch')", CELL, {CELL: 3}).startswith(
        "implicit: xm.rendezvous() makes the ranks wait for each other")


def test_source_lines_pause_when_the_leading_ranks_are_cached_and_the_rest_are_inside_a_sync(tmp_path):
    """On two cores the ranks drift apart: one runs its cached loop while others still compile.
    Lines on traced ops (torch_xla's IR-debug flag, a Python stack walk per op) pause once some
    rank is steady and every other one is steady, inside a sync (its trace done) or ended; a
    compile turns them on again; a rank that has not started keeps them on."""
    import torch_xla

    from xla_lab.capture import worker

    was = torch_xla._XLAC._get_ir_debug()
    torch_xla._XLAC._set_ir_debug(True)
    recorder = worker._ProcessRecorder(str(tmp_path), "cell_3")
    try:
        recorder.expected_ranks = 4
        for rank in range(3):
            recorder.rank_started(rank, f"xla:{rank}")
        for _ in range(worker.STEADY_AFTER):
            recorder._after_sync(0, 0)
        assert torch_xla._XLAC._get_ir_debug()  # rank 3 has not started: it will trace its first graph
        recorder.rank_started(3, "xla:3")
        recorder._in_sync.update({1, 2})  # compiling their second graphs
        recorder._after_sync(0, 0)
        assert torch_xla._XLAC._get_ir_debug()  # rank 3 is tracing
        recorder._in_sync.add(3)
        recorder._after_sync(0, 0)
        assert not torch_xla._XLAC._get_ir_debug()  # rank 0 steady, the others' traces done
        recorder._in_sync.discard(1)
        recorder._after_sync(1, 1)  # rank 1's compile returned: a new graph may follow
        assert torch_xla._XLAC._get_ir_debug()
        recorder._after_sync(0, 0)
        assert torch_xla._XLAC._get_ir_debug()  # rank 0 is steady again only after STEADY_AFTER hits
        recorder._after_sync(0, 0)
        assert torch_xla._XLAC._get_ir_debug()  # and rank 1 is tracing outside a sync
        recorder.rank_ended(1, None)
        recorder._after_sync(0, 0)
        assert not torch_xla._XLAC._get_ir_debug()
    finally:
        recorder._out.close()
        torch_xla._XLAC._set_ir_debug(was)
