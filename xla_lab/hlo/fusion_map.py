"""The kernels of an optimized module: what XLA fused together, from which aten ops and lines.

A kernel is a fusion, or an op XLA left unfused that does real work (dot, convolution, collectives,
custom calls, sorts, reductions...). Kernels live in the entry computation and in computations run by
control flow (while bodies, conditional branches, calls), not in fused or reducer computations.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from .cost import instruction_flops, kernel_bytes
from .loops import Loop, enclosing_loop, find_loops, runs_of
from .parser import Computation, HloModule, Instruction

CONTAINERS = {"while", "conditional", "call", "async-start", "async-done"}
NOT_KERNELS = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
               "partition-id", "replica-id", "opt-barrier", "add-dependency"} | CONTAINERS
DEVICE_DATA = "xla__device_data"  # op type of an input tensor's node (a parameter of the graph)
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
               "all-reduce-start", "all-gather-start", "collective-permute-start"}


@dataclass
class Kernel:
    name: str
    kind: str  # fusion kind ("kLoop", "kInput", "kOutput", ...) or the opcode of an unfused op
    computation: str
    members: list[str]
    aten_ops: list[str]
    # [{"cell": exec count | None, "line": int, "code": str | None}], in the order the kernel's ops
    # appear (not by cell number, which depends on how the notebook was run)
    lines: list[dict]
    sources: list[str]  # innermost Python frames ("linear.py:134"), for ops not written in a cell
    shape: str
    flops: int  # per execution of the graph: one run's estimate times ``runs``
    bytes: int
    collective: bool = False
    lines_inferred: bool = False  # no op of the kernel had a Python stack (autograd's backward ops
    # run outside Python): its lines are those of the nearest producers of its inputs that do
    # the model's own lines: the innermost frame of each op outside torch / torch_xla (a cell line, a
    # line of the user's module or of a library such as transformers), [{"cell", "file", "line",
    # "function", "code"}]; inferred like ``lines`` for backward kernels
    model_lines: list[dict] = field(default_factory=list)
    # times the kernel runs per execution of the graph: 1, or inside while loops (scan, scan_layers,
    # while_loop) the product of their trip counts (a condition's kernels run once more); None when
    # a loop's trip count is not known before it runs (flops and bytes then count one run)
    runs: int | None = 1
    loop: str | None = None  # the innermost while instruction whose body or condition runs it

    def to_dict(self) -> dict:
        # (not dataclasses.asdict: it deep-copies, and a big model has thousands of kernels)
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass
class FusionMap:
    kernels: list[Kernel] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)  # the module's while loops, outer first

    def by_line(self) -> dict[tuple, list[str]]:
        """(cell, line) -> names of the kernels that line feeds."""
        out: dict[tuple, list[str]] = {}
        for k in self.kernels:
            for ln in k.lines:
                out.setdefault((ln.get("cell"), ln["line"]), []).append(k.name)
        return out

    def mapped_share(self) -> float:
        """Share of kernels that map to at least one source line (cell line or library frame)."""
        if not self.kernels:
            return 1.0
        return sum(1 for k in self.kernels if k.lines or k.sources) / len(self.kernels)


def scheduled_computations(module: HloModule) -> list[Computation]:
    """The entry computation and those it runs through control flow (not fused / reducer bodies)."""
    return list(_callers_of_scheduled(module))


def scheduled_callers(module: HloModule) -> dict[str, tuple[Instruction, Computation] | None]:
    """Scheduled computation name -> (the instruction that runs it, its computation), None for the
    entry: the computations control flow runs, and what runs them."""
    return _callers_of_scheduled(module)


def _callers_of_scheduled(module: HloModule) -> dict[str, tuple[Instruction, Computation] | None]:
    """Scheduled computation name -> (the instruction that runs it, its computation), None for entry.
    (XLA's CPU backend wraps ops it splits across threads in ``call`` computations of their own.)"""
    out: dict[str, tuple[Instruction, Computation] | None] = {}
    todo: list[tuple[Computation, tuple[Instruction, Computation] | None]] = [(module.entry, None)]
    while todo:
        comp, caller = todo.pop()
        if comp.name in out:
            continue
        out[comp.name] = caller
        for ins in comp.instructions:
            if ins.opcode in CONTAINERS:
                todo.extend((module.computations[c], (ins, comp)) for c in ins.called if c in module.computations)
    return out


def _members(ins: Instruction, module: HloModule) -> list[Instruction]:
    if ins.opcode != "fusion":
        return [ins]
    out = []
    for name in ins.called:
        comp = module.computations.get(name)
        if comp is None:
            continue
        for m in comp.instructions:
            if m.opcode == "parameter":
                continue
            out.extend(_members(m, module) if m.opcode == "fusion" else [m])
    return out


def build_fusion_map(module: HloModule, lines_of: Callable[[Instruction], list[dict]],
                     source_of: Callable[[Instruction], str | None],
                     model_lines_of: Callable[[Instruction], list[dict]] = lambda ins: [],
                     loop_lines: dict[str, tuple[list[dict], list[dict]]] | None = None) -> FusionMap:
    """``lines_of(instruction)`` -> cell lines of that op's call stack;
    ``source_of(instruction)`` -> its innermost Python frame as "file.py:LINE";
    ``model_lines_of(instruction)`` -> the model's own lines of that op (innermost outside torch);
    ``loop_lines``: while instruction -> (cell lines, model lines) of the call that made the loop
    (``scan_layers(...)``): the lines of the loop's own work (its counter, slicing its inputs,
    stacking its outputs), whose ops carry no lines of their own."""
    loop_lines = loop_lines or {}
    fmap = FusionMap()
    callers = _callers_of_scheduled(module)
    fmap.loops = find_loops(module, callers)
    loops = {loop.instruction: loop for loop in fmap.loops}
    for comp_name, caller in callers.items():
        comp = module.computations[comp_name]
        runs = runs_of(comp_name, callers, loops) if loops else 1
        around = enclosing_loop(comp_name, callers, loops) if loops else None
        for ins in comp.instructions:
            if ins.opcode in NOT_KERNELS:
                continue
            members = _members(ins, module)
            with_metadata = [m for m in members if m.op_key] or _inherited(ins, comp)
            if not with_metadata and around is not None and around[0].instruction in loop_lines:
                # the loop's own work: the line that made the loop (not its inputs' lines)
                lines_in, model_in = loop_lines[around[0].instruction]
                fmap.kernels.append(Kernel(
                    name=ins.name, kind=ins.fusion_kind or ins.opcode, computation=comp.name,
                    members=[m.name for m in members], aten_ops=[], lines=list(lines_in), sources=[],
                    shape=str(ins.shape), flops=instruction_flops(ins, module, comp) * (runs or 1),
                    bytes=kernel_bytes(ins, comp) * (runs or 1), collective=ins.opcode in COLLECTIVES,
                    model_lines=list(model_in), runs=runs, loop=around[0].instruction))
                continue
            if not with_metadata and caller is not None:
                with_metadata = [caller[0]] if caller[0].op_key else _inherited(*caller)
            aten = sorted({_aten(m.op_key[0]) for m in with_metadata})
            lines: dict[tuple, dict] = {}
            model_lines: dict[tuple, dict] = {}
            sources: dict[str, None] = {}
            seen_sources: set = set()
            # A copy or layout change of an input (device data) carries the line where the tensor was
            # uploaded (the model's `.to(device)`), which did not ask for this work: such a kernel's lines
            # are inferred from its users below, like a backward kernel's.
            for m in [m for m in with_metadata if m.op_key[0] != DEVICE_DATA]:
                for ln in lines_of(m):
                    lines.setdefault((ln.get("cell"), ln["line"]), ln)
                for ln in model_lines_of(m):
                    model_lines.setdefault(_line_key(ln), ln)
                _, _, file, line = m.op_key
                if file and (file, line) not in seen_sources:
                    seen_sources.add((file, line))
                    src = source_of(m)
                    if src:
                        sources[src] = None
            if around is not None and around[0].instruction in loop_lines:
                # a loop body traced from code in a file (a layer, while_loop's body): the cell line is
                # the loop's call, as it is for any model in a file
                call_lines, call_model_lines = loop_lines[around[0].instruction]
                if not lines:
                    lines = {(ln.get("cell"), ln["line"]): ln for ln in call_lines}
                if not model_lines:
                    model_lines = {_line_key(ln): ln for ln in call_model_lines}
            fmap.kernels.append(Kernel(
                name=ins.name, kind=ins.fusion_kind or ins.opcode, computation=comp.name,
                members=[m.name for m in members], aten_ops=aten,
                lines=list(lines.values()),  # in the order the ops appear: stable across kernels runs
                sources=list(sources)[:8], shape=str(ins.shape),
                flops=instruction_flops(ins, module, comp) * (runs or 1), bytes=kernel_bytes(ins, comp) * (runs or 1),
                collective=ins.opcode in COLLECTIVES, model_lines=list(model_lines.values()),
                runs=runs, loop=around[0].instruction if around else None,
            ))
    _infer_missing_lines(module, fmap, lines_of, callers, "lines")
    _infer_missing_lines(module, fmap, model_lines_of, callers, "model_lines")
    return fmap


def _line_key(ln: dict) -> tuple:
    return ln.get("cell"), ln.get("file"), ln["line"]


def _infer_missing_lines(module: HloModule, fmap: FusionMap, lines_of, callers, attr: str,
                         depth: int = 6) -> None:
    """Backward ops have no Python stack; credit them to the lines that produced their inputs (the
    forward activations and weights they differentiate), breadth first through the data flow; for
    ops in a computation run by a ``call``, continue from that call's inputs. ``attr``: which of
    the kernel's line lists (cell lines or model lines) to fill."""
    by_kernel = {k.name: k for k in fmap.kernels}
    users_of: dict[str, dict] = {}
    in_comp: dict[str, list[Kernel]] = {}  # computation -> its kernels (a container's user reads them)
    for kernel in fmap.kernels:
        in_comp.setdefault(kernel.computation, []).append(kernel)

    def producer_lines(ins: Instruction) -> list[dict]:
        if ins.opcode == "parameter":  # device data: its line is where the tensor was made (the
            return []  # model's `.to(device)`), not work this kernel continues; the last resort below
        producer = by_kernel.get(ins.name)
        return getattr(producer, attr) if producer is not None else lines_of(ins)

    def input_lines(ins: Instruction) -> list[dict]:
        return producer_lines(ins) or (lines_of(ins) if ins.opcode == "parameter" else [])

    def consumer_lines(ins: Instruction) -> list[dict]:
        if ins.name in by_kernel:
            return getattr(by_kernel[ins.name], attr)
        if ins.opcode in CONTAINERS:  # a call / while: the lines of the kernels it runs
            return [ln for c in ins.called for kern in in_comp.get(c, []) for ln in getattr(kern, attr)]
        return lines_of(ins)

    for k in fmap.kernels:
        if getattr(k, attr):
            continue
        comp = module.computations.get(k.computation)
        if comp is None:
            continue
        start = comp.by_name[k.name]
        while all(comp.by_name[o].opcode == "parameter" for o in start.operands if o in comp.by_name) \
                and callers.get(comp.name) is not None:
            start, comp = callers[comp.name]  # the inputs come from the caller's operands
            if lines_of(start):
                break
        first = [start.name] if start.name != k.name else list(start.operands)
        found = _nearest_lines(comp, first, {k.name}, producer_lines, lambda ins: ins.operands, depth)
        # Nothing upstream (an iota; a layout change of an input made where no line is known, such
        # as a precompile job's copy of the state): credit what uses it, in its own computation, then
        # from the instruction that runs that computation.
        for where, name in ((module.computations.get(k.computation), k.name), (comp, start.name)):
            if found or where is None:
                continue
            if where.name not in users_of:
                users_of[where.name] = _users(where)
            users = users_of[where.name]
            found = _nearest_lines(where, users.get(name, []), {name}, consumer_lines,
                                   lambda ins, users=users: users.get(ins.name, []), depth)
        if not found:  # only device data upstream and no user with a line: where the inputs were made
            found = _nearest_lines(comp, first, {k.name}, input_lines, lambda ins: ins.operands, depth)
        if found:
            setattr(k, attr, list(found.values()))
            if attr == "lines":
                k.lines_inferred = True


def _users(comp: Computation) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for ins in comp.instructions:
        for o in ins.operands:
            users.setdefault(o, []).append(ins.name)
    return users


def _nearest_lines(comp: Computation, frontier: list[str], seen: set[str], lines_at, next_of,
                   depth: int) -> dict:
    """Breadth first from ``frontier`` through ``next_of(instruction)`` (operands or users), at most
    ``depth`` steps: the lines ``lines_at(instruction)`` gives at the nearest level that has any."""
    found: dict[tuple, dict] = {}
    for _ in range(depth):
        nxt = []
        for name in frontier:
            if name in seen or name not in comp.by_name:
                continue
            seen.add(name)
            ins = comp.by_name[name]
            lines = lines_at(ins)
            if lines:
                for ln in lines:
                    found.setdefault(_line_key(ln), ln)
            else:
                nxt.extend(next_of(ins))
        if found:
            break
        frontier = nxt
    return found


def _inherited(ins: Instruction, comp: Computation) -> list[Instruction]:
    """Ops XLA inserted (copies for aliasing, layout changes) carry no metadata: credit them to the
    nearest operands that do."""
    seen, frontier = set(), list(ins.operands)
    for _ in range(4):
        found = [comp.by_name[o] for o in frontier if o in comp.by_name and comp.by_name[o].op_key]
        if found:
            return found
        nxt = []
        for o in frontier:
            if o in comp.by_name and o not in seen:
                seen.add(o)
                nxt.extend(comp.by_name[o].operands)
        frontier = nxt
    return []


@functools.lru_cache(maxsize=4096)
def _aten(op_type: str) -> str:
    ns, sep, name = op_type.partition("__")
    return f"{ns}::{name}" if sep else op_type
