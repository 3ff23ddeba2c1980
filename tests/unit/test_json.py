"""The capture's JSON, without a capture: malformed or foreign text gets a clear error (round trips
and the fuzzing of a real capture are in tests/kernel/test_json.py)."""

import pytest

from xla_lab import CaptureFormatError, CellCapture, GraphArtifacts


@pytest.mark.parametrize("bad, message", [
    ("not json", "malformed"),
    ("[]", "JSON object"),
    ('{"schema": "something/1"}', "not an xla_lab capture"),
    ('{"schema": "xla_lab.capture/99"}', "not readable"),
    ('{"schema": "xla_lab.capture/1"}', "missing the field"),
])
def test_bad_json_gets_a_clear_error(bad, message):
    with pytest.raises(CaptureFormatError, match=message):
        CellCapture.from_json(bad)


def _recorded(name: str = "train_loop.json") -> dict:
    import json
    from pathlib import Path

    # (a recorded capture: tests/fixtures/captures/make_captures.py)
    return json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "captures" / name).read_text())["capture"]


LOOP = {"instruction": "while.4", "computation": "cell_3.88", "body": "Body.52.clone", "condition": "Condition.100.clone",
        "trip_count": 5, "trip_count_from": "backend_config", "runs": 5, "parent": None, "op": "xla__scan",
        "backward": False, "kernels": ["dot.1", "add_tanh_fusion"],
        "lines": [{"cell": 3, "line": 2, "code": "h, ys = scan(step, h0, xs)"}],
        "model_lines": [{"cell": 3, "line": 2, "code": "h, ys = scan(step, h0, xs)"}]}


def test_captures_recorded_before_loops_still_load():
    data = _recorded()
    assert all("loops" not in art for art in data["artifacts"].values())
    assert all("runs" not in k for art in data["artifacts"].values() for k in art.get("fusions") or [])
    capture = CellCapture.from_dict(data)
    assert capture.artifacts() and all(art.loops is None for art in capture.artifacts().values())


def test_loops_and_kernel_runs_round_trip():
    data = _recorded()
    art = next(a for a in data["artifacts"].values() if a.get("fusions"))
    art["loops"] = [LOOP, {**LOOP, "instruction": "while.3", "trip_count": None, "runs": None,
                           "trip_count_from": None, "lines": [], "model_lines": []}]
    art["fusions"][0].update(runs=5, loop="while.4")
    art["fusions"][1].update(runs=None, loop="while.3")
    back = CellCapture.from_json(CellCapture.from_dict(data).to_json())
    loops = next(a for a in back.artifacts().values() if a.loops).loops
    assert loops[0] == LOOP and loops[1]["trip_count"] is None
    kernels = next(a for a in back.artifacts().values() if a.loops).fusions
    assert (kernels[0]["runs"], kernels[0]["loop"], kernels[1]["runs"]) == (5, "while.4", None)


@pytest.mark.parametrize("field, value", [("trip_count", "five"), ("kernels", "dot.1"), ("lines", [{"cell": 3}])])
def test_a_malformed_loop_is_left_out_with_a_note(field, value):
    """A damaged part of a saved capture is left out and said; the rest loads."""
    data = _recorded()
    art = next(a for a in data["artifacts"].values() if a.get("fusions"))
    art["loops"] = [{**LOOP, field: value}]
    capture = CellCapture.from_dict(data)
    graph = capture.artifacts()[art["graph_hash"]]
    assert graph.loops is None and graph.fusions == art["fusions"]
    assert any("left out" in n and "loops" in n and field in n for n in capture.notes), capture.notes
    with pytest.raises(CaptureFormatError, match="loops"):  # (a record read alone, with nowhere to say it)
        GraphArtifacts.from_dict(art)
