"""Putting back the call stacks of loop bodies (``xla_lab/capture/subgraphs.py``), without torch_xla:
a graph that imported a sub-computation (a scan's or while_loop's body) whose instructions point
into a frame table the graph does not have; the sub-module's own proto, recorded as it was imported;
fx-generated frames replaced by the stack their node was traced from. The same on real compiles is
in ``tests/kernel/test_loops.py``."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from xla_lab.capture import subgraphs
from xla_lab.hlo.parser import parse_module
from xla_lab.hlo.proto_frames import PyFrame, _message_classes, computation_stacks

OPS = "/venv/site-packages/torch/_ops.py"
GENERATED = "<eval_with_key>.7"

GRAPH = f"""HloModule cell_2.120, entry_computation_layout={{(f32[2,8]{{1,0}}, f32[8,8]{{1,0}})->f32[2,8]{{1,0}}}}

%FnComputation.93 (p0.95: f32[2,8], p1.99: f32[8,8]) -> f32[2,8] {{
  %p0.95 = f32[2,8]{{1,0}} parameter(0)
  %p1.99 = f32[8,8]{{1,0}} parameter(1)
  ROOT %dot.107 = f32[2,8]{{1,0}} dot(%p0.95, %p1.99), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_type="aten__mm" op_name="aot_forward.4/aten__mm" source_file="{OPS}" source_line=841}}
}}

ENTRY %cell_2.120 (a.110: f32[2,8], b.111: f32[8,8]) -> f32[2,8] {{
  %a.110 = f32[2,8]{{1,0}} parameter(0)
  %b.111 = f32[8,8]{{1,0}} parameter(1)
  %exponential.112 = f32[2,8]{{1,0}} exponential(%a.110), metadata={{op_type="aten__exp" op_name="aten__exp" source_file="/home/me/model.py" source_line=3}}
  ROOT %call.113 = f32[2,8]{{1,0}} call(%exponential.112, %b.111), to_apply=%FnComputation.93
}}
"""

# The body as its own LoweringContext lowered it: the same instructions, numbered from 1 (importing
# renumbers them in order), with a frame table of its own: the matmul made by fx's generated code.
SUB_STACK = [(OPS, "__call__", 841), (GENERATED, "forward", 6), ("/venv/site-packages/torch_xla/experimental/scan.py",
                                                                  "forward_core", 313), ("<ipython-input-2-ab>", "<module>", 1)]
LAYER_TRACE = ('  File "<ipython-input-2-ab>", line 1, in <module>\n    y = scan_layers(layers, x)\n'
               '  File "/venv/site-packages/torch_xla/experimental/scan_layers.py", line 121, in scan_layers\n    \n'
               '  File "/home/me/layers.py", line 10, in forward\n    h = self.fc(x)\n')


def sub_proto(names=("p0.2", "p1.6", "dot.14"), stack=SUB_STACK, frames: bool = True) -> bytes:
    """A bare HloModuleProto, as ``LoweringContext.hlo()`` gives it, with a stack for the dot."""
    classes = _message_classes()
    module = classes["Module"]()
    comp = module.computations.add(name=b"FnComputation.1")
    for name in names:
        ins = comp.instructions.add(name=name.encode())
        if name.startswith("dot") and frames:
            ins.metadata.stack_frame_id = len(stack)  # innermost frame; each frame's parent is the one before
    if frames:
        index = module.stack_frame_index
        for i, (file, function, line) in enumerate(reversed(stack), 1):
            index.file_names.append(file.encode())
            index.function_names.append(function.encode())
            index.file_locations.add(file_name_id=i, function_name_id=i, line=line)
            index.stack_frames.add(file_location_id=i, parent_frame_id=i - 1)
    top = classes["Top"](entry_computation_name=b"FnComputation.1")  # (field 2: a bare module, not an HloProto)
    return top.SerializeToString() + module.SerializeToString()


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(subgraphs, "_PROTOS", OrderedDict())
    monkeypatch.setattr(subgraphs, "_PARSED", {})
    monkeypatch.setattr(subgraphs, "_GRAPHS", OrderedDict())


def short(stack):
    return [(f.file, f.line) for f in stack]


# what the graph's own proto says: the body's dot points at a frame of the graph's table (garbage)
OUTER = {"dot.107": [PyFrame("/venv/site-packages/torch/nn/modules/module.py", "to", 1371),
                     PyFrame("<ipython-input-1-cd>", "<module>", 5)],
         "exponential.112": [PyFrame("/home/me/model.py", "forward", 3), PyFrame("<ipython-input-2-ab>", "<module>", 1)]}


def test_the_sub_proto_is_read_per_computation():
    stacks = computation_stacks(sub_proto())
    assert list(stacks) == ["FnComputation.1"] and list(stacks["FnComputation.1"]) == ["p0.2", "p1.6", "dot.14"]
    assert short(stacks["FnComputation.1"]["dot.14"]) == [(f, ln) for f, _, ln in SUB_STACK]
    assert stacks["FnComputation.1"]["p0.2"] == []


def test_a_stack_pointing_into_another_table_is_cut_to_the_metadatas_frame():
    repaired = subgraphs.repair_stacks(parse_module(GRAPH), OUTER)
    assert short(repaired["dot.107"]) == [(OPS, 841)]  # not the upload line it pointed at
    assert repaired["exponential.112"] == OUTER["exponential.112"]  # a stack that ends where it was made stays


def test_the_recorded_body_puts_its_stacks_back():
    subgraphs.record_proto(sub_proto())
    repaired = subgraphs.repair_stacks(parse_module(GRAPH), OUTER)
    assert short(repaired["dot.107"]) == [(f, ln) for f, _, ln in SUB_STACK]
    # recorded again (a second trace of the same body): kept once, the latest wins
    subgraphs.record_proto(sub_proto())
    assert len(subgraphs._PROTOS) == 1


def test_generated_frames_are_replaced_by_the_nodes_stack():
    subgraphs.record_proto(sub_proto())
    # forward() starts at line 4 of the generated file; torch.fx's map: line 6 - 4 = 2 -> node 2 (the mm)
    subgraphs._GRAPHS[GENERATED] = (4, {1: 0, 2: 2, 3: 3}, [None, None, LAYER_TRACE, None])
    repaired = subgraphs.repair_stacks(parse_module(GRAPH), OUTER)
    assert short(repaired["dot.107"]) == [
        (OPS, 841), ("/home/me/layers.py", 10), ("/venv/site-packages/torch_xla/experimental/scan_layers.py", 121),
        ("<ipython-input-2-ab>", 1), ("/venv/site-packages/torch_xla/experimental/scan.py", 313),
        ("<ipython-input-2-ab>", 1)]
    assert repaired["dot.107"][1].function == "forward"


def test_a_body_lowered_without_a_frame_table_keeps_its_generated_line():
    """while_loop's body: no frames of its own, but its metadata names the generated line."""
    graph = GRAPH.replace(f'source_file="{OPS}" source_line=841', f'source_file="{GENERATED}" source_line=6')
    subgraphs.record_proto(sub_proto(frames=False))
    subgraphs._GRAPHS[GENERATED] = (4, {2: 2}, [None, None, LAYER_TRACE])
    repaired = subgraphs.repair_stacks(parse_module(graph), {"exponential.112": OUTER["exponential.112"]})
    assert short(repaired["dot.107"])[0] == ("/home/me/layers.py", 10)


def test_a_different_body_is_not_matched():
    subgraphs.record_proto(sub_proto(names=("p0.2", "p1.6", "add.14")))  # another op: another body
    repaired = subgraphs.repair_stacks(parse_module(GRAPH), OUTER)
    assert short(repaired["dot.107"]) == [(OPS, 841)]


def test_importing_numbers_in_order_across_gaps():
    """A body whose reducer took numbers in the middle (its instructions are 1, 2 then 36): importing
    numbers the computation's instructions consecutively, so they are paired in order."""
    subgraphs.record_proto(sub_proto(names=("p0.2", "p1.3", "dot.36")))
    repaired = subgraphs.repair_stacks(parse_module(GRAPH), OUTER)
    assert short(repaired["dot.107"])[1] == (GENERATED, 6)


def test_a_traceback_text_reads_innermost_first():
    frames = subgraphs._parse_trace(LAYER_TRACE)
    assert [(f.file, f.function, f.line) for f in frames] == [
        ("/home/me/layers.py", "forward", 10), ("/venv/site-packages/torch_xla/experimental/scan_layers.py",
                                                 "scan_layers", 121), ("<ipython-input-2-ab>", "<module>", 1)]
    assert subgraphs._parse_trace("") == []


def test_recorded_protos_are_bounded(monkeypatch):
    monkeypatch.setattr(subgraphs, "KEEP_PROTOS", 3)
    for i in range(5):
        subgraphs.record_proto(sub_proto(names=(f"p0.{i + 2}", "p1.6", "dot.14")))
    assert len(subgraphs._PROTOS) == 3
    subgraphs.record_proto("not bytes")  # ignored
    assert len(subgraphs._PROTOS) == 3
