"""An optimized module as a profiler session records it: XLA's ``HloProto`` (the module, and its buffer
assignment), the same program its dump would describe, for lean capture (``capture/lean.py``).

Like ``proto_frames.py`` it declares the few fields it reads as a schema built at first use and lets
protobuf's C parser read them. Field numbers (xla/service/hlo.proto): HloProto.hlo_module=1,
.buffer_assignment=3; HloModuleProto.name=1, .computations=3, .id=5; HloComputationProto
.instructions=2; HloInstructionProto.name=1, .shape=3, .id=35; ShapeProto.element_type=2 (xla_data.proto's
PrimitiveType), .dimensions=3, .tuple_shapes=4; BufferAssignmentProto.logical_buffers=1 {id=1,
size=2, defined_at=3 {instruction_name=2, instruction_id=4}}, .buffer_allocations=3 {index=1, size=2,
is_thread_local=3, is_entry_computation_parameter=5, parameter_number=6, maybe_live_out=7, color=8,
assigned=9 {logical_buffer_id=1, offset=2, size=3}, is_tuple=11, is_constant=12}.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from .memory import Allocation
from .proto_frames import ProtoError
from .proto_schema import message_classes

_PACKAGE = "xla_lab_hlo_proto"
_ONE, _MANY = "optional", "repeated"
_INT, _BOOL, _BYTES, _MSG = "int64", "bool", "bytes", "message"

_SCHEMA = {
    "Proto": [("hlo_module", 1, _BYTES, _ONE, None), ("buffer_assignment", 3, _MSG, _ONE, "Buffers")],
    "Module": [("name", 1, _BYTES, _ONE, None), ("computations", 3, _MSG, _MANY, "Computation"),
               ("id", 5, _INT, _ONE, None)],
    "Computation": [("instructions", 2, _MSG, _MANY, "Instruction")],
    "Instruction": [("name", 1, _BYTES, _ONE, None), ("shape", 3, _MSG, _ONE, "Shape"), ("id", 35, _INT, _ONE, None)],
    "Shape": [("element_type", 2, _INT, _ONE, None), ("dimensions", 3, _INT, _MANY, None),
              ("tuple_shapes", 4, _MSG, _MANY, "Shape")],
    "Buffers": [("logical_buffers", 1, _MSG, _MANY, "LogicalBuffer"),
                ("buffer_allocations", 3, _MSG, _MANY, "Allocation")],
    "LogicalBuffer": [("id", 1, _INT, _ONE, None), ("size", 2, _INT, _ONE, None),
                      ("defined_at", 3, _MSG, _ONE, "Location")],
    "Location": [("instruction_name", 2, _BYTES, _ONE, None), ("instruction_id", 4, _INT, _ONE, None)],
    "Allocation": [("index", 1, _INT, _ONE, None), ("size", 2, _INT, _ONE, None),
                   ("is_thread_local", 3, _BOOL, _ONE, None), ("is_entry_computation_parameter", 5, _BOOL, _ONE, None),
                   ("parameter_number", 6, _INT, _ONE, None), ("maybe_live_out", 7, _BOOL, _ONE, None),
                   ("color", 8, _INT, _ONE, None), ("assigned", 9, _MSG, _MANY, "Assigned"),
                   ("is_tuple", 11, _BOOL, _ONE, None), ("is_constant", 12, _BOOL, _ONE, None)],
    "Assigned": [("logical_buffer_id", 1, _INT, _ONE, None), ("offset", 2, _INT, _ONE, None),
                 ("size", 3, _INT, _ONE, None)],
}


@functools.cache
def _classes() -> dict[str, type]:
    return message_classes(_PACKAGE, _SCHEMA, ("Proto", "Module"))


def _parse(kind: str, data: bytes):
    from google.protobuf.message import DecodeError

    msg = _classes()[kind]()
    try:
        msg.ParseFromString(bytes(data))
    except (DecodeError, RecursionError) as exc:
        raise ProtoError(f"not a valid HloProto ({exc})") from None
    return msg


@dataclass
class OptimizedModule:
    """One ``HloProto``: the module's bytes (an ``HloModuleProto``, for torch_xla's printer and the
    call stacks), its name and unique id, and its buffer allocations."""

    name: str
    module_id: int
    module_proto: bytes
    allocations: list[Allocation]


def read_hlo_proto(data: bytes) -> OptimizedModule:
    top = _parse("Proto", data)
    if not top.hlo_module:
        raise ProtoError("the HloProto holds no module")
    module = _parse("Module", top.hlo_module)
    names, by_name = {}, {}
    for comp in module.computations:
        for ins in comp.instructions:
            name = ins.name.decode("utf-8", "replace")
            names[ins.id] = name
            by_name[name] = ins

    def shape_of(name: str) -> str | None:  # (only the buffers' instructions: a few of a big module's)
        ins = by_name.get(name)
        return _shape_text(ins.shape) if ins is not None else None

    allocs = with_shapes(allocations(top.buffer_assignment, names), shape_of)
    return OptimizedModule(module.name.decode("utf-8", "replace"), module.id, bytes(top.hlo_module), allocs)


# xla_data.proto's PrimitiveType, as HLO text writes them
_DTYPES = {1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16",
           11: "f32", 12: "f64", 15: "c64", 16: "bf16", 18: "c128"}


def _shape_text(shape) -> str:
    """``f32[8,64]`` (no layout), a tuple as ``(f32[2], s32[])``."""
    if shape.tuple_shapes:
        return "(" + ", ".join(_shape_text(s) for s in shape.tuple_shapes) + ")"
    return f"{_DTYPES.get(shape.element_type, '?')}[{','.join(map(str, shape.dimensions))}]"


def allocations(buffers, names: dict[int, str]) -> list[Allocation]:
    """The buffer assignment's allocations as ``hlo/memory.py`` reads them from the dump's text: kind by
    the same rules (a parameter, a result that may live out, a constant, thread-local, else a
    temporary) and each allocation's values (instruction, size; the shape is filled by the caller)."""
    logical = {}
    for lb in buffers.logical_buffers:
        where = lb.defined_at
        logical[lb.id] = where.instruction_name.decode("utf-8", "replace") or names.get(where.instruction_id, "?")
    out = []
    for a in buffers.buffer_allocations:
        if a.is_entry_computation_parameter:
            kind = "parameter"
        elif a.maybe_live_out:
            kind = "output"
        elif a.is_constant:
            kind = "constant"
        elif a.is_thread_local:
            kind = "thread-local"
        else:
            kind = "temp"
        alloc = Allocation(a.index, a.size, kind, a.parameter_number if a.is_entry_computation_parameter else None,
                           a.maybe_live_out)
        alloc.values = [(logical.get(v.logical_buffer_id, "?"), v.size, "") for v in a.assigned]
        out.append(alloc)
    return out


def with_shapes(allocs: list[Allocation], shape_of: Callable[[str], str | None]) -> list[Allocation]:
    """Fill each value's shape from the module's text (``shape_of(instruction)``)."""
    for a in allocs:
        a.values = [(name, size, shape or shape_of(name) or "") for name, size, shape in a.values]
    return allocs
