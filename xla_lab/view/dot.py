"""The lazy IR graph as Graphviz DOT, built with the ``graphviz`` package (no ``dot`` binary needed)."""

from __future__ import annotations

import re

_NODE = re.compile(r"^\s*%(?P<id>\d+) = (?P<shape>\S+) (?P<op>[\w:.]+)(?:\((?P<args>[^)]*)\))?(?P<rest>.*)$")
_OPERAND = re.compile(r"%(\d+)")
_LOCATION = re.compile(r"location=([^,]+)")
_ROOT = re.compile(r"ROOT=(\d+)")


def parse_ir_nodes(ir_text: str) -> list[dict]:
    """Nodes of an IR dump: id, op, shape, operands, location, root index."""
    nodes = []
    for line in ir_text.splitlines():
        m = _NODE.match(line)
        if not m:
            continue
        rest = m["rest"] or ""
        loc = _LOCATION.search(rest)
        root = _ROOT.search(rest)
        nodes.append({
            "id": int(m["id"]),
            "op": m["op"],
            "shape": m["shape"],
            "operands": [int(x) for x in _OPERAND.findall(m["args"] or "")],
            "location": loc.group(1).strip() if loc else None,
            "root": int(root.group(1)) if root else None,
        })
    return nodes


def ir_text_to_dot(ir_text: str, name: str = "graph") -> str:
    import graphviz

    g = graphviz.Digraph(name=_safe(name), graph_attr={"rankdir": "TB"},
                         node_attr={"shape": "box", "fontsize": "10", "fontname": "monospace"})
    for n in parse_ir_nodes(ir_text):
        label = f"%{n['id']} {n['op']}\\n{n['shape']}"
        if n["location"]:
            label += f"\\n{n['location']}"
        attrs = {"label": label}
        if n["root"] is not None:
            attrs.update(style="bold", color="#c05621")
        if n["op"] == "xla::device_data":
            attrs.update(shape="ellipse", color="#2b6cb0")
        g.node(f"n{n['id']}", **attrs)
        for src in n["operands"]:
            g.edge(f"n{src}", f"n{n['id']}")
    return g.source


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "graph"
