"""Sync causes on hand-made frames (the zoo, ``tests/kernel/zoo``, checks them on real models): causes
inside a model's code and in other execution modes, and which frames are the model's."""

from __future__ import annotations

import os

import torch
import torch_xla

from xla_lab.capture import steps as joins
from xla_lab.capture.frames import import_path, is_internal, model_frame
from xla_lab.capture.xla_logs import Frame, SyncEvent

MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "zoo", "zoo_models", "decoder_only.py")


def test_model_frames_are_outside_torch_torch_xla_and_the_standard_library():
    assert is_internal(torch.nn.modules.linear.__file__) and is_internal(torch_xla.__file__)
    assert is_internal(os.__file__) and is_internal("<frozen importlib._bootstrap>")
    assert is_internal("<eval_with_key>.2")  # torch.fx's generated code
    # the Jupyter kernel's event loop (a frame seen under a scan's backward run from a notebook cell)
    assert is_internal("/opt/venv/lib/python3.11/site-packages/tornado/platform/asyncio.py")
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
        "at [3]:9 (step)")


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
