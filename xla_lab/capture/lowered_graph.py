"""Rebuild the captured lazy graph from XLA's pre-optimization HLO, in torch_xla's IR text format.

torch_xla can write the IR text of every sync (``XLA_SAVE_TENSORS_FILE``), but it does so for cache
hits too and costs more than the steps themselves in a fast loop, so xla_lab leaves it off by default
(``XLA_LAB_IR_LOG=1`` turns it on). Without it, the graph is rebuilt from the HLO XLA was given: each
lazy-IR op lowers to a few HLO instructions that carry the same ``op_type`` and source location
(``XLA_HLO_DEBUG``), so connected instructions with equal metadata are merged back into one node.
"""

from __future__ import annotations

import os
import re

from xla_lab.hlo.parser import HloModule, Instruction, parse_module

HEADER = "IR (rebuilt from the HLO before optimization) {"


def _op(op_type: str) -> str:
    namespace, sep, name = op_type.partition("__")
    return f"{namespace}::{name}" if sep else op_type


def ir_nodes_from_module(module: HloModule) -> list[dict]:
    """The lazy-IR nodes rebuilt from the entry computation: {id, op, shape, operands, location,
    hlo (member instruction names), root (output index or None)}, operands before users."""
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
        nodes.append({
            "id": number[g],
            "op": _op(last.op_type) if last.op_type else f"xla::{last.opcode}",
            "shape": last.shape_text,
            "operands": list(operands),
            "location": f"{os.path.basename(src[0])}:{src[1]}" if src else None,
            "hlo": [m.name for m in members],
            "root": root_index.get(g),
        })
    return nodes


def ir_text_from_hlo(hlo_before: str) -> str:
    return format_ir_text(ir_nodes_from_module(parse_module(hlo_before)))


def format_ir_text(nodes: list[dict]) -> str:
    """Rebuilt nodes in torch_xla's IR text format (with each node's HLO instructions)."""
    lines = [HEADER]
    for n in nodes:
        line = f"  %{n['id']} = {n['shape']} {n['op']}({', '.join(f'%{o}' for o in n['operands'])})"
        if n["location"]:
            line += f", location={n['location']}"
        line += f", hlo={','.join(n['hlo'])}"
        if n["root"] is not None:
            line += f", ROOT={n['root']}"
        lines.append(line)
    lines.append("}")
    return "\n".join(lines) + "\n"


_NODE_HLO = re.compile(r"^\s*%(\d+) = .*?, hlo=([\w.\-,]+)")


def hlo_index_from_ir_text(ir_text: str) -> dict[int, list[str]]:
    """IR node id -> the pre-optimization HLO instructions it lowered to (rebuilt graphs only)."""
    out = {}
    for line in ir_text.splitlines():
        m = _NODE_HLO.match(line)
        if m:
            out[int(m[1])] = [n for n in m[2].split(",") if n]
    return out
