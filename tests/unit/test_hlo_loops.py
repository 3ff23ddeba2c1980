"""While loops of optimized modules (``xla_lab/hlo/loops.py``) and what they do to the fusion map:
trip counts read from XLA's ``backend_config`` or counted from the loop's condition, kernels of a body
counted trip-count times, nested loops, loops whose bound is a graph input. On the real dump of a
``scan`` and a ``while_loop`` (``tests/fixtures/hlo/while_loop.after.txt``) and on texts edited from
it or written here in XLA's format."""

from __future__ import annotations

from pathlib import Path

from xla_lab.hlo.cost import instruction_flops, kernel_bytes
from xla_lab.hlo.fusion_map import build_fusion_map, scheduled_callers
from xla_lab.hlo.loops import find_loops, trip_count
from xla_lab.hlo.parser import parse_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hlo"
WHILE = (FIXTURES / "while_loop.after.txt").read_text()
BACKEND_CONFIG = (', backend_config={"known_trip_count":{"n":"5"},"known_init_step":{"init":"0","step":"1"},'
                  '"known_induction_variable":{"tuple_index":"0"}}')


def loops_of(text: str):
    module = parse_module(text)
    return module, {loop.instruction: loop for loop in find_loops(module, scheduled_callers(module))}


def fmap_of(text: str, **kwargs):
    module = parse_module(text)
    return module, build_fusion_map(module, lambda ins: [], lambda ins: None, **kwargs)


def test_trip_counts_of_a_scan_and_a_while_loop():
    _, loops = loops_of(WHILE)
    scan, loop = loops["while.4"], loops["while.3"]
    assert (scan.trip_count, scan.trip_count_from, scan.runs) == (5, "backend_config", 5)
    assert (scan.body, scan.condition) == ("Body.52.clone", "Condition.100.clone")
    assert set(scan.computations) == {"Body.52.clone", "Condition.100.clone"}
    # while_loop's counter is uploaded from Python: a graph input, not known before the loop runs
    assert (loop.trip_count, loop.trip_count_from, loop.runs) == (None, None, None)
    assert scan.parent is None and loop.parent is None


def test_trip_count_counted_from_the_condition():
    """Without XLA's annotation: ``i < 5`` from a constant 0, stepped by 1 in the body."""
    assert BACKEND_CONFIG in WHILE
    _, loops = loops_of(WHILE.replace(BACKEND_CONFIG, ""))
    assert (loops["while.4"].trip_count, loops["while.4"].trip_count_from) == (5, "condition")
    # while_loop's ``i > 0`` stepping by -1 from a constant 3 (through a call's operand, a tuple, a copy)
    _, loops = loops_of(WHILE.replace("%copy.19 = s32[] copy(%p4.133)", "%copy.19 = s32[] constant(3)"))
    assert (loops["while.3"].trip_count, loops["while.3"].trip_count_from) == (3, "condition")
    # a counter that never reaches the bound is not counted forever
    _, loops = loops_of(WHILE.replace(BACKEND_CONFIG, "").replace("constant(5), metadata={op_name=\"xla__scan\"}",
                                                                   "constant(5000000000), metadata={op_name=\"xla__scan\"}"))
    assert loops["while.4"].trip_count is None


def test_the_older_trip_count_attribute():
    module = parse_module(WHILE.replace(BACKEND_CONFIG, ", known_trip_count={n=7}"))
    comp = module.computations["while.2_computation"]
    assert trip_count(comp.by_name["while.4"], comp, module) == (7, "backend_config")


def test_kernels_of_a_body_count_trip_count_times():
    module, fmap = fmap_of(WHILE)
    by_name = {k.name: k for k in fmap.kernels}
    body = module.computations["Body.52.clone"]
    dot = by_name["dot.1"]
    assert (dot.runs, dot.loop, dot.computation) == (5, "while.4", "Body.52.clone")
    one = instruction_flops(body.by_name["dot.1"], module, body)
    assert one == 2 * 2 * 8 * 8 and dot.flops == 5 * one
    assert dot.bytes == 5 * kernel_bytes(body.by_name["dot.1"], body)
    condition = [k for k in fmap.kernels if k.computation == "Condition.100.clone"]
    assert condition and all(k.runs == 6 for k in condition)  # a condition runs once more than its body
    # the while_loop's body: unknown trip count, one run counted
    sine = by_name["add_sine_fusion"]
    assert (sine.runs, sine.loop) == (None, "while.3")
    lp = module.computations["PyLoweringContext.14.148"]
    assert sine.flops == instruction_flops(lp.by_name["add_sine_fusion"], module, lp)
    outside = [k for k in fmap.kernels if k.loop is None]
    assert outside and all(k.runs == 1 for k in outside)
    assert {lp.instruction for lp in fmap.loops} == {"while.3", "while.4"}


def test_the_loops_own_work_takes_the_line_of_the_call():
    """Kernels of a body with no op of their own (the counter, slicing inputs, stacking outputs) are
    credited to the line that made the loop, not to the lines of the loop's inputs."""
    call = [{"cell": 4, "line": 2, "code": "y = scan(step, h0, xs)"}]
    _, fmap = fmap_of(WHILE, loop_lines={"while.4": (call, call)})
    by_name = {k.name: k for k in fmap.kernels}
    assert by_name["add.3"].lines == call and by_name["add.3"].model_lines == call  # the counter
    assert by_name["add.3"].aten_ops == [] and by_name["add.3"].runs == 5
    # a kernel with ops of its own and no line keeps nothing else's; one with no line takes the call's
    assert by_name["dot.1"].lines == call


NESTED = """HloModule nested, entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}

%inner_body (p: (s32[], f32[8,8])) -> (s32[], f32[8,8]) {
  %p = (s32[], f32[8,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8,8]{1,0} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %dot.1 = f32[8,8]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="aten__mm" op_name="aten__mm" source_file="m.py" source_line=3}
  ROOT %t = (s32[], f32[8,8]{1,0}) tuple(%next, %dot.1)
}

%inner_cond (q: (s32[], f32[8,8])) -> pred[] {
  %q = (s32[], f32[8,8]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %four = s32[] constant(4)
  ROOT %lt = pred[] compare(%j, %four), direction=LT
}

%outer_body (r: (s32[], f32[8,8])) -> (s32[], f32[8,8]) {
  %r = (s32[], f32[8,8]{1,0}) parameter(0)
  %k = s32[] get-tuple-element(%r), index=0
  %y = f32[8,8]{1,0} get-tuple-element(%r), index=1
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,8]{1,0}) tuple(%zero, %y)
  %inner = (s32[], f32[8,8]{1,0}) while(%init), condition=%inner_cond, body=%inner_body
  %z = f32[8,8]{1,0} get-tuple-element(%inner), index=1
  %exp.1 = f32[8,8]{1,0} exponential(%z), metadata={op_type="aten__exp" op_name="aten__exp" source_file="m.py" source_line=5}
  %step = s32[] constant(1)
  %k1 = s32[] add(%k, %step)
  ROOT %u = (s32[], f32[8,8]{1,0}) tuple(%k1, %exp.1)
}

%outer_cond (s: (s32[], f32[8,8])) -> pred[] {
  %s = (s32[], f32[8,8]{1,0}) parameter(0)
  %m = s32[] get-tuple-element(%s), index=0
  %three = s32[] constant(3)
  ROOT %lt2 = pred[] compare(%m, %three), direction=LT
}

ENTRY %main (a: f32[8,8]) -> f32[8,8] {
  %a = f32[8,8]{1,0} parameter(0)
  %c0 = s32[] constant(0)
  %start = (s32[], f32[8,8]{1,0}) tuple(%c0, %a)
  %outer = (s32[], f32[8,8]{1,0}) while(%start), condition=%outer_cond, body=%outer_body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = f32[8,8]{1,0} get-tuple-element(%outer), index=1
}
"""


def test_nested_loops_multiply():
    _, loops = loops_of(NESTED)
    assert (loops["outer"].trip_count, loops["outer"].trip_count_from) == (3, "backend_config")
    assert (loops["inner"].trip_count, loops["inner"].trip_count_from) == (4, "condition")
    assert loops["inner"].parent == "outer" and loops["outer"].parent is None
    assert loops["inner"].runs == 12 and loops["outer"].runs == 3
    assert set(loops["outer"].computations) >= {"outer_body", "outer_cond", "inner_body", "inner_cond"}
    _, fmap = fmap_of(NESTED)
    assert [lp.instruction for lp in fmap.loops] == ["outer", "inner"]  # outer loops first
    by_name = {k.name: k for k in fmap.kernels}
    assert (by_name["dot.1"].runs, by_name["dot.1"].loop, by_name["dot.1"].flops) == (12, "inner", 12 * 2 * 8 * 8 * 8)
    assert (by_name["exp.1"].runs, by_name["exp.1"].loop, by_name["exp.1"].flops) == (3, "outer", 3 * 64)
    assert by_name["lt"].runs == 3 * 5  # the inner condition: 5 tests per inner loop, 3 inner loops


def test_a_loop_starting_from_changing_state_is_not_counted():
    """The inner loop starts from the outer loop's counter: a different count on each outer iteration."""
    _, loops = loops_of(NESTED.replace("%zero = s32[] constant(0)", "%zero = s32[] get-tuple-element(%r), index=0"))
    assert loops["inner"].trip_count is None and loops["inner"].runs is None
    assert loops["outer"].trip_count == 3


def test_a_not_equal_bound_is_counted():
    edited = NESTED.replace("direction=LT\n}\n\n%outer_body", "direction=NE\n}\n\n%outer_body")
    assert edited != NESTED
    _, loops = loops_of(edited)
    assert (loops["inner"].trip_count, loops["inner"].trip_count_from) == (4, "condition")
