"""Turn one compile's dump into answers, once per graph: the fusion map, memory, the graph signature.

Source lines: every op's full Python stack comes from the binary dump (``hlo/proto_frames.py``);
the first frame in a notebook cell gives the *cell line* shown to the user (``{"cell": 5, "line": 3,
"code": "loss = model(x).sum()"}``), the innermost frame the library location ("linear.py:134").
"""

from __future__ import annotations

import functools
import gc
import os
import re
from typing import Any, Callable

from xla_lab.hlo.constants import large_constants
from xla_lab.hlo.fusion_map import FusionMap, build_fusion_map, scheduled_callers
from xla_lab.hlo.loops import find_loops
from xla_lab.hlo.lazy_graph import IrNode, nodes_from_module
from xla_lab.hlo.memory import memory_summary
from xla_lab.hlo.node_kernels import node_kernels
from xla_lab.hlo.parser import HloModule, HloParseError, parse_module
from xla_lab.hlo.proto_frames import ProtoError, PyFrame, instruction_stacks
from xla_lab.hlo.signature import graph_signature
from xla_lab.hlo.sharding import ShardingParseError, spmd_summary

from .frames import frame_code, import_path, is_internal
from .ir_graph import format_ir_text
from .subgraphs import repair_stacks
from .source_ref import ref_text, ref_with_code
from .records import GraphArtifacts


class CellFiles:
    """Which source files are notebook cells, and their execution counts."""

    def __init__(self, files: dict[str, int | None] | None = None):
        self.files = dict(files or {})

    @classmethod
    def from_shell(cls, shell, current_file: str | None, current_count: int | None) -> "CellFiles":
        files: dict[str, int | None] = {}
        try:
            files.update(shell.compile._filename_map)  # IPython's own map: file -> In[N]
        except AttributeError:
            pass
        if current_file:
            files[current_file] = current_count
        return cls(files)

    def line(self, stack: list[PyFrame]) -> dict | None:
        """The innermost frame of the stack that is in a notebook cell."""
        for frame in stack:
            if frame.file in self.files:
                return {"cell": self.files[frame.file], "line": frame.line, "code": frame_code(frame)}
        return None

    def model_line(self, stack: list[PyFrame]) -> dict | None:
        """The model's own line: the innermost frame outside torch, torch_xla and Python's standard
        library, in a cell (``{"cell", "line", "code"}``) or in a file (``{"file", "line",
        "function", "code"}``, the path as imported, e.g. ``transformers/models/bert/modeling_bert.py``)."""
        for frame in stack:
            if frame.file in self.files:
                return self.line([frame])
            if not is_internal(frame.file):
                return {"cell": None, "file": import_path(frame.file), "line": frame.line,
                        "function": frame.function, "code": frame_code(frame)}
        return None


LEAN_BEFORE = ("(lean capture: XLA's dump is off, so the graph before optimization was not recorded; the lazy "
               "graph, baked-in constants and exact recompile reasons come from it. To see them, run the cell "
               "in full capture: restart the kernel and leave out `%xla mode lean` / XLA_LAB_CAPTURE=lean)")


def analyze(art: GraphArtifacts, proto_before: bytes | None, cells: CellFiles, *,
            proto_after: bytes | None = None, allocations: list | None = None) -> list[str]:
    """Fill ``art.fusions``, ``art.memory``, ``art.signature``, ``art.large_constants``, ``art.spmd``,
    ``art.node_info`` and (unless torch_xla's own IR text is there) ``art.ir_text`` rebuilt from the
    HLO. Returns problems worth a note.

    Call stacks are read from the pre-optimization proto only (small; the optimized one of a large
    model is 10x bigger and slow to decode in Python). Optimized instructions keep their op's
    metadata, so they are matched back to the pre-optimization ops with the same aten op, innermost
    frame and dimensions; where several such ops came from different cell lines, the kernel lists
    them all.
    """
    # A large model's analysis builds a few hundred thousand small objects; the garbage collector
    # would rescan them again and again (a third of the time) though nothing here makes cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if proto_after is not None:
            return _analyze_lean(art, proto_after, allocations, cells)
        return _analyze(art, proto_before, cells)
    finally:
        if was_enabled:
            gc.enable()


def _analyze(art: GraphArtifacts, proto_before: bytes | None, cells: CellFiles) -> list[str]:
    problems: list[str] = []
    after = _parse(art.hlo_after, "optimized HLO", problems)
    before = _parse(art.hlo_before, "HLO before optimization", problems)
    stacks_before = _stacks(proto_before, problems)
    if before is not None and stacks_before:
        # loop bodies' stacks point into frame tables the graph lost; replayed fx code names its source
        stacks_before = repair_stacks(before, stacks_before)

    cell_line = per_stack(cells.line)  # (ops share stacks, and several views ask for the same ones)

    def first_line(name: str) -> dict | None:
        return cell_line(stacks_before.get(name, _NO_STACK))

    if after is not None:
        by_key = _lines_by_key(before, stacks_before, cell_line, cells.model_line) if before is not None else ({}, {})
        lines_of, model_lines_of = map(_matcher, by_key)
        calls = loop_calls(after, before, stacks_before, cells)
        fmap = build_fusion_map(after, lines_of, _innermost, model_lines_of,
                                loop_lines={w: (c["lines"], c["model_lines"]) for w, c in calls.items()})
        art.fusions = [k.to_dict() for k in fmap.kernels]
        art.loops = loop_records(fmap, after, calls)
        art.memory = memory_summary(art.memory_report, art.buffer_assignment,
                                    source_of=lambda name: _source(after, name, lines_of))


    if before is not None:
        nodes = nodes_from_module(before)
        if art.ir_source != "lazy-ir":  # torch_xla's own IR text (IR log on) is preferred
            art.ir_text = format_ir_text(nodes)
            art.ir_source = "hlo-before"
        traced = []
        for n in nodes:
            where = next((ln for ln in map(first_line, n.hlo) if ln), None)
            traced.append({"op": n.op, "shape": n.shape, "where": ref_with_code(where) if where else n.location})

        def where_of(ins) -> str | None:
            ln = first_line(ins.name)
            return ref_with_code(ln) if ln else (_short(ins.source) if ins.source else None)

        art.signature = graph_signature(before, traced, where_of)
        art.large_constants = [{"instruction": ins.name, "shape": ins.shape_text, "bytes": ins.shape.byte_size,
                                "where": where_of(ins)} for ins in large_constants(before)]
        if after is not None and art.fusions is not None and art.ir_source == "hlo-before":
            art.node_info = node_info(nodes, before, after, art.fusions, stacks_before, cells)
    try:
        art.spmd = spmd_summary(before, after, art.fusions, lambda ins: first_line(ins.name))
    except ShardingParseError as exc:
        problems.append(f"could not read the graph's shardings: {exc}")
    return problems


def analyze_module(art: GraphArtifacts, module, cells: CellFiles) -> list[str]:
    """``analyze`` on what a compile left: XLA's dump (full capture), or the optimized module a profiler
    session recorded (lean capture: its text is printed first)."""
    if module.module_proto is not None:
        module.ensure_text()
        art.hlo_after = module.hlo_after
        return analyze(art, None, cells, proto_after=module.module_proto, allocations=module.allocations)
    return analyze(art, module.proto_before, cells)


def _analyze_lean(art: GraphArtifacts, proto_after: bytes, allocations: list | None, cells: CellFiles) -> list[str]:
    """Lean capture: the same analysis from the optimized module alone. Its instructions carry their own
    call stacks (the profiler's ``HloProto`` keeps the frame table), so kernels are matched to lines
    within the module; the signature for recompile reasons is the optimized module's (``optimized_signature``)."""
    from xla_lab.hlo.hlo_proto import with_shapes

    problems: list[str] = []
    art.lean = True
    art.hlo_before = LEAN_BEFORE
    art.ir_text = art.ir_source = art.node_info = art.large_constants = None
    after = _parse(art.hlo_after, "optimized HLO", problems)
    stacks = _stacks(proto_after, problems)
    if after is None:
        return problems
    if stacks:
        stacks = repair_stacks(after, stacks)
    cell_line = per_stack(cells.line)  # (the signature's places below ask again, for the same stacks)
    by_key = _lines_by_key(after, stacks, cell_line, cells.model_line)
    lines_of, model_lines_of = map(_matcher, by_key)
    calls = loop_calls(after, after, stacks, cells)
    fmap = build_fusion_map(after, lines_of, _innermost, model_lines_of,
                            loop_lines={w: (c["lines"], c["model_lines"]) for w, c in calls.items()})
    art.fusions = [k.to_dict() for k in fmap.kernels]
    art.loops = loop_records(fmap, after, calls)
    names = {ins.name: ins for ins in after.instructions()}
    shape_of = lambda name: names[name].shape_text if name in names else None  # noqa: E731
    art.memory = memory_summary(None, None, source_of=lambda name: _source(after, name, lines_of),
                                allocations=with_shapes(allocations, shape_of) if allocations is not None else None)

    cell_ref = per_stack(lambda stack: ref_with_code(ln) if (ln := cell_line(stack)) else None)

    def where_of(ins) -> str | None:
        return cell_ref(stacks.get(ins.name, _NO_STACK)) or (_short(ins.source) if ins.source else None)

    art.signature = optimized_signature(after, where_of)
    try:
        art.spmd = spmd_summary(None, after, art.fusions, lambda ins: cell_line(stacks.get(ins.name, _NO_STACK)))
    except ShardingParseError as exc:
        problems.append(f"could not read the graph's shardings: {exc}")
    return problems


def optimized_signature(after: HloModule, where_of) -> dict:
    """A signature (``hlo/signature.py``) read from the optimized module, for lean capture: its entry
    parameters (XLA keeps their order and shapes), the scalar constants of every computation that came
    from traced code (an op type in their metadata: fusion may have moved them into a kernel), the
    traced ops left after optimization, in order, and the outputs. ``"source": "optimized"`` says so."""
    constants, nodes = [], []
    for ins in after.instructions():
        op = ins.op_type
        if ins.opcode == "constant" and op and not ins.shape.is_tuple and ins.shape.elements <= 1:
            constants.append({"value": ins.literal, "shape": str(ins.shape), "op": _aten(op), "where": where_of(ins)})
        elif op and ins.opcode not in ("parameter", "constant"):
            nodes.append({"op": _aten(op), "shape": str(ins.shape), "where": where_of(ins)})
    signature = graph_signature(after, nodes, where_of)  # (its inputs and outputs; the constants are these)
    signature.update(constants=constants, source="optimized")
    return signature


def _aten(op_type: str) -> str:
    ns, sep, name = op_type.partition("__")
    return f"{ns}::{name}" if sep else op_type


def loop_calls(after: HloModule, before: HloModule | None, stacks: dict[str, list[PyFrame]],
               cells: CellFiles) -> dict[str, dict]:
    """Optimized while instruction -> where the loop was called: ``{"lines", "model_lines",
    "backward"}`` (the cell line and the model's line of the ``scan_layers(...)`` / ``while_loop(...)``
    call; ``backward``: the loop is a scan's backward pass, which autograd runs).

    Read before optimization (a loop's own instructions, built by ``xla_builder``, carry no stack):
    from the instruction that runs the loop's computation; a scan's backward runs on autograd's
    thread, whose stack holds no line of the model, so its call is read from the stacks its body's
    ops were traced with (the scan's function was traced inside the call): the frames outside
    torch_xla's scan."""
    callers_after = scheduled_callers(after)
    loops = find_loops(after, callers_after)
    if not loops or before is None:
        return {}
    befores = _whiles(before)
    callers = scheduled_callers(before)
    out = {}
    for i, loop in enumerate(loops):
        match = _matching_while(loop.body, befores, i if len(befores) == len(loops) else None)
        if match is None:
            continue
        stack = _caller_stack(match, callers, stacks)
        backward = any(f.function == "backward" and _is_scan_file(f.file) for f in stack)
        line, model = (cells.line(stack), cells.model_line(stack)) if stack else (None, None)
        if line is None and model is None:
            outside = _outside_scan(match[0], before, callers, stacks)
            line, model = (cells.line(outside), cells.model_line(outside)) if outside else (None, None)
        out[loop.instruction] = {"lines": [line] if line else [], "model_lines": [model] if model else [],
                                 "backward": backward}
    return out


def loop_records(fmap: FusionMap, after: HloModule, calls: dict[str, dict]) -> list[dict]:
    """The graph's while loops (``GraphArtifacts.loops``): the while instruction, its trip count, body
    and condition, the kernels it runs and the line that called it (``loop_calls``)."""
    out = []
    for loop in fmap.loops:
        ins = after.computations[loop.computation].by_name[loop.instruction]
        inside = set(loop.computations)
        call = calls.get(loop.instruction) or {"lines": [], "model_lines": [], "backward": False}
        out.append({"instruction": loop.instruction, "computation": loop.computation, "body": loop.body,
                    "condition": loop.condition, "trip_count": loop.trip_count,
                    "trip_count_from": loop.trip_count_from, "runs": loop.runs, "parent": loop.parent,
                    "op": ins.metadata.get("op_name"), "backward": call["backward"],
                    "kernels": [k.name for k in fmap.kernels if k.computation in inside],
                    "lines": call["lines"], "model_lines": call["model_lines"]})
    return out


_CLONE = re.compile(r"(\.clone(\.\d+)?)+$")


def _whiles(module: HloModule) -> list[tuple]:
    return [(ins, comp) for comp in module.computations.values() for ins in comp.instructions if ins.opcode == "while"]


def _matching_while(body: str, befores: list[tuple], index: int | None):
    """The while before optimization that became the optimized one with body ``body`` (XLA keeps the
    body's name, cloned or widened: ``Body.52`` -> ``wide.Body.52.clone``), else the one at the same
    position."""
    base = _CLONE.sub("", body.removeprefix("wide."))
    for ins, comp in befores:
        if ins.attributes.get("body", "").lstrip("%") == base:
            return ins, comp
    return befores[index] if index is not None else None


def _caller_stack(match: tuple, callers: dict, stacks: dict[str, list[PyFrame]]) -> list[PyFrame]:
    """The stack of the while, else of the nearest instruction that runs its computation."""
    ins, comp = match
    seen = set()
    while ins is not None and ins.name not in seen:
        seen.add(ins.name)
        if stacks.get(ins.name):
            return stacks[ins.name]
        caller = callers.get(comp.name)
        if caller is None:
            return []
        ins, comp = caller
    return []


def _is_scan_file(file: str) -> bool:
    return "torch_xla/experimental/scan" in file.replace(os.sep, "/")


def _outside_scan(loop, before: HloModule, callers: dict, stacks: dict[str, list[PyFrame]]) -> list[PyFrame]:
    """The stack from the call of torch_xla's scan outwards, read from an op of the loop's body
    (traced inside that call): the model's frames outside the innermost frame of scan's files."""
    for comp_name, caller in callers.items():
        inside, name, seen = False, comp_name, set()
        while caller is not None and name not in seen:  # does this computation run under the loop?
            seen.add(name)
            if caller[0] is loop:
                inside = True
                break
            name = caller[1].name
            caller = callers.get(name)
        if not inside:
            continue
        for ins in before.computations[comp_name].instructions:
            stack = stacks.get(ins.name) or []
            first = next((i for i, f in enumerate(stack) if _is_scan_file(f.file)), None)
            if first is None:
                continue
            call = next((j for j in range(first + 1, len(stack)) if not is_internal(stack[j].file)), None)
            if call is not None:
                return stack[call:]
    return []


# Frames of torch's module call machinery: they say nothing about where in the model an op is.
_PLUMBING = {("module.py", "_call_impl"), ("module.py", "_wrapped_call_impl")}
SCOPE_SEPARATOR = " > "
AUTOGRAD = "autograd" + SCOPE_SEPARATOR  # scope prefix of backward ops (scoped by the values they read)


def node_info(nodes: list[IrNode], before: HloModule, after: HloModule, kernels: list[dict],
              stacks: dict[str, list[PyFrame]], cells: CellFiles) -> dict:
    """Per node of the rebuilt graph (``ids``: the node ids, in the order of the other lists): the
    kernel it ended in (``hlo/node_kernels.py``), its scope (the library frames between the cell line
    and the op, outermost first, e.g. ``transformer.py:forward > transformer.py:_sa_block >
    activation.py:forward``: what a large graph collapses by) and its cell line. Scopes and lines are
    stored once and referred to by index."""
    scopes: dict[str, int] = {}
    lines: dict[tuple, int] = {}
    by_stack: dict[int, str | None] = {}
    scope_of, line_of = [], []
    cell_names = {os.path.basename(f) for f in cells.files if f}
    for n in nodes:
        stack = next((stacks[m] for m in n.hlo if stacks.get(m)), None)
        scope = None
        if stack is not None:
            key = id(stack)
            if key not in by_stack:
                by_stack[key] = _scope(stack, cells)
            scope = by_stack[key]
        elif n.location and n.location.rsplit(":", 1)[0] not in cell_names:
            scope = n.location  # no call stack: the op's innermost frame, from its metadata
        scope_of.append(scopes.setdefault(scope, len(scopes)) if scope else -1)
        ln = cells.line(stack) if stack else None
        if ln:
            line_of.append(lines.setdefault((ln["cell"], ln["line"], ln["code"]), len(lines)))
        else:
            line_of.append(-1)
    # Autograd's backward ops run without a Python stack: scope them under the forward op whose
    # values they read (nearest operand with a scope, operands first), marked as such.
    position = {n.id: i for i, n in enumerate(nodes)}
    names = list(scopes)
    for i, n in enumerate(nodes):
        if scope_of[i] >= 0 or line_of[i] >= 0 or n.is_input:
            continue
        frontier, seen, found = [position[o] for o in n.operands if o in position], set(), None
        for _ in range(4):
            nxt = []
            for j in frontier:
                if j in seen or nodes[j].is_input:
                    continue
                seen.add(j)
                if scope_of[j] >= 0:
                    found = names[scope_of[j]]
                    break
                nxt.extend(position[o] for o in nodes[j].operands if o in position)
            if found or not nxt:
                break
            frontier = nxt
        if found:
            scope = found if found.startswith(AUTOGRAD) else AUTOGRAD + found
            if scope not in scopes:
                scopes[scope] = len(scopes)
                names.append(scope)
            scope_of[i] = scopes[scope]
    return {"ids": [n.id for n in nodes], "kernel": node_kernels(nodes, before, after, kernels),
            "scope": scope_of, "scopes": names, "line": line_of,
            "lines": [{"cell": c, "line": l, "code": code} for c, l, code in lines]}


def _scope(stack: list[PyFrame], cells: CellFiles, limit: int = 8) -> str | None:
    parts = []
    for frame in stack:  # innermost first
        if frame.file in cells.files:
            break
        base = os.path.basename(frame.file)
        if (base, frame.function) not in _PLUMBING:
            parts.append(f"{base}:{frame.function}")
    else:
        parts = parts[:3]  # no cell frame: the stack runs into the interpreter's own frames
    return SCOPE_SEPARATOR.join(reversed(parts[:limit])) or None


def _key(ins) -> tuple | None:
    key = ins.op_key
    if key is None:
        return None
    return key[0], key[2], key[3], ins.shape.dims


_NO_STACK: list[PyFrame] = []
_UNSEEN = object()


def per_stack(fn: Callable[[list[PyFrame]], Any]) -> Callable[[list[PyFrame]], Any]:
    """``fn`` called once per distinct stack of one analysis: a module's ops share a few dozen stack
    lists (``proto_frames``), which the analysis's stacks dict keeps alive, so their ids stay theirs
    while it runs (not across analyses: lists die and ids return)."""
    seen: dict[int, Any] = {}

    def once(stack: list[PyFrame]) -> Any:
        got = seen.get(id(stack), _UNSEEN)
        if got is _UNSEEN:
            got = seen[id(stack)] = fn(stack)
        return got
    return once


def _lines_by_key(before: HloModule, stacks: dict[str, list[PyFrame]], *line_of) -> tuple[dict, ...]:
    """For each function in ``line_of``: (aten op, innermost file, line[, dims]) -> the lines
    ``line_of(stack)`` gives for the pre-optimization ops with that key (one pass over the module)."""
    out: list[dict[tuple, dict[tuple, dict]]] = [{} for _ in line_of]
    lines = per_stack(lambda stack: [fn(stack) for fn in line_of])  # (ops share stacks: look each up once)
    for ins in before.instructions():
        key = _key(ins)
        if key is None:
            continue
        for table, ln in zip(out, lines(stacks.get(ins.name, _NO_STACK))):
            for k in (key, key[:3]):
                bucket = table.setdefault(k, {})
                if ln:
                    bucket.setdefault((ln.get("cell"), ln.get("file"), ln["line"]), ln)
    return tuple({k: list(v.values()) for k, v in table.items()} for table in out)


def _matcher(lines_by_key: dict):
    """Lines of an optimized instruction, matched to the pre-optimization ops by key."""
    def lines_of(ins) -> list[dict]:
        key = _key(ins)
        if key is None:
            return []
        # XLA may reshape an op while optimizing: fall back to matching without dimensions.
        return lines_by_key.get(key) or lines_by_key.get(key[:3], [])
    return lines_of


def _innermost(ins) -> str | None:
    return _short(ins.source) if ins.source else None


@functools.lru_cache(maxsize=4096)
def _short(source: tuple[str, int]) -> str:
    return ref_text({"cell": None, "file": source[0], "line": source[1]})


def _source(module: HloModule, name: str, lines_of) -> dict | None:
    try:
        ins = module.instruction(name)
    except KeyError:
        return None
    lines = lines_of(ins)
    if lines:
        return lines[0]
    if ins.source:
        return {"cell": None, "line": ins.source[1], "file": os.path.basename(ins.source[0]), "code": None}
    return None


def _parse(text: str | None, what: str, problems: list[str]) -> HloModule | None:
    if not text:
        return None
    try:
        return parse_module(text)
    except HloParseError as exc:
        problems.append(f"could not read the {what}: {exc}")
        return None


def _stacks(data: bytes | None, problems: list[str]) -> dict[str, list[PyFrame]]:
    if not data:
        return {}
    try:
        return instruction_stacks(data)
    except ProtoError as exc:
        problems.append(f"could not read call stacks from XLA's binary dump: {exc}")
        return {}
