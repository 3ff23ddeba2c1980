"""Rough flop and byte counts per instruction and per kernel (what an HLO cost model would say,
simplified): enough to rank kernels, not to predict run time."""

from __future__ import annotations

import math
import re

from .parser import Computation, HloModule, Instruction

_DIMS = re.compile(r"\d+")
# Ops that move or reinterpret data without arithmetic.
_NO_FLOPS = {
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape", "broadcast", "transpose",
    "copy", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse", "iota",
    "gather", "scatter", "convert", "bitcast-convert", "after-all", "partition-id", "replica-id",
    "all-gather", "all-to-all", "collective-permute", "copy-start", "copy-done", "opt-barrier",
}


def _dims(text: str | None) -> list[int]:
    return [int(d) for d in _DIMS.findall(text or "")]


def instruction_flops(ins: Instruction, module: HloModule, comp: Computation) -> int:
    op = ins.opcode
    out = ins.shape.elements if not ins.shape.is_tuple else sum(s.elements for s in ins.shape.leaves())
    if op == "dot":
        lhs = comp.by_name.get(ins.operands[0]) if ins.operands else None
        contracting = _dims(ins.attributes.get("lhs_contracting_dims"))
        k = math.prod(lhs.shape.dims[d] for d in contracting if lhs and d < len(lhs.shape.dims)) if lhs else 1
        return 2 * out * max(k, 1)
    if op == "convolution":
        kernel = comp.by_name.get(ins.operands[1]) if len(ins.operands) > 1 else None
        labels = ins.attributes.get("dim_labels", "")
        kernel_labels = labels.split("_")[1].split("->")[0] if "_" in labels else ""
        if kernel is None or len(kernel_labels) != len(kernel.shape.dims):
            return 2 * out
        per_output = math.prod(d for d, label in zip(kernel.shape.dims, kernel_labels) if label != "o")
        return 2 * out * max(per_output, 1)
    if op in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
        return sum(comp.by_name[o].shape.elements for o in ins.operands[: max(1, len(ins.operands) // 2)]
                   if o in comp.by_name)
    if op == "fusion":
        return sum(instruction_flops(i, module, fused) for fused in _called(ins, module) for i in fused.instructions)
    if op in _NO_FLOPS:
        return 0
    return out


def _called(ins: Instruction, module: HloModule) -> list[Computation]:
    return [module.computations[c] for c in ins.called if c in module.computations]


def kernel_bytes(ins: Instruction, comp: Computation) -> int:
    """Bytes read and written at the kernel's boundary: its operands and its result."""
    read = sum(comp.by_name[o].shape.byte_size for o in dict.fromkeys(ins.operands) if o in comp.by_name)
    return read + ins.shape.byte_size
