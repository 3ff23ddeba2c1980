"""Recompile reasons on hand-made inputs (on graphs compiled by %%xla in tests/kernel/
test_recompile_reasons.py, and on real models in the zoo, ``tests/kernel/zoo``): inputs matched by what
they are, every difference listed, the nearest graph of the cell or of the whole kernel, a baseline
evicted, a graph cut by a value read."""

from __future__ import annotations

from xla_lab.capture import steps as joins
from xla_lab.capture.recompile import explain, match_inputs, op_similarity
from xla_lab.capture.records import CellCapture, GraphArtifacts, StepRecord


def p(index, shape, where=None):
    return {"index": index, "shape": shape, "where": where}


def sig(params, nodes=(), constants=(), outputs=("f32[]",)):
    return {"params": [p(i, *x) if isinstance(x, tuple) else p(i, x) for i, x in enumerate(params)],
            "nodes": [{"op": op, "shape": "f32[]", "where": w} for op, w in nodes],
            "constants": list(constants), "outputs": list(outputs)}


def test_inputs_are_matched_by_what_they_are_not_by_position():
    """A BatchNorm model after a batch-size change: the counter moved before the batch. By position,
    input 6 'changed' f32[16,3,32,32] -> s64[] and input 7 s64[] -> f32[32,...]."""
    batch = "[2]:1 (x = ...)"
    old = [p(i, s) for i, s in enumerate(["f32[8]"] * 6)] + [p(6, "f32[16,3,32,32]", batch), p(7, "s64[]")]
    new = [p(i, s) for i, s in enumerate(["f32[8]"] * 6)] + [p(6, "s64[]"), p(7, "f32[32,3,32,32]", batch)]
    changed, added, removed = match_inputs(new, old)
    assert [(a["index"], b["shape"], a["shape"]) for a, b in changed] == [(7, "f32[16,3,32,32]", "f32[32,3,32,32]")]
    assert not added and not removed
    reason = explain(sig([("f32[8]",)] * 6 + [("s64[]",), ("f32[32,3,32,32]", batch)]),
                     sig([("f32[8]",)] * 6 + [("f32[16,3,32,32]", batch), ("s64[]",)]))
    assert reason == f"input 7 changed shape: f32[16,3,32,32] -> f32[32,3,32,32] at {batch}"


def test_every_difference_is_listed_most_important_first():
    """A re-run with a new batch right after the first step: more inputs (optimizer state) and a new
    shape, and a baked scalar; before, only the first difference was given."""
    x = "[3]:1 (x = torch.randn(12, 32))"
    def constants(batch, lr):
        return [{"value": batch, "shape": "f32[]", "op": "aten::div", "where": "mean"},
                {"value": lr, "shape": "f32[]", "op": "aten::mul", "where": "lr"}] * 2

    old = sig([("f32[16,32]", x), "f32[32,4]"], constants=constants("16", "0.1"))
    new = sig([("f32[12,32]", x), "f32[32,4]", "f32[32,4]", "f32[32,4]"], constants=constants("12", "0.01"))
    parts = explain(new, old).split("; ")
    assert parts[0] == f"input 0 changed shape: f32[16,32] -> f32[12,32] at {x}"
    assert parts[1].startswith("the graph takes 4 inputs instead of 2")
    # the batch size baked into a mean follows from the shape change: not listed; the same change
    # in two places is said once
    assert parts[2:] == ["a Python scalar baked into the graph changed: 0.1 -> 0.01 (aten::mul) at lr (x2)"]


def test_a_dtype_change_among_unrelated_inputs_is_one_change():
    changed, added, removed = match_inputs([p(0, "bf16[7,3]"), p(1, "f32[3]")], [p(0, "f32[7,3]"), p(1, "f32[3]")])
    assert [(b["shape"], a["shape"]) for a, b in changed] == [("f32[7,3]", "bf16[7,3]")] and not added and not removed


def test_op_similarity_matches_the_same_code_not_the_same_op_names():
    step_fn = [("aten::mm", "[1]:4"), ("aten::relu", "[1]:5"), ("aten::sum", "[1]:6")]
    other_model = [("aten::mm", "[7]:2"), ("aten::relu", "[7]:3"), ("aten::sum", "[7]:4")]
    assert op_similarity(sig([], step_fn), sig([], step_fn + [("aten::add", "[1]:9")])) >= 0.75
    assert op_similarity(sig([], step_fn), sig([], other_model)) == 1.0  # the same ops in the same order
    assert op_similarity(sig([], step_fn), sig([], other_model[::-1])) == 0.0
    assert op_similarity(sig([], step_fn), sig([], step_fn * 3)) == 0.0  # too different in size


def _step(index, h, signature, cache="miss", line=2):
    return StepRecord(index=index, graph_name="cell_9", graph_hash=h, cache=cache, sync_cause="torch_xla.sync()",
                      sync_line=line, artifacts=GraphArtifacts(graph_hash=h, signature=signature))


def test_a_new_cell_is_compared_with_the_nearest_graph_in_the_kernel():
    code = [("aten::mm", "[1]:4"), ("aten::relu", "[1]:5")]
    earlier = CellCapture(cell_id="c1", execution_count=4, source="", started_at=0.0, graph_name="cell_4",
                          steps=[_step(0, "old", sig([("f32[8,4]", "[4]:1")], code))])
    unrelated = CellCapture(cell_id="c2", execution_count=5, source="", started_at=0.0, graph_name="cell_5",
                            steps=[_step(0, "x", sig(["f32[3]"], [("aten::exp", "[5]:1")]))])
    new = _step(0, "new", sig([("f32[16,4]", "[6]:1")], code))
    joins.explain_recompiles([new], [], [earlier, unrelated])
    assert new.recompile_reason == ("compared with cell [4] step 0's graph; input 0 changed shape: "
                                    "f32[8,4] -> f32[16,4] at [6]:1")
    alone = _step(0, "alone", sig(["f32[2]"], [("aten::sin", "[8]:1")]))
    joins.explain_recompiles([alone], [], [earlier, unrelated])
    assert alone.recompile_reason.startswith("first compile of this cell")


# --- within one cell: the nearest earlier graph, the previous run, an evicted baseline, a cut graph
def signature(params, outputs=("f32[]",), constants=(), nodes=()) -> dict:
    return {"params": [{"index": i, "shape": p, "where": None} for i, p in enumerate(params)],
            "constants": list(constants), "nodes": list(nodes), "outputs": list(outputs)}


def step(index, h, sig, cause="torch_xla.sync()", line=5, cache="miss") -> StepRecord:
    return StepRecord(index=index, graph_name="g", graph_hash=h, cache=cache, sync_cause=cause, sync_line=line,
                      artifacts=GraphArtifacts(graph_hash=h, signature=sig))


def test_a_later_graph_with_no_earlier_one_at_its_sync_is_not_called_the_cells_first_compile():
    """A loop that reads loss.item() before its sync compiles two graphs in step 0: the second is the
    cell's first graph synced at its line, not the cell's first compile."""
    cut = step(0, "a", signature(["f32[8,4]"]), cause="implicit: .item() reads the value", line=7)
    rest = step(1, "b", signature(["f32[8,4]", "f32[4]"]), line=8)
    joins.explain_recompiles([cut, rest], [])
    assert "first compile of this cell" in cut.recompile_reason
    assert rest.recompile_reason == ("the cell's first graph synced at [?]:8: no earlier graph synced there "
                                     "to compare with")


def test_a_miss_is_compared_with_the_nearest_earlier_graph_of_the_cell():
    first = step(0, "a", signature(["f32[8,4]"]))
    grown = step(1, "b", signature(["f32[8,4]", "f32[4]", "f32[4]"]))
    joins.explain_recompiles([first, grown], [])
    assert first.recompile_reason.startswith("first compile of this cell")
    assert "takes 3 inputs instead of 1" in grown.recompile_reason
    # the previous run of the cell is the baseline of a first step
    earlier = CellCapture(cell_id="c", execution_count=1, source="", started_at=0.0, steps=[step(0, "a", signature(["f32[8,4]"]))])
    now = CellCapture(cell_id="c", execution_count=2, source="", started_at=1.0, steps=[step(0, "z", signature(["f32[16,4]"]))])
    joins.explain_recompiles(now.steps, joins.previous_runs(now, [earlier], named=False))
    assert now.steps[0].recompile_reason == "input 0 changed shape: f32[8,4] -> f32[16,4]"


def test_a_baseline_that_was_evicted_says_so():
    old = step(0, "a", None)
    old.artifacts.evicted = True
    new = step(1, "b", signature(["f32[2]"]))
    joins.explain_recompiles([old, new], [])
    assert "evicted to bound memory" in new.recompile_reason


def test_a_graph_cut_by_a_value_read_says_where():
    cut = step(0, "a", signature(["f32[2]"]), cause="implicit: .item() reads the value", line=3)
    joins.explain_recompiles([cut], [])
    assert cut.recompile_reason.startswith("the step was cut mid-way at [?]:3 (.item() reads the value)")
