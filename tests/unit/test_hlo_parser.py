"""The HLO text parser on real dumps of this machine's XLA CPU client (tests/fixtures/hlo/, made by
tests/fixtures/hlo/make_fixtures.py), on broken text, and under fuzzing."""

from __future__ import annotations

import functools
import gc
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_lab.hlo import parser as hlo_parser
from xla_lab.hlo.parser import HloModule, HloParseError, Instruction, parse_module, parse_signature
from xla_lab.hlo.shapes import DTYPE_BYTES, Shape, ShapeError, parse_shape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hlo"
CASES = ["mlp_train", "transformer_train", "conv_net", "while_loop", "conditional", "custom_call", "spmd4"]
FILES = [f"{case}.{when}.txt" for case in CASES for when in ("before", "after")]
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all",
               "all-reduce-start", "all-gather-start", "collective-permute-start"}


@functools.cache
def text(name: str) -> str:
    return (FIXTURES / name).read_text()


@functools.cache
def module(name: str) -> HloModule:
    return parse_module(text(name))


def by_opcode(m: HloModule, opcode: str) -> list[Instruction]:
    return [ins for ins in m.instructions() if ins.opcode == opcode]


def computation_of(m: HloModule, ins: Instruction):
    return next(c for c in m.computations.values() if c.by_name.get(ins.name) is ins)


# --------------------------------------------------------------------------------------------------
# Every fixture


def test_fixtures_are_small_and_complete():
    for name in FILES:
        assert (FIXTURES / name).stat().st_size < 400_000, name
    assert sum(f.stat().st_size for f in FIXTURES.glob("*.txt")) < 3_000_000
    assert (FIXTURES / "mlp_train.buffer-assignment.txt").is_file()
    assert (FIXTURES / "mlp_train.memory-usage-report.txt").is_file()


@pytest.mark.parametrize("name", FILES)
def test_fixture_parses_into_a_consistent_module(name):
    t = text(name)
    lines = t.split("\n")
    m = parse_module(t)
    assert isinstance(m, HloModule)
    assert lines[0].startswith(f"HloModule {m.name},")
    assert "entry_computation_layout" in m.attributes
    assert [c.name for c in m.computations.values() if c.is_entry] == [m.entry.name]
    assert m.entry.name == m.name or m.entry.name.startswith(m.name)
    assert f"ENTRY %{m.entry.name} " in t
    total = 0
    for comp in m.computations.values():
        names = comp.by_name
        assert len(names) == len(comp.instructions)
        for ins in comp.instructions:
            total += 1
            assert m.instruction(ins.name) is ins  # XLA keeps names module-unique
            for operand in ins.operands:
                assert operand in names, (comp.name, ins.name, operand)
            for callee in ins.called:
                assert callee in m.computations, (ins.name, callee)
            # The line number points at the instruction's own line.
            line = lines[ins.line - 1]
            assert re.match(rf"\s*(ROOT\s+)?%?{re.escape(ins.name)} = ", line), (ins.line, line)
            assert ins.is_root == line.lstrip().startswith("ROOT ")
            assert f"= {ins.shape_text} {ins.opcode}(" in line
            assert parse_shape(ins.shape_text) == ins.shape
            if ins.opcode == "parameter":
                assert ins.literal is not None and ins.literal.isdigit() and ins.operands == []
            if ins.opcode == "constant":
                assert ins.literal is not None and ins.operands == []
            if "metadata" in ins.attributes:
                assert ins.attributes["metadata"].startswith("{")
                assert ins.metadata or ins.attributes["metadata"] == "{}"
        roots = [ins for ins in comp.instructions if ins.is_root]
        assert roots == [comp.root] or (not roots and comp.root is comp.instructions[-1])
        # The parameters, ordered by number, are the ones the signature lists.
        params, result = parse_signature(comp.signature)
        assert [int(p.literal) for p in comp.parameters] == list(range(len(params)))
        assert [(p.name, p.shape) for p in comp.parameters] == params
        assert result == comp.root.shape
    assert total == sum(1 for _ in m.instructions()) == sum(1 for ln in lines if " = " in ln and "(" in ln
                                                            and not ln.startswith("HloModule"))
    # entry_computation_layout={(params)->result} agrees with the ENTRY computation.
    layout = m.attributes["entry_computation_layout"]
    assert layout[0] == "{" and layout[-1] == "}"
    params_text, result_text = layout[1:-1].split("->")
    assert parse_shape(params_text).tuple_shapes == tuple(p.shape for p in m.entry.parameters)
    assert parse_shape(result_text) == m.entry.root.shape
    callers = m.callers()
    assert set(callers) >= set(m.computations) and callers[m.entry.name] == []


@pytest.mark.parametrize("name", FILES)
def test_every_non_entry_computation_is_called(name):
    m = module(name)
    callers = m.callers()
    for comp in m.computations.values():
        if not comp.is_entry:
            assert callers[comp.name], comp.name
            for ins in callers[comp.name]:
                assert comp.name in ins.called


# --------------------------------------------------------------------------------------------------
# What each case is about


def test_mlp_after_has_fusions_with_kinds_and_aten_metadata():
    m = module("mlp_train.after.txt")
    fusions = by_opcode(m, "fusion")
    assert len(fusions) >= 10
    assert {f.fusion_kind for f in fusions} <= {"kLoop", "kInput", "kOutput", "kCustom"}
    assert all(f.fusion_kind and f.attributes["calls"].startswith("%fused_computation") for f in fusions)
    ops_in_fusions, sources = set(), set()
    for f in fusions:
        assert len(f.called) == 1 and f.called[0] == f.attributes["calls"].lstrip("%")
        fused = m.computations[f.called[0]]
        assert m.callers()[fused.name] == [f]
        assert len(fused.parameters) == len(f.operands)
        for p, operand in zip(fused.parameters, f.operands):
            assert p.shape == computation_of(m, f).by_name[operand].shape
        assert fused.root.shape == f.shape
        for ins in fused.instructions:
            if ins.op_type:
                ops_in_fusions.add(ins.op_type)
            if ins.source:
                sources.add(ins.source)
    assert {"aten__gelu", "aten__native_batch_norm", "aten__addmm"} <= ops_in_fusions
    gelu = [s for s in sources if s[0].endswith("torch/nn/modules/activation.py")]
    assert gelu and all(isinstance(line, int) and line > 0 for _, line in gelu)
    assert m.attributes["is_scheduled"] == "true"
    assert m.attributes["input_output_alias"].startswith("{")
    assert fusions[0].fusion_kind == fusions[0].attributes["kind"]
    assert by_opcode(m, "add")[0].fusion_kind is None


def test_source_metadata():
    m = module("mlp_train.before.txt")
    sources = {ins.source for ins in m.entry.instructions if ins.source}
    assert any(f.endswith("torch/optim/adam.py") for f, _ in sources)
    assert all(isinstance(line, int) and line > 0 for _, line in sources)
    topk = [ins for ins in module("custom_call.before.txt").instructions() if ins.op_type == "aten__topk"]
    assert topk and all(ins.source[0].endswith("tests/fixtures/hlo/make_fixtures.py") for ins in topk)
    # op_name may hold a '/' path; values are unquoted
    adds = [ins for ins in m.entry.instructions if ins.op_type == "aten__add"]
    assert adds and all('"' not in ins.metadata["op_name"] for ins in adds)


def test_buffer_assignment_byte_sizes_agree_with_shapes():
    """XLA's own buffer sizes (mlp_train.buffer-assignment.txt) equal Shape.byte_size; the root tuple's
    leaves are the buffers of its operands."""
    m = module("mlp_train.after.txt")
    value = re.compile(r"^ value: <\d+ ([\w.\-]+)(?:\{[\d,]*\})? @\d+> \(size=(\d+),offset=\d+\): (.+)$")
    sizes: dict[str, int] = {}
    checked = 0
    for line in (FIXTURES / "mlp_train.buffer-assignment.txt").read_text().splitlines():
        v = value.match(line)
        if not v:
            continue
        name, size, shape_text = v[1], int(v[2]), v[3]
        shape = parse_shape(shape_text)
        assert m.instruction(name).shape == shape
        if shape.is_tuple:
            assert size == 8 * len(shape.tuple_shapes)  # a tuple buffer is its table of pointers
        else:
            assert size == shape.byte_size, line
            sizes[name] = size
        checked += 1
    assert checked > 50
    root = m.entry.root
    assert root.opcode == "tuple" and root.shape.is_tuple
    leaves = root.shape.leaves()
    assert len(leaves) == len(root.operands) == 31
    for leaf, operand in zip(leaves, root.operands):
        assert not leaf.is_tuple and leaf == m.entry.by_name[operand].shape
        if operand in sizes:
            assert sizes[operand] == leaf.byte_size
    assert root.shape.byte_size == sum(leaf.byte_size for leaf in leaves)
    assert root.shape.elements == 0


def test_transformer_dots_have_contracting_dims_that_agree():
    for name in ("transformer_train.before.txt", "transformer_train.after.txt"):
        m = module(name)
        dots = by_opcode(m, "dot")
        assert len(dots) >= 10
        batched = 0
        for dot in dots:
            comp = computation_of(m, dot)
            lhs, rhs = (comp.by_name[o].shape for o in dot.operands)
            lc = [int(d) for d in dot.attributes["lhs_contracting_dims"].strip("{}").split(",")]
            rc = [int(d) for d in dot.attributes["rhs_contracting_dims"].strip("{}").split(",")]
            assert [lhs.dims[d] for d in lc] == [rhs.dims[d] for d in rc]
            if "lhs_batch_dims" in dot.attributes:
                batched += 1
        assert batched > 0  # the attention's batched matmuls


def test_conv_net_convolution_window_and_dim_labels():
    for name in ("conv_net.before.txt", "conv_net.after.txt"):
        convs = by_opcode(module(name), "convolution")
        assert convs
        for conv in convs:
            assert conv.attributes["window"].startswith("{size=")
            assert re.fullmatch(r"\w+_\w+->\w+", conv.attributes["dim_labels"])
            assert len(conv.operands) == 2
    m = module("conv_net.after.txt")
    preds = [ins for ins in m.instructions() if "control-predecessors" in ins.attributes]
    assert preds
    for ins in preds:
        comp = computation_of(m, ins)
        for p in ins.attributes["control-predecessors"].strip("{}").split(","):
            assert p.strip().lstrip("%") in comp.by_name
    assert by_opcode(m, "select-and-scatter") or by_opcode(m, "scatter")


def test_while_loops_resolve_body_and_condition():
    for name in ("while_loop.before.txt", "while_loop.after.txt"):
        m = module(name)
        loops = by_opcode(m, "while")
        assert len(loops) == 2  # scan and while_loop
        for w in loops:
            cond = m.computations[w.attributes["condition"].lstrip("%")]
            body = m.computations[w.attributes["body"].lstrip("%")]
            assert w.called == [cond.name, body.name]
            assert w.shape.is_tuple
            assert cond.root.shape == Shape("pred", ())
            assert body.root.shape == w.shape
            assert [p.shape for p in body.parameters] == [w.shape] == [p.shape for p in cond.parameters]
            assert m.callers()[body.name] == [w]
    after = module("while_loop.after.txt")
    trip = [w for w in by_opcode(after, "while")
            if "known_trip_count" in w.attributes.get("backend_config", "")]
    assert trip and trip[0].attributes["backend_config"].startswith('{"known_trip_count":{"n":"5"}')


def test_conditional_resolves_branch_computations():
    for name in ("conditional.before.txt", "conditional.after.txt"):
        m = module(name)
        (cond,) = by_opcode(m, "conditional")
        comp = computation_of(m, cond)
        pred = comp.by_name[cond.operands[0]]
        assert pred.shape == Shape("pred", ())
        true_c = m.computations[cond.attributes["true_computation"].lstrip("%")]
        false_c = m.computations[cond.attributes["false_computation"].lstrip("%")]
        assert cond.called == [true_c.name, false_c.name]
        for branch, operand in zip((true_c, false_c), cond.operands[1:]):
            assert [p.shape for p in branch.parameters] == [comp.by_name[operand].shape]
            assert branch.root.shape == cond.shape
            assert any(ins.opcode in ("dot", "fusion", "call") for ins in branch.instructions)


def test_custom_call_target_and_dynamic_shapes():
    after = module("custom_call.after.txt")
    calls = by_opcode(after, "custom-call")
    targets = {c.attributes["custom_call_target"] for c in calls}
    assert '"TopK"' in targets
    topk = next(c for c in calls if c.attributes["custom_call_target"] == '"TopK"')
    assert topk.shape.is_tuple and [s.dtype for s in topk.shape.leaves()] == ["f32", "s32"]
    assert len(topk.called) == 1 and after.computations[topk.called[0]].root.shape == Shape("pred", ())
    assert topk.op_type == "aten__topk"
    before = module("custom_call.before.txt")
    sorts = by_opcode(before, "sort")
    assert sorts and all(len(s.called) == 1 for s in sorts)  # comparators, to_apply=
    (sds,) = by_opcode(before, "set-dimension-size")
    assert sds.shape.dims == (256, 2) and sds.shape.dynamic == (True, False)
    assert str(sds.shape) == "s32[<=256,2]" and sds.shape.byte_size == 256 * 2 * 4
    assert "s32[<=256,2]" in before.attributes["entry_computation_layout"]
    dyn = [ins for ins in after.instructions() if ins.shape.dynamic or
           any(leaf.dynamic for leaf in ins.shape.leaves())]
    assert dyn


def _replica_groups(value: str) -> list[list[int]]:
    assert value.startswith("{{") and value.endswith("}}"), value
    return [[int(d) for d in g.split(",")] for g in value[2:-2].split("},{")]


def test_spmd4_collectives_and_shardings():
    after = module("spmd4.after.txt")
    assert after.attributes["num_partitions"] == "4"
    collectives = [ins for ins in after.instructions() if ins.opcode in COLLECTIVES]
    assert collectives
    for c in collectives:
        groups = _replica_groups(c.attributes["replica_groups"])
        assert sorted(d for g in groups for d in g) == [0, 1, 2, 3]
        assert len({len(g) for g in groups}) == 1
        if c.opcode == "all-reduce":
            assert len(c.called) == 1 and after.computations[c.called[0]].root.opcode == "add"
    sharded = [ins for ins in after.instructions() if "sharding" in ins.attributes]
    assert sharded
    assert all(re.match(r"\{(replicated|maximal|manual|devices=\[[\d,]+\][\d,]+)", ins.attributes["sharding"])
               for ins in sharded)
    # The partitioned entry takes the per-device pieces of the sharded batch (8 rows / 2 on "data").
    assert any(p.shape.dims and p.shape.dims[0] == 4 for p in after.entry.parameters)
    before = module("spmd4.before.txt")
    marks = [c for c in by_opcode(before, "custom-call")
             if c.attributes["custom_call_target"] == '"Sharding"']
    assert marks and all("sharding" in c.attributes for c in marks)
    assert all("sharding" in p.attributes for p in before.entry.parameters)


# --------------------------------------------------------------------------------------------------
# Shapes


@pytest.mark.parametrize("text_, expected, elements, size", [
    ("f32[8,32]{1,0}", Shape("f32", (8, 32)), 256, 1024),
    ("pred[]", Shape("pred", ()), 1, 1),
    ("bf16[3,5]", Shape("bf16", (3, 5)), 15, 30),
    ("s64[2]{0}", Shape("s64", (2,)), 2, 16),
    ("pred[7]", Shape("pred", (7,)), 7, 7),
    ("c128[2]", Shape("c128", (2,)), 2, 32),
    ("f8e4m3fn[16]", Shape("f8e4m3fn", (16,)), 16, 16),
    ("token[]", Shape("token", ()), 1, 0),
    ("s32[<=10]", Shape("s32", (10,), (), (True,)), 10, 40),
    ("f32[<=8,3]{1,0}", Shape("f32", (8, 3), (), (True, False)), 24, 96),
    ("f32[4,128]{1,0:T(8,128)}", Shape("f32", (4, 128)), 512, 2048),
    ("bf16[4,128]{1,0:T(8,128)(2,1)}", Shape("bf16", (4, 128)), 512, 1024),
    ("(f32[2,16]{1,0}, f32[])", Shape(None, (), (Shape("f32", (2, 16)), Shape("f32", ()))), 0, 132),
    ("(f32[4]{0:T(256)}, /*index=5*/f32[1])",
     Shape(None, (), (Shape("f32", (4,)), Shape("f32", (1,)))), 0, 20),
    ("((s32[], pred[2]), (), bf16[2])",
     Shape(None, (), (Shape(None, (), (Shape("s32", ()), Shape("pred", (2,)))), Shape(None, ()),
                      Shape("bf16", (2,)))), 0, 10),
    ("()", Shape(None, ()), 0, 0),
])
def test_parse_shape(text_, expected, elements, size):
    shape = parse_shape(text_)
    assert shape == expected
    assert shape.elements == elements and shape.byte_size == size
    assert parse_shape(str(shape)) == shape
    assert shape.is_tuple == (expected.dtype is None)
    assert all(not leaf.is_tuple for leaf in shape.leaves())
    assert shape.byte_size == sum(leaf.byte_size for leaf in shape.leaves())


def test_shape_str_and_leaves():
    nested = parse_shape("((f32[2]{0}, s32[<=3]), /*index=2*/pred[])")
    assert str(nested) == "((f32[2], s32[<=3]), pred[])"
    assert [str(s) for s in nested.leaves()] == ["f32[2]", "s32[<=3]", "pred[]"]
    assert nested.byte_size == 8 + 12 + 1
    assert DTYPE_BYTES["bf16"] == 2 and DTYPE_BYTES["pred"] == 1 and DTYPE_BYTES["s64"] == 8


@pytest.mark.parametrize("bad", [
    "", "f32", "f32[", "f32[2", "f32[a]", "x32[2]", "F32[2]", "f32[2]{1,0", "f32[2]{1,0)}", "(f32[2]",
    "(f32[2],", "f32[2] f32[2]", "(f32[2] f32[3])", "f32[-1]", "f32[2]/*x", "(" * 200 + ")" * 200,
    "f32[" + "9" * 40 + "]", "f32[<=]", "[2]", ")",
])
def test_parse_shape_rejects_garbage(bad):
    with pytest.raises(ShapeError):
        parse_shape(bad)


@settings(max_examples=300, deadline=1000, database=None)
@given(st.text(alphabet=st.sampled_from(list("fsupredbc0123468[](){},<=?:T/*x ")), max_size=40))
def test_parse_shape_fuzz(s):
    try:
        shape = parse_shape(s)
    except ShapeError:
        return
    assert parse_shape(str(shape)) == shape
    assert shape.byte_size >= 0


# --------------------------------------------------------------------------------------------------
# Broken text

BASE = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %zero = f32[] constant(0)
  %r = f32[] reduce(%p, %zero), dimensions={0}, to_apply=%add, metadata={op_type="aten__sum" source_line=3}
  ROOT %out = f32[4]{0} broadcast(%r), dimensions={}
}
"""


def _edit(line_no: int, new: str | None = None, insert: bool = False):
    def apply(text: str) -> str:
        lines = text.split("\n")
        if insert:
            lines.insert(line_no - 1, new)
        elif new is None:
            del lines[line_no - 1]
        else:
            lines[line_no - 1] = new
        return "\n".join(lines)
    return apply


def _sub(old: str, new: str):
    def apply(text: str) -> str:
        assert old in text
        return text.replace(old, new, 1)
    return apply


BROKEN = [
    ("missing '='", _edit(11, "  %zero f32[] constant(0)"), 11),
    ("unclosed brace", _sub("dimensions={0}", "dimensions={0"), 12),
    ("mismatched brackets", _sub("dimensions={0}", "dimensions={0)"), 12),
    ("unclosed operand list", _sub("reduce(%p, %zero)", "reduce(%p, %zero"), 12),
    ("unterminated string", _sub('op_type="aten__sum"', 'op_type="aten__sum'), 12),
    ("bad metadata", _sub('metadata={op_type="aten__sum" source_line=3}', "metadata={op_type}"), 12),
    ("unterminated comment", _sub("add(%x, %y)", "add(%x, /*index=1 %y)"), 6),
    ("empty operand", _sub("add(%x, %y)", "add(%x, , %y)"), 6),
    ("bad shape", _sub("%p = f32[4]{0}", "%p = f33[4]{0}"), 10),
    ("unbalanced tuple shape", _sub("%p = f32[4]{0}", "%p = (f32[4]{0}, f32[]"), 10),
    ("no opcode", _sub("constant(0)", "(0)"), 11),
    ("garbage after the operands", _sub("constant(0)", "constant(0) junk"), 11),
    ("attribute without value", _sub("dimensions={}", "dimensions="), 13),
    ("duplicate attribute", _sub("dimensions={}", "dimensions={}, dimensions={0}"), 13),
    ("duplicate metadata", _sub("source_line=3}", "source_line=3}, metadata={}"), 12),
    ("parameter number", _sub("parameter(1)", "parameter(one)"), 5),
    ("duplicate parameter number", _sub("parameter(1)", "parameter(0)"), 5),
    ("duplicate instruction", _sub("%zero = f32[] constant(0)", "%p = f32[] constant(0)"), 11),
    ("two ROOTs", _sub("  %r = ", "  ROOT %r = "), 13),
    ("instruction outside a computation", _edit(8, "  %stray = f32[] constant(1)"), 8),
    ("'}' outside a computation", _edit(8, "}"), 8),
    ("text outside a computation", _edit(8, "garbage"), 8),
    ("a second HloModule", _edit(8, "HloModule again"), 8),
    ("computation not closed at the end", _edit(14), 9),
    ("computation not closed before the next", _edit(7), 8),
    ("empty computation", lambda t: _edit(4)(_edit(4)(_edit(4)(t))), 4),
    ("duplicate computation name", _sub("ENTRY %main", "ENTRY %add"), 9),
    ("operand names nothing", _sub("broadcast(%r)", "broadcast(%nothing)"), 13),
    ("operand from another computation", _sub("broadcast(%r)", "broadcast(%x)"), 13),
    ("called computation names nothing", _sub("to_apply=%add", "to_apply=%nothing"), 12),
    ("called list names nothing", _sub("to_apply=%add", "to_apply={%add, %nothing}"), 12),
    ("no ENTRY", _sub("ENTRY %main", "%main"), 1),
    ("two ENTRYs", _sub("%add (x", "ENTRY %add (x"), 9),
    ("no HloModule header", _edit(1), 2),
    ("empty text", lambda t: "", 1),
    ("only blank lines", lambda t: "\n\n\n", 4),
    ("header with a bad signature", _sub("ENTRY %main (p: f32[4])", "ENTRY %main (p: f32[4]"), 9),
    ("instruction header inside a computation",
     _sub("  ROOT %out", "%next (a: f32[]) -> f32[] {\n  ROOT %out"), 13),
]


def test_base_of_the_broken_table_parses():
    m = parse_module(BASE)
    assert m.entry.name == "main" and m.entry.root.name == "out"
    assert m.instruction("r").called == ["add"] and m.instruction("r").metadata == {
        "op_type": "aten__sum", "source_line": "3"}
    assert m.instruction("r").source is None
    with pytest.raises(KeyError):
        m.instruction("nothing")


@pytest.mark.parametrize("what, edit, line", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_text_raises_with_its_line(what, edit, line):
    with pytest.raises(HloParseError) as info:
        parse_module(edit(BASE))
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"line {line}: ")


def test_accepted_variants():
    """Names without %, old-style operand shapes, ``name {`` headers, comments, a leading blank line,
    nested attribute values with quotes and brackets, operands defined after their use."""
    text = "\n".join([
        "",
        "// a comment",
        "HloModule variants, entry_computation_layout={(f32[2]{0}, s32[])->(f32[2]{0}, s32[])}",
        "sum {",
        "  a = f32[] parameter(0)",
        "  b = f32[] parameter(1)",
        "  ROOT c = f32[] add(f32[] a, f32[] b)",
        "}",
        "ENTRY main {",
        "  // inside",
        "  /*x*/",
        "  %q = s32[] parameter(1), sharding={devices=[4,1]0,1,2,3}",
        '  %p = f32[2]{0} parameter(0), metadata={op_type="a\\"b" op_name="x/y" source_file="x,y{.py" '
        "source_line=134 stack_frame_id=2}",
        "  %rg = f32[2]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=sum, "
        'backend_config={"outer_dimension_partitions":[],"s":"}"}, frontend_attributes={_xla_x="{y}"}',
        "  ROOT %t = (f32[2]{0}, /*index=1*/s32[]) tuple(%rg, /*index=1*/%later)",
        "  %later = s32[] copy(%q)",
        "}",
        "",
    ])
    m = parse_module(text)
    assert m.name == "variants"
    assert list(m.computations) == ["sum", "main"] and m.entry.name == "main"
    assert m.computations["sum"].signature == "" and m.computations["sum"].root.operands == ["a", "b"]
    p = m.instruction("p")
    assert p.metadata == {"op_type": 'a"b', "op_name": "x/y", "source_file": "x,y{.py",
                          "source_line": "134", "stack_frame_id": "2"}
    assert p.source == ("x,y{.py", 134) and p.line == 13
    rg = m.instruction("rg")
    assert rg.attributes["replica_groups"] == "{{0,1},{2,3}}"
    assert rg.attributes["backend_config"] == '{"outer_dimension_partitions":[],"s":"}"}'
    assert rg.attributes["frontend_attributes"] == '{_xla_x="{y}"}'
    assert rg.called == ["sum"]
    assert m.instruction("q").attributes["sharding"] == "{devices=[4,1]0,1,2,3}"
    t = m.entry.root
    assert t.operands == ["rg", "later"] and t.shape_text == "(f32[2]{0}, /*index=1*/s32[])"
    assert [str(s) for s in t.shape.leaves()] == ["f32[2]", "s32[]"]
    assert [ins.name for ins in m.entry.parameters] == ["p", "q"]
    assert m.callers()["sum"] == [rg]


def test_parse_signature():
    params, result = parse_signature(
        "(p0.1: f32[8,4], p1: (s32[], pred[<=2]), /*index=2*/p2: f32[]) -> (f32[], s32[])")
    assert params == [("p0.1", Shape("f32", (8, 4))),
                      ("p1", Shape(None, (), (Shape("s32", ()), Shape("pred", (2,), (), (True,))))),
                      ("p2", Shape("f32", ()))]
    assert result == parse_shape("(f32[], s32[])")
    assert parse_signature("() -> f32[]") == ([], Shape("f32", ()))
    for bad in ("p: f32[]", "(p f32[]) -> f32[]", "(p: f32[] -> f32[]", "(p: f32[]) => f32[]"):
        with pytest.raises(ShapeError):
            parse_signature(bad)


# --------------------------------------------------------------------------------------------------
# The fast path (common lines by one regex, attribute texts checked once, dicts built when read) gives
# what the careful scanner gives.


def _same_outcome(text_: str) -> None:
    """parse_module(text_) and the scanner alone agree: the same error, or equal modules."""
    def outcome(fast: bool):
        try:
            return hlo_parser._parse_module(text_, fast=fast)
        except HloParseError as e:
            return (e.line, str(e))
    fast, slow = outcome(True), outcome(False)
    if isinstance(slow, tuple) or isinstance(fast, tuple):
        assert fast == slow
        return
    assert (fast.name, fast.attributes) == (slow.name, slow.attributes)
    assert list(fast.computations) == list(slow.computations)
    for name, comp in fast.computations.items():
        other = slow.computations[name]
        assert (comp.is_entry, comp.signature) == (other.is_entry, other.signature)
        # op_type / op_key / source first: on the fast path they read the shared metadata, before
        # the comparison below gives each instruction a copy of its own
        assert [(i.op_type, i.op_key, i.source) for i in comp.instructions] == \
            [(i.op_type, i.op_key, i.source) for i in other.instructions]
        assert comp.instructions == other.instructions  # every field, attributes and metadata too
        assert comp.by_name == other.by_name


@pytest.mark.parametrize("name", FILES)
def test_fast_path_agrees_with_the_scanner(name):
    _same_outcome(text(name))


def test_fast_path_takes_most_lines():
    """Instructions with attributes whose dicts are not built until read came by the fast path."""
    with_attributes = lazy = 0
    for name in FILES:
        m = parse_module(text(name))
        for ins in m.instructions():
            if ins._attributes is None:
                lazy += 1
            elif ins._attributes:
                with_attributes += 1
    assert lazy > 2000 and lazy >= 0.95 * (lazy + with_attributes)


LEAN_PRINTED = FIXTURES.parent / "lean" / "transformer_train.printed.txt"  # (lean/make_printed.py)


def test_fast_path_agrees_with_the_scanner_on_text_printed_with_operand_shapes():
    """Lean capture's text: torch_xla's printer writes every operand with its shape."""
    printed = LEAN_PRINTED.read_text()
    assert re.search(r"dot\(f32\[[\d,]+\]\{[\d,]+\} %[\w.]+, f32\[", printed)
    assert re.search(r", /\*index=\d+\*/[a-z]\w*\[", printed)
    _same_outcome(printed)


def test_fast_path_takes_the_lines_printed_with_operand_shapes():
    """(Their attribute dicts not built until read: they came by the fast path.)"""
    m = parse_module(LEAN_PRINTED.read_text())
    with_operands = [ins for ins in m.instructions() if ins.operands]
    lazy = [ins for ins in with_operands if ins._attributes is None]
    built = [ins for ins in with_operands if ins._attributes]
    assert len(lazy) > 500 and len(lazy) >= 0.95 * (len(lazy) + len(built))
    dot = next(ins for ins in lazy if ins.opcode == "dot")
    assert len(dot.operands) == 2 and all(m.instruction(name).name == name for name in dot.operands)


def test_fast_metadata_agrees_with_the_scanner():
    values = {ins.attributes["metadata"] for name in FILES for ins in module(name).instructions()
              if "metadata" in ins.attributes}
    values |= {'{}', '{op_type="a\\"b"}', '{a="x"b="y"}', '{a=xb=y}', '{a=x  b="y" }', '{a=b=c}',
               '{a=x/y}', '{a="x/*y"}', '{a={b}}', '{a=x }', '{ a=x}'}
    assert len(values) > 100
    for value in values:
        assert hlo_parser._fast_metadata(value) == hlo_parser._metadata(value), value


def test_lazy_attributes_are_each_instructions_own():
    line = '  %{} = f32[4]{{0}} negate(%p), metadata={{op_type="aten__neg" source_line=7}}'
    two = line.format("n1") + "\n" + line.format("n2") + "\n"
    m = parse_module(BASE.replace("  ROOT %out", two + "  ROOT %out"))
    n1, n2 = m.instruction("n1"), m.instruction("n2")
    assert n1._attributes is None and n1._metadata is None  # nothing built yet
    assert n1.metadata == n2.metadata == {"op_type": "aten__neg", "source_line": "7"}
    assert n1.op_type == "aten__neg" and n1.source is None and n1.fusion_kind is None
    n1.metadata["op_type"] = "changed"
    n1.attributes["extra"] = "1"
    assert n2.op_type == "aten__neg" and "extra" not in n2.attributes
    assert n1.op_type == "changed" and n1.op_key == ("changed", None, None, "7")
    # op_type / op_key read the shared metadata without copying it
    n3 = parse_module(BASE.replace("  ROOT %out", two + "  ROOT %out")).instruction("n1")
    assert n3.op_key == ("aten__neg", None, None, "7") and n3.op_type == "aten__neg" and n3._metadata is None
    n2.attributes = {"set": "x"}
    assert n2.attributes == {"set": "x"} and n1 != n2
    assert "name='n1'" in repr(n1) and "'extra': '1'" in repr(n1)
    # Made by hand, as before.
    made = Instruction("a", "add", Shape("f32", ()), "f32[]", ["x", "y"], {"k": "v"}, {}, [], False, 3)
    assert made.attributes == {"k": "v"} and made.metadata == {} and made.literal is None
    assert made == Instruction("a", "add", Shape("f32", ()), "f32[]", ["x", "y"], {"k": "v"}, {}, [],
                               False, 3)


def test_unexpectedly_bad_lazy_metadata_raises_parse_error(monkeypatch):
    """The parser checks metadata before it builds it lazily; were that check wrong, reading it would
    still raise only HloParseError."""
    def broken(value):
        raise hlo_parser._Fail("metadata is not key=value pairs")
    monkeypatch.setattr(hlo_parser, "_fast_metadata", broken)
    ins = Instruction("a", "add", Shape("f32", ()), "f32[]", [], None, None, [], False, 12)
    ins._shared = hlo_parser._SharedAttributes(", metadata={op_type=x}")
    with pytest.raises(HloParseError) as info:
        ins.metadata  # noqa: B018
    assert info.value.line == 12 and str(info.value).startswith("line 12: ")


def test_parse_module_leaves_the_garbage_collector_as_it_was():
    assert gc.isenabled()
    parse_module(BASE)
    assert gc.isenabled()
    with pytest.raises(HloParseError):
        parse_module("garbage")
    assert gc.isenabled()
    gc.disable()
    try:
        parse_module(BASE)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_parse_shape_caches_and_still_checks_its_argument():
    assert parse_shape("f32[8,4]{1,0}") is parse_shape("f32[8,4]{1,0}")
    for bad in (None, 5, ["f32[2]"]):
        with pytest.raises(ShapeError):
            parse_shape(bad)


# --------------------------------------------------------------------------------------------------
# Fuzzing: mutated real dumps parse or raise HloParseError, nothing else, quickly.

_JUNK = st.text(alphabet=st.sampled_from(list('(){}[]"\\%=,/* \tROOTENTRY\n<>:.-_0123456789fs')), min_size=1,
                max_size=12)
_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("duplicate"), st.integers(0, 10**6)),
    st.tuples(st.just("swap"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("insert"), st.integers(0, 10**7), _JUNK | st.text(min_size=1, max_size=4)),
    st.tuples(st.just("delete_chars"), st.integers(0, 10**7), st.integers(1, 30)),
    st.tuples(st.just("truncate"), st.integers(0, 10**7)),
)


def _mutate(text: str, mutation: tuple) -> str:
    kind = mutation[0]
    if kind in ("delete", "duplicate", "swap"):
        lines = text.split("\n")
        i = mutation[1] % len(lines)
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        else:
            j = mutation[2] % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    pos = mutation[1] % (len(text) + 1)
    if kind == "insert":
        return text[:pos] + mutation[2] + text[pos:]
    if kind == "delete_chars":
        return text[:pos] + text[pos + mutation[2]:]
    return text[:pos]


def _check_parses_or_fails_cleanly(text: str) -> None:
    try:
        m = parse_module(text)
    except HloParseError as e:
        assert isinstance(e.line, int) and 1 <= e.line <= text.count("\n") + 1
        assert str(e).startswith(f"line {e.line}: ")
        return
    assert isinstance(m, HloModule)
    entry = m.entry
    assert entry.root in entry.instructions
    for comp in m.computations.values():
        for ins in comp.instructions:
            assert all(o in comp.by_name for o in ins.operands)
            assert all(c in m.computations for c in ins.called)
            ins.shape.byte_size, ins.source, ins.fusion_kind  # noqa: B018
        comp.parameters  # noqa: B018
    m.callers()


_SMALL = [f for f in FILES if len(text(f)) < 30_000]


@settings(max_examples=200, deadline=2000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FILES), st.lists(_MUTATION, min_size=1, max_size=4))
def test_fuzz_mutated_fixtures(name, mutations):
    t = text(name)
    for mutation in mutations:
        t = _mutate(t, mutation)
    _check_parses_or_fails_cleanly(t)


def _with_junk_in_one_line(module_text: str, which: int, inserts, keep_one_line: bool = False) -> str:
    """The module with ``inserts`` ((position, junk) pairs) put into its ``which``-th instruction line."""
    lines = module_text.split("\n")
    candidates = [i for i, ln in enumerate(lines)
                  if " = " in ln and "(" in ln and not ln.startswith("HloModule")]
    i = candidates[which % len(candidates)]
    line = lines[i]
    for pos, junk in inserts:
        pos %= len(line) + 1
        line = line[:pos] + (junk.replace("\n", " ") if keep_one_line else junk) + line[pos:]
    lines[i] = line
    return "\n".join(lines)


@settings(max_examples=200, deadline=2000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SMALL), st.integers(0, 10**6), st.lists(st.tuples(st.integers(0, 10**4), _JUNK),
                                                                   min_size=1, max_size=6))
def test_fuzz_one_instruction_line(name, which, inserts):
    """Many insertions of brackets, quotes and comment markers into one instruction line."""
    _check_parses_or_fails_cleanly(_with_junk_in_one_line(text(name), which, inserts))


@settings(max_examples=200, deadline=2000, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SMALL), st.integers(0, 10**6), st.lists(st.tuples(st.integers(0, 10**4), _JUNK),
                                                                   min_size=1, max_size=3))
def test_fuzz_fast_path_agrees_with_the_scanner(name, which, inserts):
    """Mutated instruction lines: the fast path never accepts what the scanner rejects, or reads a line
    differently."""
    _same_outcome(_with_junk_in_one_line(text(name), which, inserts, keep_one_line=True))


@pytest.mark.parametrize("evil", [
    "HloModule m\nENTRY %e {\n  ROOT %x = f32[] constant(" + "(" * 50_000 + "\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x = f32[] constant(0), a=" + "{" * 50_000 + "}" * 50_000 + "\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x = " + "(" * 50_000 + "f32[]" + ")" * 50_000 + " constant(0)\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x = f32[] constant(0), a=\"" + "\\\"" * 50_000 + "\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x = f32[] constant(0), a=" + "/*" * 50_000 + "\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x = f32[] constant(0)"
    + "".join(f", a{i}=1" for i in range(20_000)) + "\n}\n",
    "HloModule m\nENTRY %e {\n  ROOT %x" + " " * 100_000 + "= f32[] constant(0)\n}\n",
    "HloModule m\nENTRY %e" + " " * 100_000 + "x {\n  ROOT %x = f32[] constant(0)\n}\n",
    "HloModule m\n" + "%c (" * 20_000 + " {\n}\n",
])
def test_pathological_lines_are_fast(evil):
    start = time.perf_counter()
    _check_parses_or_fails_cleanly(evil)
    assert time.perf_counter() - start < 2.0


# --------------------------------------------------------------------------------------------------
# Timing (printed, not asserted)


def _big_module(copies: int) -> str:
    """The transformer's optimized module with its non-entry computations repeated under new names."""
    t = text("transformer_train.after.txt")
    head, _, rest = t.partition("\n")
    at = rest.index("\nENTRY ")
    comps, entry = rest[:at], rest[at:]
    renamed = [re.sub(r"%([\w.\-]+)", lambda m, k=k: f"%{m[1]}.copy{k}", comps) for k in range(copies)]
    return head + "\n" + "".join(renamed) + comps + entry


def test_parse_time(capsys):
    largest = max(FILES, key=lambda f: len(text(f)))
    t = text(largest)
    start = time.perf_counter()
    parse_module(t)
    small = time.perf_counter() - start
    big = _big_module(12)
    start = time.perf_counter()
    m = parse_module(big)
    large = time.perf_counter() - start
    assert len(m.computations) > 1000
    gc.collect()  # time reading the metadata, not the collector's first look at the new module
    start = time.perf_counter()
    sources = sum(1 for ins in m.instructions() if ins.source)  # builds every metadata dict
    read = time.perf_counter() - start
    assert sources > 1000
    with capsys.disabled():
        print(f"\n  parse {largest}: {len(t.splitlines())} lines, {len(t) // 1024} KiB"
              f" in {small * 1000:.1f} ms;"
              f" a {len(big.splitlines())}-line module ({len(big) // 1024} KiB) in {large * 1000:.0f} ms,"
              f" then its metadata in {read * 1000:.0f} ms")


def test_strip_metadata_follows_the_rule_both_languages_share():
    """The golden extension/test/hlo.test.ts reads too: a ``source_file`` with braces, escaped quotes,
    nesting, groups left open (found: Python's regex left metadata whose source_file held a brace, the
    TypeScript panel stripped it)."""
    import json
    from pathlib import Path

    from xla_lab.hlo.parser import strip_metadata

    golden = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "hlo" / "strip_metadata.json").read_text())
    assert len(golden["cases"]) > 5
    for case in golden["cases"]:
        assert strip_metadata(case["input"]) == case["expected"], case["name"]
