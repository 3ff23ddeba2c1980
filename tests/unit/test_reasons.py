"""Recompile reasons and sync causes on hand-made inputs (the zoo, ``tests/kernel/zoo``, checks them on real
models): inputs matched by what they are, every difference listed, the nearest graph of the whole
kernel, causes inside a model's code and in other execution modes, and which frames are the model's."""

from __future__ import annotations

import os

import torch
import torch_xla

from xla_lab.capture import steps as joins
from xla_lab.capture.frames import import_path, is_internal, model_frame
from xla_lab.capture.recompile import explain, match_inputs, op_similarity
from xla_lab.capture.records import CellCapture, GraphArtifacts, StepRecord
from xla_lab.capture.xla_logs import Frame, SyncEvent


def p(index, shape, where=None):
    return {"index": index, "shape": shape, "where": where}


def sig(params, nodes=(), constants=(), outputs=("f32[]",)):
    return {"params": [p(i, *x) if isinstance(x, tuple) else p(i, x) for i, x in enumerate(params)],
            "nodes": [{"op": op, "shape": "f32[]", "where": w} for op, w in nodes],
            "constants": list(constants), "outputs": list(outputs)}


def test_inputs_are_matched_by_what_they_are_not_by_position():
    """A BatchNorm model after a batch-size change: the counter moved before the batch. By position,
    input 6 'changed' f32[16,3,32,32] -> s64[] and input 7 s64[] -> f32[32,...]."""
    batch = "cell [2] line 1 (x = ...)"
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
    x = "cell [3] line 1 (x = torch.randn(12, 32))"
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
    step_fn = [("aten::mm", "cell [1] line 4"), ("aten::relu", "cell [1] line 5"), ("aten::sum", "cell [1] line 6")]
    other_model = [("aten::mm", "cell [7] line 2"), ("aten::relu", "cell [7] line 3"), ("aten::sum", "cell [7] line 4")]
    assert op_similarity(sig([], step_fn), sig([], step_fn + [("aten::add", "cell [1] line 9")])) >= 0.75
    assert op_similarity(sig([], step_fn), sig([], other_model)) == 1.0  # the same ops in the same order
    assert op_similarity(sig([], step_fn), sig([], other_model[::-1])) == 0.0
    assert op_similarity(sig([], step_fn), sig([], step_fn * 3)) == 0.0  # too different in size


def _step(index, h, signature, cache="miss", line=2):
    return StepRecord(index=index, graph_name="cell_9", graph_hash=h, cache=cache, sync_cause="torch_xla.sync()",
                      sync_line=line, artifacts=GraphArtifacts(graph_hash=h, signature=signature))


def test_a_new_cell_is_compared_with_the_nearest_graph_in_the_kernel():
    code = [("aten::mm", "cell [1] line 4"), ("aten::relu", "cell [1] line 5")]
    earlier = CellCapture(cell_id="c1", execution_count=4, source="", started_at=0.0, graph_name="cell_4",
                          steps=[_step(0, "old", sig([("f32[8,4]", "cell [4] line 1")], code))])
    unrelated = CellCapture(cell_id="c2", execution_count=5, source="", started_at=0.0, graph_name="cell_5",
                            steps=[_step(0, "x", sig(["f32[3]"], [("aten::exp", "cell [5] line 1")]))])
    new = _step(0, "new", sig([("f32[16,4]", "cell [6] line 1")], code))
    joins.explain_recompiles([new], [], [earlier, unrelated])
    assert new.recompile_reason == ("compared with cell [4] step 0's graph; input 0 changed shape: "
                                    "f32[8,4] -> f32[16,4] at cell [6] line 1")
    alone = _step(0, "alone", sig(["f32[2]"], [("aten::sin", "cell [8] line 1")]))
    joins.explain_recompiles([alone], [], [earlier, unrelated])
    assert alone.recompile_reason.startswith("first compile of this cell")


MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "zoo", "zoo_models", "decoder_only.py")


def test_model_frames_are_outside_torch_torch_xla_and_the_standard_library():
    assert is_internal(torch.nn.modules.linear.__file__) and is_internal(torch_xla.__file__)
    assert is_internal(os.__file__) and is_internal("<frozen importlib._bootstrap>")
    assert is_internal("<eval_with_key>.2")  # torch.fx's generated code
    assert not is_internal(MODEL) and not is_internal("<ipython-input-3-abc>")
    import transformers

    assert not is_internal(transformers.__file__)
    assert import_path(transformers.__file__) == "transformers/__init__.py"
    frames = [Frame("forward", torch.nn.modules.linear.__file__, 134), Frame("forward", MODEL, 47),
              Frame("step", "cell.py", 3)]
    assert model_frame(frames).line == 47
    assert model_frame(frames[:1] + frames[2:], stop_at="cell.py") is None


def test_a_value_read_inside_the_models_code_names_that_line(tmp_path):
    lib = tmp_path / "masks.py"
    lib.write_text("def check(mask):\n    if (mask == 1).all():\n        return None\n")
    frames = [Frame("check", str(lib), 2), Frame("step", "cell.py", 4)]
    cause = joins.implicit_cause(frames, "loss = step()", "cell.py", {"cell.py": 7})
    assert cause == "implicit: tensor used as a Python number/bool in masks.py:2 (if (mask == 1).all():)"
    contains = [Frame("__contains__", torch._tensor.__file__, 1240), Frame("check", str(lib), 2), Frame("step", "other_cell.py", 9)]
    cause = joins.implicit_cause(contains, "loss = step()", "cell.py", {"cell.py": 7, "other_cell.py": 3})
    assert cause.startswith("implicit: `in` on a tensor reads its values in masks.py:2")
    in_cell = [Frame("step", "other_cell.py", 9), Frame("<module>", "cell.py", 1)]
    assert joins.implicit_cause(in_cell, "loss = step()", "cell.py", {"cell.py": 7, "other_cell.py": 3}).endswith(
        "at cell [3] line 9 (step)")


XLA_DIR, TORCH_DIR = os.path.dirname(torch_xla.__file__), os.path.dirname(torch.__file__)


def _event(frames):
    return SyncEvent(kind="execute", graph_name="g", graph_hash="h", frames=frames)


def test_execution_modes_have_their_own_causes():
    dynamo = [Frame("optimized_mod", os.path.join(XLA_DIR, "_dynamo", "dynamo_bridge.py"), 552), Frame("forward", "<eval_with_key>.2", 5)]
    assert joins.sync_cause(_event(dynamo), None, None, None, "cell.py") == \
        'torch.compile(backend="openxla") ran its compiled forward graph'
    backward = dynamo + [Frame("_backward_impl", os.path.join(TORCH_DIR, "_functorch", "_aot_autograd", "runtime_wrappers.py"), 2461)]
    assert "compiled backward graph" in joins.sync_cause(_event(backward), None, None, None, "cell.py")
    compiled = [Frame("sync", os.path.join(XLA_DIR, "torch_xla.py"), 80), Frame("_compile", os.path.join(XLA_DIR, "torch_xla.py"), 214)]
    assert joins.sync_cause(_event(compiled), None, 3, "loss = step(x)", "cell.py") == \
        "torch_xla.compile(): the end of the compiled function"
