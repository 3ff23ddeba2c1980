"""Each analysis of ``xla_lab/hlo`` on the real dumps in ``tests/fixtures/hlo`` (made on this machine by
its ``make_fixtures.py``), without compiling: the fusion map, memory, the rebuilt lazy graph and its
text, which kernel each node ended in, the graph signature, large constants, SPMD."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_lab.capture import ir_graph
from xla_lab.hlo.constants import large_constants
from xla_lab.hlo.fusion_map import build_fusion_map
from xla_lab.hlo.lazy_graph import nodes_from_module
from xla_lab.hlo.memory import memory_summary, parse_buffer_assignment
from xla_lab.hlo.node_kernels import node_kernels
from xla_lab.hlo.parser import parse_module
from xla_lab.hlo.sharding import spmd_summary
from xla_lab.hlo.signature import graph_signature

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hlo"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.fixture(scope="module")
def mlp():
    before, after = parse_module(text("mlp_train.before.txt")), parse_module(text("mlp_train.after.txt"))
    fmap = build_fusion_map(after, lambda ins: [], lambda ins: f"{ins.source[0].rsplit('/', 1)[-1]}:{ins.source[1]}"
                            if ins.source else None)
    return before, after, fmap


def test_fusion_map_of_a_train_step(mlp):
    _, after, fmap = mlp
    names = [k.name for k in fmap.kernels]
    assert len(names) == len(set(names)) and len(names) > 10
    dots = [k for k in fmap.kernels if k.kind == "dot"]
    assert dots, names
    for k in dots:  # a dot's flops are 2 * output elements * contracted size
        ins = next(i for i in after.instructions() if i.name == k.name)
        lhs = next(i for i in after.instructions() if i.name == ins.operands[0])
        contracted = 1
        for d in ins.attributes.get("lhs_contracting_dims", "").strip("{}").split(","):
            if d:
                contracted *= lhs.shape.dims[int(d)]
        assert k.flops == 2 * ins.shape.elements * contracted
    fusions = [k for k in fmap.kernels if k.kind.startswith("k")]
    assert fusions and all(len(k.members) >= 1 and k.aten_ops for k in fusions)
    assert any("aten::addmm" in k.aten_ops for k in fmap.kernels)
    assert any(any(s.startswith("functional.py:") or s.startswith("linear.py:") for s in k.sources) for k in fmap.kernels)
    assert all(k.bytes > 0 for k in fmap.kernels)


def test_memory_of_a_train_step():
    report, assignment = text("mlp_train.memory-usage-report.txt"), text("mlp_train.buffer-assignment.txt")
    m = memory_summary(report, assignment, source_of=lambda name: {"line": 1, "file": name} if name else None)
    total = int(next(ln for ln in report.splitlines() if ln.startswith("Total bytes used:")).split()[3])
    assert m["peak_bytes"] == total
    allocations = parse_buffer_assignment(assignment)
    assert m["allocations"] == len(allocations)
    assert m["parameter_bytes"] == sum(a.size for a in allocations if a.kind == "parameter") > 0
    sizes = [b["bytes"] for b in m["largest"]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == max(a.size for a in allocations)
    assert all(b["source"]["file"] == b["instruction"] for b in m["largest"] if b["instruction"])


def test_rebuilt_lazy_graph_and_its_text(mlp):
    before, _, _ = mlp
    nodes = nodes_from_module(before)
    assert len(nodes) > 20 and [n.id for n in nodes] == list(range(len(nodes)))
    assert all(o < n.id for n in nodes for o in n.operands)  # operands before users
    assert sum(1 for n in nodes if n.is_input) == len(before.entry.parameters)
    assert {n.root for n in nodes if n.root is not None} == set(range(len(before.entry.root.operands)))
    assert "aten::addmm" in {n.op for n in nodes}
    # every entry instruction but the root tuple is in exactly one node
    members = [h for n in nodes for h in n.hlo]
    assert len(members) == len(set(members)) == sum(1 for i in before.entry.instructions if not i.is_root
                                                     or i.opcode != "tuple")
    text_ = ir_graph.format_ir_text(nodes)
    assert ir_graph.parse_ir_text(text_) == nodes  # one owner: what it writes it reads back
    assert ir_graph.count_nodes(text_) == len(nodes)
    assert ir_graph.hlo_index(text_) == {n.id: n.hlo for n in nodes}
    dot = ir_graph.to_dot(text_, name="mlp train")
    assert dot.startswith("digraph mlp_train") and dot.count("->") == sum(len(n.operands) for n in nodes)


def test_torch_xlas_own_ir_text_is_read_too():
    own = ("IR {\n  %0 = f32[4]{0} xla::device_data(), location=cell.py:3, xla_shape=f32[4]{0}\n"
           "  %1 = f32[4]{0} aten::gelu(%0), location=model.py:12, xla_shape=f32[4]{0}, ROOT=0\n}\n")
    nodes = ir_graph.parse_ir_text(own)
    assert [(n.id, n.op, n.operands, n.location, n.root, n.hlo) for n in nodes] == [
        (0, "xla::device_data", [], "cell.py:3", None, []), (1, "aten::gelu", [0], "model.py:12", 0, [])]
    assert ir_graph.hlo_index(own) == {}


@pytest.mark.parametrize("case, floor", [("mlp_train", 0.95), ("transformer_train", 0.9), ("conv_net", 0.98)])
def test_nodes_find_their_kernels(case, floor):
    before, after = parse_module(text(f"{case}.before.txt")), parse_module(text(f"{case}.after.txt"))
    fmap = build_fusion_map(after, lambda ins: [], lambda ins: None)
    kernels = [k.to_dict() for k in fmap.kernels]
    nodes = nodes_from_module(before)
    found = node_kernels(nodes, before, after, kernels)
    computing = [k for n, k in zip(nodes, found) if not n.is_input]
    assert sum(1 for k in computing if k) / len(computing) >= floor
    assert all(k is None for n, k in zip(nodes, found) if n.is_input)
    names = {k["name"] for k in kernels}
    assert {k for k in found if k} <= names


def test_graph_signature(mlp):
    before, _, _ = mlp
    nodes = [{"op": n.op, "shape": n.shape, "where": None} for n in nodes_from_module(before)]
    sig = graph_signature(before, nodes, lambda ins: f"made by {ins.name}")
    assert [p["shape"] for p in sig["params"]] == [str(p.shape) for p in before.entry.parameters]
    assert all(p["where"] == f"made by {q.name}" for p, q in zip(sig["params"], before.entry.parameters))
    assert len(sig["outputs"]) == len(before.entry.root.operands)
    assert all(c["shape"] in ("f32[]", "s64[]", "f32[1]", "s32[]", "pred[]") or c["shape"].endswith("[]")
               for c in sig["constants"])


def test_large_constants():
    assert large_constants(parse_module(text("mlp_train.before.txt"))) == []
    module = parse_module("HloModule big, entry_computation_layout={(f32[512,512]{1,0})->f32[512,512]{1,0}}\n\n"
                          "ENTRY %main (p: f32[512,512]) -> f32[512,512] {\n"
                          "  %p = f32[512,512]{1,0} parameter(0)\n"
                          "  %c = f32[512,512]{1,0} constant({...})\n"
                          "  ROOT %a = f32[512,512]{1,0} add(f32[512,512]{1,0} %p, f32[512,512]{1,0} %c)\n}\n")
    (big,) = large_constants(module)
    assert big.name == "c" and big.shape.byte_size == 512 * 512 * 4


def test_spmd_summary_of_a_sharded_step():
    before, after = parse_module(text("spmd4.before.txt")), parse_module(text("spmd4.after.txt"))
    fmap = build_fusion_map(after, lambda ins: [], lambda ins: None)
    s = spmd_summary(before, after, [k.to_dict() for k in fmap.kernels])
    assert s["devices"] == 4 and s["memory_per_device"]
    assert s["collectives"] and {c["kind"] for c in s["collectives"]} <= {"all-reduce", "all-gather", "reduce-scatter",
                                                                           "all-to-all", "collective-permute"}
    assert all(c["bytes"] > 0 and c["groups"] for c in s["collectives"])
    split = [t for t in s["tensors"] if t["blocks"]]
    assert split and all(sorted(d for b in t["blocks"] for d in b["devices"]) == [0, 1, 2, 3] for t in split)
    assert spmd_summary(parse_module(text("mlp_train.before.txt")), parse_module(text("mlp_train.after.txt")), []) is None


def test_growing_temporaries_leave_out_weight_shaped_copies():
    """A temporary shaped like a parameter of the program (a transposed copy counts: ResNet's
    convolution weight gradients in XLA's layout) is taken not to grow with the batch; the rest of
    the allocation's bytes, by its values' shares, are. The parameter's own value names the weights
    (``p12.195``), not the other values packed into its buffer."""
    from xla_lab.hlo.memory import growing_temp_bytes

    ba = """allocation 0: size 2048, parameter 0, shape |f32[32,16]| at ShapeIndex {}:
 value: <473 p5.28 @0> (size=2048,offset=0): f32[32,16]{1,0}
 value: <474 dot.9 @0> (size=2048,offset=0): f32[8,64]{1,0}
allocation 1: size 3000, preallocated-temp:
 value: <514 copy.1 @0> (size=2048,offset=0): f32[16,32]{1,0}
 value: <515 dot.2 @0> (size=1024,offset=0): f32[8,32]{1,0}
 value: <516 add.3 @1024> (size=1024,offset=1024): f32[8,64]{1,0}
"""
    allocations = parse_buffer_assignment(ba)
    assert [a.kind for a in allocations] == ["parameter", "temp"]
    assert growing_temp_bytes(allocations) == 3000 * 2048 // 4096  # the f32[16,32] copy is left out
    m = memory_summary(text("mlp_train.memory-usage-report.txt"), text("mlp_train.buffer-assignment.txt"))
    assert 0 < m["growing_temp_bytes"] <= m["temp_bytes"]
