"""The while loops of an optimized module: how many times each body runs, and which computations
run inside which loop.

``torch_xla.experimental.scan`` / ``scan_layers`` and ``torch._higher_order_ops.while_loop`` (torch_xla's
``fori_loop.py``) lower to one HLO ``while``: its body's kernels run once per iteration, so their work
counts trip-count times per execution of the graph. The trip count is read where XLA wrote it
(``backend_config={"known_trip_count":{"n":"5"}, ...}`` from ``while-loop-trip-count-annotator``, or
the older ``known_trip_count={n=5}``); failing that, from the loop itself: a condition comparing an
induction variable (a tuple element the body steps by a constant) against a constant, from an
initial value that is a constant. A loop whose bound is an input of the graph (a counter tensor
uploaded from Python) has no static trip count: ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .parser import Computation, HloModule, Instruction

_KNOWN_TRIP = re.compile(r'known_trip_count"?\s*[:=]\s*\{\s*"?n"?\s*[:=]\s*"?(\d+)')
_LOOK_THROUGH = {"copy", "convert", "bitcast", "reshape"}
MAX_SIMULATED = 1_000_000  # iterations stepped through to count a loop from its condition


@dataclass
class Loop:
    instruction: str  # the ``while`` instruction
    computation: str  # the computation it sits in
    body: str
    condition: str
    trip_count: int | None  # iterations per run of the while (None: not known before it runs)
    trip_count_from: str | None  # "backend_config" | "condition" | None
    parent: str | None = None  # the while whose body (transitively) runs this one
    runs: int | None = None  # body runs per execution of the graph: trip counts of it and its parents
    computations: list[str] = field(default_factory=list)  # body and condition, and what they call


def trip_count(ins: Instruction, comp: Computation, module: HloModule,
               callers=None) -> tuple[int | None, str | None]:
    """(trip count, where it came from) of the ``while`` instruction ``ins`` of ``comp``."""
    m = _KNOWN_TRIP.search(ins.attributes.get("backend_config", "") or "")
    if m is None:  # (a text without backend_config may print it as its own attribute)
        m = _KNOWN_TRIP.search(ins.attributes.get("known_trip_count", "") and
                               "known_trip_count=" + ins.attributes["known_trip_count"])
    if m is not None:
        return int(m.group(1)), "backend_config"
    counted = _count_from_condition(ins, comp, module, callers or {})
    return (counted, "condition") if counted is not None else (None, None)


def find_loops(module: HloModule, callers: dict[str, tuple[Instruction, Computation] | None]) -> list[Loop]:
    """Every ``while`` in the scheduled computations (``callers``: computation -> the instruction
    that runs it and its computation, None for the entry, as ``fusion_map`` builds it), outer loops
    first, each with its trip count, parent loop and the computations it runs."""
    loops: dict[str, Loop] = {}
    for comp_name in callers:
        comp = module.computations.get(comp_name)
        if comp is None:
            continue
        for ins in comp.instructions:
            if ins.opcode != "while":
                continue
            body = ins.attributes.get("body", "").lstrip("%")
            condition = ins.attributes.get("condition", "").lstrip("%")
            count, source = trip_count(ins, comp, module, callers)
            loops[ins.name] = Loop(ins.name, comp.name, body, condition, count, source)
    for loop in loops.values():
        loop.computations = [c for c in callers if _runs_under(c, loop, callers)]
        parent = enclosing_loop(loop.computation, callers, loops)
        loop.parent = parent[0].instruction if parent else None
    for loop in loops.values():
        loop.runs = runs_of(loop.body, callers, loops)
    depth = {name: _depth(name, loops) for name in loops}
    return sorted(loops.values(), key=lambda lp: depth[lp.instruction])


def _loops_around(comp_name: str, callers, loops: dict[str, Loop]):
    """(loop, the computation of it that runs ``comp_name``: its body or condition), innermost first,
    walking up the calls."""
    name = comp_name
    seen = set()
    while name not in seen:
        seen.add(name)
        caller = callers.get(name)
        if caller is None:
            return
        ins, comp = caller
        if ins.opcode == "while" and ins.name in loops:
            yield loops[ins.name], name
        name = comp.name


def runs_of(comp_name: str, callers, loops: dict[str, Loop]) -> int | None:
    """Times ``comp_name`` runs per execution of the graph: the product over the loops around it of
    their trip counts (plus one for a condition, which runs once more than its body); None when
    one of them is unknown."""
    runs = 1
    for loop, name in _loops_around(comp_name, callers, loops):
        if loop.trip_count is None:
            return None
        runs *= loop.trip_count + 1 if name == loop.condition and name != loop.body else loop.trip_count
    return runs


def enclosing_loop(comp_name: str, callers, loops: dict[str, Loop]) -> tuple[Loop, str] | None:
    """The innermost loop whose body or condition runs ``comp_name`` (directly or through calls),
    and which of the two it is ("body" / "condition"); None outside loops."""
    for loop, name in _loops_around(comp_name, callers, loops):
        return loop, "body" if name == loop.body else "condition"
    return None


def _runs_under(comp_name: str, loop: Loop, callers) -> bool:
    name, seen = comp_name, set()
    while name not in seen:
        seen.add(name)
        caller = callers.get(name)
        if caller is None:
            return False
        if caller[0].name == loop.instruction and caller[1].name == loop.computation:
            return True
        name = caller[1].name
    return False


def _depth(name: str, loops: dict[str, Loop]) -> int:
    depth, seen = 0, set()
    while name in loops and loops[name].parent and name not in seen:
        seen.add(name)
        name = loops[name].parent
        depth += 1
    return depth


# --- counting a loop from its condition ----------------------------------------------------------
_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}
_TEST = {"LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
         "GE": lambda a, b: a >= b, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b}


def _count_from_condition(ins: Instruction, caller_comp: Computation, module: HloModule, callers) -> int | None:
    cond = module.computations.get(ins.attributes.get("condition", "").lstrip("%"))
    body = module.computations.get(ins.attributes.get("body", "").lstrip("%"))
    if cond is None or body is None or not ins.operands:
        return None
    test = _compare_of(cond.root, cond, module)
    if test is None:
        return None
    index, direction, bound = test
    step = _step_of(body, index)
    if step is None or step == 0:
        return None
    init = _tuple_element(ins.operands[0], index, caller_comp, module, callers)
    if init is None:
        return None
    check = _TEST[direction]
    count, value = 0, init
    while check(value, bound):
        value += step
        count += 1
        if count > MAX_SIMULATED:
            return None
    return count


def _compare_of(root: Instruction, comp: Computation, module: HloModule, fused: bool = False):
    """(tuple index of the induction variable, direction with it on the left, constant bound) of a
    condition whose root is a compare (or a fusion of one) of a parameter's tuple element and a
    constant; None otherwise. ``fused``: ``comp`` is a fused computation, whose variable is one of
    its parameters (the index returned is that parameter's number)."""
    if root.opcode == "fusion" and not fused:  # the compare is inside: map its parameter to the operand
        inner_comp = module.computations.get(root.called[0]) if root.called else None
        inner = _compare_of(inner_comp.root, inner_comp, module, fused=True) if inner_comp else None
        if inner is None or not 0 <= inner[0] < len(root.operands):
            return None
        index = _gte_index(root.operands[inner[0]], comp)
        return None if index is None else (index, inner[1], inner[2])
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    direction = root.attributes.get("direction")
    if direction not in _TEST:
        return None
    lhs, rhs = root.operands
    for var, const, d in ((lhs, rhs, direction), (rhs, lhs, _FLIP[direction])):
        bound = _constant(const, comp)
        if bound is None:
            continue
        if fused:
            ins = _through(var, comp)
            index = _param_number(ins) if ins is not None and ins.opcode == "parameter" else None
        else:
            index = _gte_index(var, comp)
        if index is not None:
            return index, d, bound
    return None


def _step_of(body: Computation, index: int) -> int | None:
    """The constant the body adds to tuple element ``index`` each iteration."""
    root = body.root
    if root.opcode != "tuple" or index >= len(root.operands):
        return None
    new = _through(root.operands[index], body)
    if new is None or new.opcode not in ("add", "subtract") or len(new.operands) != 2:
        return None
    a, b = new.operands
    for var, const, sign in ((a, b, 1), (b, a, 1 if new.opcode == "add" else None)):
        if sign is None:
            continue
        step = _constant(const, body)
        if step is not None and _gte_index(var, body) == index:
            return step * (1 if new.opcode == "add" else -1)
    return None


def _tuple_element(name: str, index: int, comp: Computation, module: HloModule, callers, depth: int = 8):
    """The constant value of element ``index`` of the tuple ``name`` in ``comp``, following a
    computation's parameter to the operand its caller passed."""
    ins = _through(name, comp)
    if ins is None or depth <= 0:
        return None
    if ins.opcode == "tuple" and index < len(ins.operands):
        return _constant(ins.operands[index], comp, module, callers, depth - 1)
    if ins.opcode == "parameter":  # a called computation's parameter is what its call passed (a while
        caller = _call_of(comp, callers)  # body's is the carried state: not followed)
        number = _param_number(ins)
        if caller is None or number is None or number >= len(caller[0].operands):
            return None
        return _tuple_element(caller[0].operands[number], index, caller[1], module, callers, depth - 1)
    return None


def _constant(name: str, comp: Computation, module: HloModule | None = None, callers=None,
              depth: int = 8) -> int | None:
    ins = _through(name, comp)
    if ins is None:
        return None
    if ins.opcode == "constant" and ins.shape.dims == () and ins.literal is not None:
        try:
            return int(float(ins.literal))
        except ValueError:
            return None
    if ins.opcode == "parameter" and module is not None and depth > 0:
        caller = _call_of(comp, callers or {})
        number = _param_number(ins)
        if caller is not None and number is not None and number < len(caller[0].operands):
            return _constant(caller[0].operands[number], caller[1], module, callers, depth - 1)
    if ins.opcode == "get-tuple-element" and module is not None and ins.operands:
        index = _index(ins)
        if index is not None:
            return _tuple_element(ins.operands[0], index, comp, module, callers or {}, depth - 1)
    return None


def _call_of(comp: Computation, callers):
    caller = callers.get(comp.name)
    return caller if caller is not None and caller[0].opcode == "call" else None


def _through(name: str, comp: Computation) -> Instruction | None:
    ins = comp.by_name.get(name)
    for _ in range(8):
        if ins is None or ins.opcode not in _LOOK_THROUGH or not ins.operands:
            return ins
        ins = comp.by_name.get(ins.operands[0])
    return ins


def _gte_index(name: str, comp: Computation) -> int | None:
    ins = _through(name, comp)
    if ins is None or ins.opcode != "get-tuple-element" or not ins.operands:
        return None
    source = _through(ins.operands[0], comp)
    if source is None or source.opcode != "parameter":
        return None
    return _index(ins)


def _index(ins: Instruction) -> int | None:
    try:
        return int(ins.attributes.get("index", ""))
    except ValueError:
        return None


def _param_number(ins: Instruction) -> int | None:
    try:
        return int(ins.literal or "")
    except ValueError:
        return None
