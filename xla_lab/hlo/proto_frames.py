"""Python call stacks of HLO instructions, from XLA's binary dump (``--xla_dump_hlo_as_proto``).

The text dump keeps only the innermost frame of each op (``source_file``/``source_line``), which for
``nn.Linear`` is a line inside torch. torch_xla records the whole stack of every op
(``XLA_IR_DEBUG``) and lowers it into the module's ``stack_frame_index`` (each instruction's
``metadata.stack_frame_id`` points at its innermost frame, frames point at their parents), which only
the proto dump carries. This reads just those fields with a minimal protobuf wire-format decoder, so
no protobuf package or generated code is needed.

Field numbers (xla/service/hlo.proto, xla/xla_data.proto): HloProto.hlo_module=1;
HloModuleProto.computations=3, .stack_frame_index=17; HloComputationProto.instructions=2;
HloInstructionProto.name=1, .metadata=7; OpMetadata.stack_frame_id=15; StackFrameIndexProto
.file_names=1, .function_names=2, .file_locations=3 {file_name_id=1, function_name_id=2, line=3},
.stack_frames=4 {file_location_id=1, parent_frame_id=2}. Ids are 1-based.
"""

from __future__ import annotations

from dataclasses import dataclass


class ProtoError(ValueError):
    """The bytes are not an HLO proto this reader understands."""


@dataclass(frozen=True)
class PyFrame:
    file: str
    function: str
    line: int


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def _fields(buf: bytes):
    """Yield (field number, wire type, value): ints for varints, bytes for length-delimited."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ProtoError("truncated field")
            value = buf[pos:pos + length]
            pos += length
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
        yield field, wire, value


def _module_bytes(buf: bytes) -> bytes:
    """The dump is an HloProto (module in field 1, buffer assignment in 3) or a bare HloModuleProto
    (which has its entry computation's name in field 2; field 2 is reserved in HloProto)."""
    top = {f: v for f, w, v in _fields(buf) if w == 2 and f in (1, 2)}
    if 2 in top:
        return buf
    if 1 in top:
        return top[1]
    raise ProtoError("no HLO module in the proto")


def _stack_index(buf: bytes):
    files, functions, locations, frames = [], [], [], []
    for f, w, v in _fields(buf):
        if w != 2:
            continue
        if f == 1:
            files.append(v.decode("utf-8", "replace"))
        elif f == 2:
            functions.append(v.decode("utf-8", "replace"))
        elif f == 3:
            d = {k: val for k, _, val in _fields(v)}
            locations.append((d.get(1, 0), d.get(2, 0), d.get(3, 0)))
        elif f == 4:
            d = {k: val for k, _, val in _fields(v)}
            frames.append((d.get(1, 0), d.get(2, 0)))
    return files, functions, locations, frames


def instruction_stacks(data: bytes) -> dict[str, list[PyFrame]]:
    """Instruction name -> its Python call stack, innermost frame first (empty when unknown)."""
    module = _module_bytes(data)
    frame_ids: dict[str, int] = {}
    index = None
    for f, w, v in _fields(module):
        if w != 2:
            continue
        if f == 17:
            index = _stack_index(v)
        elif f == 3:
            for cf, cw, instr in _fields(v):
                if cf != 2 or cw != 2:
                    continue
                name, frame_id = None, 0
                for inf, inw, val in _fields(instr):
                    if inf == 1 and inw == 2:
                        name = val.decode("utf-8", "replace")
                    elif inf == 7 and inw == 2:
                        for mf, mw, mv in _fields(val):
                            if mf == 15 and mw == 0:
                                frame_id = mv
                if name is not None and frame_id:
                    frame_ids[name] = frame_id
    if index is None:
        return {}
    files, functions, locations, frames = index
    cache: dict[int, list[PyFrame]] = {}

    def stack(frame_id: int) -> list[PyFrame]:
        out: list[PyFrame] = []
        seen = set()
        fid = frame_id
        while fid and fid not in seen and 0 < fid <= len(frames):
            if fid in cache:
                out.extend(cache[fid])
                break
            seen.add(fid)
            loc_id, parent = frames[fid - 1]
            if 0 < loc_id <= len(locations):
                file_id, fn_id, line = locations[loc_id - 1]
                out.append(PyFrame(
                    files[file_id - 1] if 0 < file_id <= len(files) else "?",
                    functions[fn_id - 1] if 0 < fn_id <= len(functions) else "?",
                    line,
                ))
            fid = parent
        cache[frame_id] = out
        return out

    return {name: stack(fid) for name, fid in frame_ids.items()}
