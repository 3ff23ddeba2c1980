"""Large constants baked into a graph: they are compiled into the executable, and any change to one
(a tensor built from Python data inside the step) recompiles the graph."""

from __future__ import annotations

from .parser import HloModule, Instruction

LARGE_CONSTANT_BYTES = 1 << 20


def large_constants(module: HloModule, limit: int = LARGE_CONSTANT_BYTES) -> list[Instruction]:
    """Constants of at least ``limit`` bytes, in every computation (scalars stay in the graph
    signature, ``hlo/signature.py``)."""
    return [ins for ins in module.instructions()
            if ins.opcode == "constant" and not ins.shape.is_tuple and ins.shape.byte_size >= limit]
