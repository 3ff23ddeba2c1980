"""The code torch_xla traces into computations of their own (the bodies of ``scan``, ``scan_layers``,
``while_loop`` and ``fori_loop``), and the call stacks their ops lose on the way into the graph.

Two things lose them (torch_xla 2.8 / 2.9):

1. A loop's body is lowered by a ``LoweringContext`` of its own and imported into the graph with
   ``xla_builder.computation_from_module_proto``. The imported instructions keep their
   ``stack_frame_id`` but not the frame table it points into, so in the graph's module they point at
   unrelated frames of the outer graph (a scanned layer's matmul read as the line that uploaded a
   weight). The sub-module's own proto is recorded here as it is imported, and its instructions are
   matched to the graph's by name: importing renumbers every instruction of a computation by the
   same offset (``dot.14`` -> ``dot.107``).
2. ``scan`` traces the scanned function with AOTAutograd and replays the forward and backward fx
   graphs inside the loop, so the ops' Python frames are the generated code (``<eval_with_key>.4``),
   not the layer's ``forward``; ``while_loop`` replays the graphs dynamo traced. An fx node keeps the
   stack it was traced from in ``node.meta["stack_trace"]`` (dynamo writes it; for ``scan`` the
   tracing runs under ``_ModelStacks`` here, which writes the stack of each torch call the
   function makes, and hands it to the autograd nodes the call makes, so AOTAutograd copies it
   onto the backward graph's nodes). Each
   generated graph's line -> node table is recorded when torch.fx compiles it, and a generated
   frame is replaced by the node's stack when an op's stack is read.

``install()`` puts the hooks in place (once per process); ``repair_stacks`` applies both to the call
stacks of a graph's pre-optimization module.
"""

from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict

from xla_lab.hlo.parser import HloModule
from xla_lab.hlo.proto_frames import ProtoError, PyFrame, computation_stacks

from .frames import is_internal

KEEP_PROTOS = 64  # sub-computation protos kept (40-70 KB each for a decoder layer's body)
KEEP_GRAPHS = 128  # fx graphs whose line -> stack table is kept (the most recently compiled)
MAX_FRAMES = 200  # frames kept per traced op (the outermost: where the scan was called)

_LOCK = threading.Lock()
_PROTOS: OrderedDict[bytes, None] = OrderedDict()  # recorded sub-module protos, oldest first
_PARSED: dict[bytes, dict] = {}  # proto -> its computations' fingerprints and stacks (parsed on use)
# generated code file ("<eval_with_key>.4") -> (first line of forward, torch.fx's line map, per node
# its stack_trace text)
_GRAPHS: OrderedDict[str, tuple[int, dict, list]] = OrderedDict()
_INSTALLED: dict[str, object] = {}


# --- hooks ----------------------------------------------------------------------------------------
def install() -> None:
    """Record imported sub-computations, trace ``scan``'s function with its model frames and keep
    fx graphs' line tables (once per process; each hook is skipped where its target is missing)."""
    with _LOCK:
        for name, hook in (("proto", _hook_protos), ("scan", _hook_scan), ("fx", _hook_fx)):
            if name not in _INSTALLED:
                try:
                    _INSTALLED[name] = hook()
                except Exception:  # a release without the function: that part stays off
                    _INSTALLED[name] = None


def uninstall() -> None:
    with _LOCK:
        for undo in _INSTALLED.values():
            if callable(undo):
                undo()
        _INSTALLED.clear()


def _hook_protos():
    import torch_xla.core.xla_builder as xb

    original = xb.computation_from_module_proto
    if getattr(original, "__name__", "") == "_xla_lab_computation_from_module_proto":
        original = original.__wrapped__

    def _xla_lab_computation_from_module_proto(name, proto):
        record_proto(proto)
        return original(name, proto)

    _xla_lab_computation_from_module_proto.__wrapped__ = original
    xb.computation_from_module_proto = _xla_lab_computation_from_module_proto

    def undo():
        xb.computation_from_module_proto = original
    return undo


def _hook_scan():
    from torch_xla.experimental import scan as scan_module

    original = scan_module.value_and_grad_partitioned
    if getattr(original, "__name__", "") == "_xla_lab_value_and_grad_partitioned":
        original = original.__wrapped__

    def _xla_lab_value_and_grad_partitioned(*args, **kwargs):
        with model_stacks():
            return original(*args, **kwargs)

    _xla_lab_value_and_grad_partitioned.__wrapped__ = original
    scan_module.value_and_grad_partitioned = _xla_lab_value_and_grad_partitioned

    def undo():
        scan_module.value_and_grad_partitioned = original
    return undo


def _hook_fx():
    from torch.fx import GraphModule

    original = GraphModule.recompile
    if getattr(original, "__name__", "") == "_xla_lab_recompile":
        original = original.__wrapped__

    def _xla_lab_recompile(self):
        code = original(self)
        try:
            record_graph(self)
        except Exception:  # never in the way of torch.fx
            pass
        return code

    _xla_lab_recompile.__wrapped__ = original
    GraphModule.recompile = _xla_lab_recompile

    def undo():
        GraphModule.recompile = original
    return undo


def record_proto(proto) -> None:
    """Keep the HLO module proto of a computation torch_xla imports into a graph (bounded)."""
    if not isinstance(proto, (bytes, bytearray)):
        return
    data = bytes(proto)
    with _LOCK:
        _PROTOS.pop(data, None)
        _PROTOS[data] = None
        while len(_PROTOS) > KEEP_PROTOS:
            old, _ = _PROTOS.popitem(last=False)
            _PARSED.pop(old, None)


def record_graph(gm) -> None:
    """Keep a compiled fx graph's generated-line -> node stack table, if any node has a stack."""
    forward = type(gm).forward
    code = getattr(forward, "__code__", None)
    lineno_map = getattr(gm, "_lineno_map", None)
    if code is None or not lineno_map:
        return
    seen: dict[str, str] = {}  # (nodes of one line of code share one copy of its stack)
    traces = [seen.setdefault(t, t) if t else None for t in (node.meta.get("stack_trace") for node in gm.graph.nodes)]
    if not seen:
        return
    with _LOCK:
        _GRAPHS.pop(code.co_filename, None)
        _GRAPHS[code.co_filename] = (code.co_firstlineno, lineno_map, traces)
        while len(_GRAPHS) > KEEP_GRAPHS:
            _GRAPHS.popitem(last=False)


# --- model frames while scan traces its function -----------------------------------------------------
def model_stacks():
    """A context in which every torch call traced by fx is given the model's frames at the call
    (``node.meta["stack_trace"]``), and the autograd nodes it makes carry them too (``traceback_``,
    which AOTAutograd copies onto the backward graph's nodes)."""
    import contextlib

    import torch.fx.traceback as fx_traceback

    stack = contextlib.ExitStack()
    stack.enter_context(fx_traceback.preserve_node_meta())
    stack.enter_context(_ModelStacks())
    return stack


def _mode_class():
    from torch.overrides import TorchFunctionMode

    class ModelStacks(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:  # what is recorded never stands in the way of the call (it runs once, as it would)
                meta, frames, first = _before_call(sys._getframe(1))
            except Exception:
                meta = None
            if meta is None:
                return func(*args, **kwargs)
            saved = meta.get("stack_trace")
            meta["stack_trace"] = "".join(frames)
            try:
                out = func(*args, **kwargs)
            finally:
                if saved is None:
                    meta.pop("stack_trace", None)
                else:
                    meta["stack_trace"] = saved
            try:
                _tag_backward(out, frames, first)
            except Exception:
                pass
            return out

    return ModelStacks


def _before_call(frame):
    """(fx's current node meta, the call's stack as traceback lines, autograd's next sequence number),
    or (None, ...) when fx is not tracing with node meta or no frame is the model's."""
    import torch
    import torch.fx.traceback as fx_traceback

    if not fx_traceback.has_preserved_node_meta():
        return None, None, None
    frames = _stack_text(frame)
    if not frames:
        return None, None, None
    return fx_traceback.get_current_meta(), frames, torch.autograd._get_sequence_nr()


_MODE = None


def _ModelStacks():
    global _MODE
    if _MODE is None:
        _MODE = _mode_class()
    return _MODE()


def _stack_text(frame) -> list[str]:
    """The stack from ``frame`` outwards as traceback lines, outermost first (the order and form of
    ``traceback.format_stack``, which fx's ``stack_trace`` keeps); the source text only for the
    model's own frames. Empty when no frame is the model's: nothing is known that the op's own
    stack does not say."""
    import linecache

    out, model = [], False
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        text = ""
        if not is_internal(code.co_filename):
            model = True
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
        out.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n    {text}\n')
        frame = frame.f_back
    out.reverse()
    return out if model else []


def _tag_backward(out, frames: list[str], first_seq: int) -> None:
    """Give the autograd nodes the call made (sequence numbers from ``first_seq`` on) its frames."""
    import torch
    from torch.utils._pytree import tree_leaves

    todo = [t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen = set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        try:
            if node._sequence_nr() < first_seq:
                continue
        except Exception:
            continue
        if "traceback_" not in node.metadata:
            node.metadata["traceback_"] = list(frames)
        todo.extend(fn for fn, _ in node.next_functions)


# --- repairing a graph's call stacks ---------------------------------------------------------------
_NAME = re.compile(r"^(.*)\.(\d+)$")
_TRACE_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')


def repair_stacks(module: HloModule, stacks: dict[str, list[PyFrame]]) -> dict[str, list[PyFrame]]:
    """The call stacks of ``module``'s instructions (pre-optimization, read from its proto) with the
    stacks of imported loop bodies put back and fx-generated frames replaced by the frames the
    graph's node was traced from.

    A stack that does not end where the instruction's own metadata says it was made
    (``source_file``/``source_line``) and that could not be put back points into another module's
    frame table: it is replaced by that one frame, which is right (a loop body lowered without a
    frame table of its own, as ``while_loop``'s is, keeps at least its generated-code line, which
    names the traced node)."""
    out = dict(stacks)
    out.update(_imported_stacks(module))
    recorded = set(out) - set(stacks)
    own: dict[tuple[str, int], list[PyFrame]] = {}  # one list per place (what reads stacks does each list once)
    for ins in module.instructions():
        if ins.name in recorded or not ins.source:
            continue
        stack = out.get(ins.name)
        if (stack and not _ends_at(stack, ins.source)) or (not stack and ins.source[0] in _GRAPHS):
            mine = own.get(ins.source)
            if mine is None:
                mine = own[ins.source] = [PyFrame(ins.source[0], "?", ins.source[1])]
            out[ins.name] = mine
    return resolve_generated(out)


def _ends_at(stack: list[PyFrame], source: tuple[str, int]) -> bool:
    return stack[0].line == source[1] and stack[0].file == source[0]


def resolve_generated(stacks: dict[str, list[PyFrame]]) -> dict[str, list[PyFrame]]:
    """Stacks with each frame in fx-generated code replaced by the stack its node was traced from
    (innermost first), where that graph was recorded."""
    with _LOCK:
        graphs = dict(_GRAPHS)
    if not graphs:
        return stacks
    done: dict[int, list[PyFrame]] = {}
    out = {}
    for name, stack in stacks.items():
        key = id(stack)
        if key not in done:
            done[key] = _resolved(stack, graphs)
        out[name] = done[key]
    return out


def _resolved(stack: list[PyFrame], graphs: dict) -> list[PyFrame]:
    if not any(f.file in graphs for f in stack):
        return stack
    out: list[PyFrame] = []
    for frame in stack:
        traced = _traced_frames(frame, graphs) if frame.file in graphs else None
        if traced:
            out.extend(traced)
        else:
            out.append(frame)
    return out


def _traced_frames(frame: PyFrame, graphs: dict) -> list[PyFrame] | None:
    first, lineno_map, traces = graphs[frame.file]
    index = lineno_map.get(frame.line - first)
    if index is None or not 0 <= index < len(traces) or not traces[index]:
        return None
    return _parse_trace(traces[index])


def _parse_trace(text: str) -> list[PyFrame]:
    """A ``stack_trace`` (traceback text, outermost first) as frames, innermost first."""
    frames = []
    for line in text.splitlines():
        m = _TRACE_FRAME.match(line)
        if m:
            frames.append(PyFrame(m.group(1), m.group(3).strip(), int(m.group(2))))
    frames.reverse()
    return frames


def _imported_stacks(module: HloModule) -> dict[str, list[PyFrame]]:
    """Instruction name -> call stack, for the instructions of ``module`` that belong to a recorded
    sub-computation (the most recently recorded one, where several have the same instructions)."""
    with _LOCK:
        protos = list(_PROTOS)
    if not protos:
        return {}
    by_print: dict[tuple, tuple[list[str], dict]] = {}
    for data in protos:  # oldest first: a later recording of the same body wins
        by_print.update(_fingerprints(data))
    out: dict[str, list[PyFrame]] = {}
    for comp in module.computations.values():
        fingerprint, names = _fingerprint(comp.name, [ins.name for ins in comp.instructions])
        if fingerprint is None or fingerprint not in by_print:
            continue
        sub_names, stacks = by_print[fingerprint]
        for name, sub_name in zip(names, sub_names):
            if stacks.get(sub_name):
                out[name] = stacks[sub_name]
    return out


def _fingerprints(data: bytes) -> dict[tuple, tuple[list[str], dict]]:
    cached = _PARSED.get(data)
    if cached is None:
        cached = {}
        try:
            for comp_name, stacks in computation_stacks(data).items():
                fingerprint, names = _fingerprint(comp_name, list(stacks))
                if fingerprint is not None and any(stacks.values()):
                    cached[fingerprint] = (names, stacks)
        except ProtoError:
            pass
        with _LOCK:
            if data in _PROTOS:  # (not cached for a proto dropped meanwhile)
                _PARSED[data] = cached
    return cached


def _fingerprint(comp_name: str, names: list[str]) -> tuple[tuple | None, list[str]]:
    """What a computation is made of, the same before and after importing renumbers it (importing
    numbers the instructions anew in the order of their numbers): its name without the number and
    its instructions' names without theirs, in that order; and the names in that order."""
    parsed = sorted((int(m.group(2)), m.group(1), name) for name, m in zip(names, map(_NAME.match, names)) if m)
    if len(parsed) < 2 or len(parsed) != len(names):
        return None, []
    comp = _NAME.match(comp_name)
    return (comp.group(1) if comp else comp_name, tuple(base for _, base, _ in parsed)), [n for _, _, n in parsed]
