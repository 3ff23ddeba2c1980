"""The captured lazy graph, rebuilt from XLA's pre-optimization HLO.

torch_xla can write the IR text of every sync (``XLA_SAVE_TENSORS_FILE``), but it does so for cache
hits too and costs more than the steps themselves in a fast loop, so xla_lab leaves it off by default
(``XLA_LAB_IR_LOG=1`` turns it on). Without it, the graph is rebuilt from the HLO XLA was given: each
lazy-IR op lowers to a few HLO instructions that carry the same ``op_type`` and source location
(``XLA_HLO_DEBUG``), so connected instructions with equal metadata are merged back into one node.
(The graph's text form is ``capture/ir_graph.py``'s.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .parser import HloModule, Instruction

INPUT_OP = "xla::device_data"


@dataclass
class IrNode:
    """One node of the lazy graph, as torch_xla's IR text names it."""

    id: int
    op: str  # "aten::gelu", "xla::device_data"
    shape: str  # "f32[8,16]"
    operands: list[int] = field(default_factory=list)
    location: str | None = None  # innermost source frame, "model.py:12"
    hlo: list[str] = field(default_factory=list)  # rebuilt graphs: the pre-optimization HLO instructions
    root: int | None = None  # output index, for the graph's outputs

    @property
    def is_input(self) -> bool:
        return self.op == INPUT_OP


def _op(op_type: str) -> str:
    namespace, sep, name = op_type.partition("__")
    return f"{namespace}::{name}" if sep else op_type


def nodes_from_module(module: HloModule) -> list[IrNode]:
    """The lazy-IR nodes rebuilt from the entry computation, operands before users."""
    entry = module.entry.instructions
    roots = []
    for i in entry:
        if i.is_root:
            roots = i.operands if i.opcode == "tuple" else [i.name]
    instructions = [i for i in entry if not (i.is_root and i.opcode == "tuple")]
    position = {i.name: n for n, i in enumerate(instructions)}
    by_name = {i.name: i for i in instructions}
    parent = {i.name: i.name for i in instructions}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for ins in instructions:
        k = ins.op_key
        for o in ins.operands:
            if o in by_name and k is not None and by_name[o].op_key == k:
                parent[find(o)] = find(ins.name)
    groups: dict[str, list[Instruction]] = {}
    for ins in instructions:
        groups.setdefault(find(ins.name), []).append(ins)
    # Number groups in the order their last instruction appears (operands come first in HLO text).
    order = sorted(groups, key=lambda g: position[groups[g][-1].name])
    number = {g: n for n, g in enumerate(order)}
    group_of = {ins.name: find(ins.name) for ins in instructions}
    root_index = {group_of[r]: idx for idx, r in enumerate(roots) if r in group_of}
    nodes = []
    for g in order:
        members = groups[g]
        last = members[-1]
        names = {m.name for m in members}
        operands: dict[int, None] = {}  # ordered set
        for m in members:
            for o in m.operands:
                if o in group_of and o not in names:
                    operands.setdefault(number[group_of[o]], None)
        src = last.source
        nodes.append(IrNode(id=number[g], op=_op(last.op_type) if last.op_type else f"xla::{last.opcode}",
                            shape=last.shape_text, operands=list(operands),
                            location=f"{os.path.basename(src[0])}:{src[1]}" if src else None,
                            hlo=[m.name for m in members], root=root_index.get(g)))
    return nodes
