"""A graph's signature: what a recompile explanation compares (``capture/recompile.py``): the entry
parameters, the scalar constants baked into the graph, the traced ops in order, and the outputs, each
input and constant with where it was made.
"""

from __future__ import annotations

from typing import Callable

from .parser import HloModule, Instruction


def graph_signature(module: HloModule, nodes: list[dict], where_of: Callable[[Instruction], str | None]) -> dict:
    """``nodes``: the rebuilt lazy-IR nodes ({op, shape, where}); ``where_of(instruction)``: where it
    was made, as the caller words it (a cell line, a library file), or None."""
    entry = module.entry
    params = [{"index": n, "shape": str(p.shape), "where": where_of(p)} for n, p in enumerate(entry.parameters)]
    constants = [{"value": ins.literal, "shape": str(ins.shape), "op": _aten(ins.op_type), "where": where_of(ins)}
                 for ins in entry.instructions
                 if ins.opcode == "constant" and not ins.shape.is_tuple and ins.shape.elements <= 1]
    root = entry.root
    outputs = [str(s) for s in root.shape.leaves()] if root.shape.is_tuple else [str(root.shape)]
    return {"params": params, "constants": constants, "nodes": nodes, "outputs": outputs}


def _aten(op_type: str | None) -> str | None:
    if not op_type:
        return None
    ns, sep, name = op_type.partition("__")
    return f"{ns}::{name}" if sep else op_type
