"""Where memory goes in one compiled program: XLA's memory-usage report and buffer assignment."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOTAL = re.compile(r"^Total bytes used: (\d+)", re.M)
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_VALUE = re.compile(r"^ value: <\d+ (?P<name>[\w.\-]+)(?: @[\d,{} ]*)?> \(size=(?P<size>\d+),offset=\d+\): (?P<shape>.+)$")


@dataclass
class Allocation:
    index: int
    size: int
    kind: str  # "parameter" | "output" | "temp" | "constant" | "thread-local" | "other"
    parameter: int | None = None
    live_out: bool = False
    values: list[tuple[str, int, str]] = field(default_factory=list)  # (instruction, size, shape)


def parse_buffer_assignment(text: str) -> list[Allocation]:
    allocations: list[Allocation] = []
    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            rest = m[3]
            param = re.search(r"parameter (\d+)", rest)
            if param:
                kind = "parameter"
            elif "output shape" in rest:
                kind = "output"
            elif "preallocated-temp" in rest:
                kind = "temp"
            elif "constant" in rest:
                kind = "constant"
            elif "thread-local" in rest:
                kind = "thread-local"
            elif "maybe-live-out" in rest:
                kind = "output"  # a result of the program in a buffer of its own
            else:
                kind = "temp"
            allocations.append(Allocation(int(m[1]), int(m[2]), kind, int(param[1]) if param else None,
                                          "maybe-live-out" in rest))
            continue
        if line.startswith(" value: ") and allocations:
            v = _VALUE.match(line)
            if v:
                allocations[-1].values.append((v["name"], int(v["size"]), v["shape"].strip()))
        elif line.startswith(("Total bytes used", "Used values", "HloLiveRange", "BufferAssignment stats")):
            if allocations and line.startswith("Used values"):
                break
    return allocations


_DIMS = re.compile(r"\[([\d,]*)\]")
# a program's parameter itself, not a value its buffer is reused for: ``p12.345`` as torch_xla names
# them, ``param.3`` in a partitioned (SPMD) program
_PARAMETER = re.compile(r"^(p\d+|param)(\.\d+)?$")


def _dims(shape: str) -> tuple[int, ...]:
    """The dimensions of a value's shape, sorted: a transposed copy has the same ones."""
    return tuple(sorted(int(d) for group in _DIMS.findall(shape.split("{")[0]) for d in group.split(",") if d))


def growing_temp_bytes(allocations: list[Allocation]) -> int:
    """Of the temporaries' bytes, the share that is not a weight's or an optimizer state's copy: each
    temporary allocation's bytes times the share of its values' bytes whose shapes are no parameter's
    of the program (a transposed copy counted as one). What grows with the batch or the sequence
    length: activations and their gradients. (On the CPU client ResNet-18's train step at 4 images
    holds 44.7 MB of temporaries shaped like its convolutions' weights, the layout copies of XLA's
    convolutions, and 2 MB of activations.)"""
    weights = {_dims(shape) for a in allocations if a.kind == "parameter"
               for name, _, shape in a.values if _PARAMETER.match(name)}
    weights.discard(())
    out = 0
    for a in allocations:
        if a.kind != "temp" or not a.values:
            continue
        total = sum(size for _, size, _ in a.values)
        moving = sum(size for _, size, shape in a.values if _dims(shape) not in weights)
        out += a.size * moving // total if total else a.size
    return out


def memory_summary(memory_report: str | None, buffer_assignment: str | None,
                   source_of=lambda name: None, top: int = 8, allocations: list[Allocation] | None = None) -> dict:
    """Peak, parameters, outputs, temporaries, and the largest buffers with what they hold.

    ``source_of(instruction name)`` gives the source location dict of the op that wrote a buffer.
    ``allocations``: the buffer assignment already read (from a profiler session's ``HloProto``,
    ``hlo_proto.py``) instead of the dump's text; the peak is then the memory report's "Total bytes
    used", which XLA sums over every allocation."""
    out: dict = {}
    if memory_report:
        m = _TOTAL.search(memory_report)
        if m:
            out["peak_bytes"] = int(m[1])
    if allocations is None:
        if not buffer_assignment:
            return out
        allocations = parse_buffer_assignment(buffer_assignment)
    elif allocations:
        out.setdefault("peak_bytes", sum(a.size for a in allocations))
    sums = {"parameter": 0, "output": 0, "temp": 0, "constant": 0, "thread-local": 0}
    for a in allocations:
        sums[a.kind] = sums.get(a.kind, 0) + a.size
    out.update(parameter_bytes=sums["parameter"], output_bytes=sums["output"],
               temp_bytes=sums["temp"], constant_bytes=sums["constant"],
               growing_temp_bytes=growing_temp_bytes(allocations),
               live_out_bytes=sum(a.size for a in allocations if a.live_out),
               allocations=len(allocations))
    out.setdefault("peak_bytes", sum(a.size for a in allocations if a.kind != "thread-local"))
    largest = []
    for a in sorted(allocations, key=lambda a: -a.size)[:top]:
        biggest = max(a.values, key=lambda v: v[1]) if a.values else (None, a.size, "")
        largest.append({
            "allocation": a.index, "bytes": a.size, "kind": a.kind, "parameter": a.parameter,
            "instruction": biggest[0], "shape": biggest[2], "values": len(a.values),
            "source": source_of(biggest[0]) if biggest[0] else None,
        })
    out["largest"] = largest
    return out
