"""The lazy-IR graph's text format, in one place: torch_xla's IR text (``%3 = f32[8,16] aten::gelu(%2),
location=model.py:12, ROOT=0``), as torch_xla writes it (``XLA_SAVE_TENSORS_FILE``) and as xla_lab
writes graphs rebuilt from the HLO (``hlo/lazy_graph.py``), which add ``hlo=`` (the pre-optimization HLO
instructions a node lowered to). Everything that reads or writes that text goes through here: the
node count, the node -> HLO index, the nodes a view draws, and Graphviz DOT (a description of the
same graph in another format, built as text: no drawing happens here).
"""

from __future__ import annotations

import re

from xla_lab.hlo.lazy_graph import IrNode

REBUILT_HEADER = "IR (rebuilt from the HLO before optimization) {"


def format_ir_text(nodes: list[IrNode], header: str = REBUILT_HEADER) -> str:
    lines = [header]
    for n in nodes:
        line = f"  %{n.id} = {n.shape} {n.op}({', '.join(f'%{o}' for o in n.operands)})"
        if n.location:
            line += f", location={n.location}"
        if n.hlo:
            line += f", hlo={','.join(n.hlo)}"
        if n.root is not None:
            line += f", ROOT={n.root}"
        lines.append(line)
    lines.append("}")
    return "\n".join(lines) + "\n"


_NODE = re.compile(r"^\s*%(?P<id>\d+) = (?P<shape>\S+) (?P<op>[\w:.]+)(?:\((?P<args>[^)]*)\))?(?P<rest>.*)$")
_OPERAND = re.compile(r"%(\d+)")
_LOCATION = re.compile(r"location=([^,]+)")
_HLO = re.compile(r"hlo=([\w.\-,]+)")
_ROOT = re.compile(r"ROOT=(\d+)")


def parse_ir_text(text: str) -> list[IrNode]:
    """The nodes of an IR text (torch_xla's or a rebuilt one), in order; other lines are skipped."""
    nodes = []
    for line in text.splitlines():
        m = _NODE.match(line)
        if not m:
            continue
        rest = m["rest"] or ""
        loc, hlo, root = _LOCATION.search(rest), _HLO.search(rest), _ROOT.search(rest)
        nodes.append(IrNode(id=int(m["id"]), op=m["op"], shape=m["shape"],
                            operands=[int(x) for x in _OPERAND.findall(m["args"] or "")],
                            location=loc.group(1).strip() if loc else None,
                            hlo=[n for n in hlo.group(1).split(",") if n] if hlo else [],
                            root=int(root.group(1)) if root else None))
    return nodes


def count_nodes(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("%"))


def hlo_index(text: str) -> dict[int, list[str]]:
    """Node id -> the pre-optimization HLO instructions it lowered to (rebuilt graphs only)."""
    return {n.id: n.hlo for n in parse_ir_text(text) if n.hlo}


def to_dot(text: str, name: str = "graph") -> str:
    """The graph as Graphviz DOT source (the ``graphviz`` package quotes; no ``dot`` binary needed)."""
    import graphviz

    g = graphviz.Digraph(name=re.sub(r"[^A-Za-z0-9_]", "_", name) or "graph", graph_attr={"rankdir": "TB"},
                         node_attr={"shape": "box", "fontsize": "10", "fontname": "monospace"})
    for n in parse_ir_text(text):
        label = f"%{n.id} {n.op}\\n{n.shape}"
        if n.location:
            label += f"\\n{n.location}"
        attrs = {"label": label}
        if n.root is not None:
            attrs.update(style="bold", color="#c05621")
        if n.is_input:
            attrs.update(shape="ellipse", color="#2b6cb0")
        g.node(f"n{n.id}", **attrs)
        for src in n.operands:
            g.edge(f"n{src}", f"n{n.id}")
    return g.source
