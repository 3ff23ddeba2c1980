"""The package's layers, checked from its source (every import, at module level or inside a function):
data flows one way. ``hlo`` (pure analysis of XLA's text) imports only itself; ``capture`` (one cell
run -> records) adds ``hlo``; ``profile`` (measured time) adds ``capture``; ``precompile`` and ``view``
add ``capture`` (``view`` also ``profile``); neither imports the other,
and views never import torch; the top-level modules (session, cell_run, hooks, magics) tie them
together. No module depends on itself through others."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xla_lab"
BASE = {"xla_lab.runtime", "xla_lab.interrupts", "xla_lab.compat"}  # import nothing of xla_lab's; anyone may import them
ALLOWED = {
    "hlo": {"hlo"},
    "capture": {"capture", "hlo"},
    "precompile": {"precompile", "capture", "hlo"},
    "profile": {"profile", "capture", "hlo"},  # measured time: a source of data, like capture
    "view": {"view", "capture", "hlo", "profile"},
}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The xla_lab modules ``name`` imports (``from xla_lab import session`` is xla_lab.session)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else None


def test_every_layer_imports_only_what_is_below_it():
    bad = []
    for module, deps in graph().items():
        own = layer(module)
        if module in BASE:
            bad += [(module, d) for d in deps]
            continue
        if own is None:
            continue  # the top level ties the layers together
        for d in deps:
            if d in BASE or d == "xla_lab":
                if d == "xla_lab":
                    bad.append((module, d))
                continue
            if layer(d) not in ALLOWED[own]:
                bad.append((module, d))
    assert not bad, "imports against the layers: " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_views_never_import_torch():
    for name, path in modules().items():
        if layer(name) != "view":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "torch" or n.startswith(("torch.", "torch_xla")) for n in names), name


def test_no_module_depends_on_itself():
    g = graph()
    g.pop("xla_lab", None)  # the public facade imports the layers; nothing imports it back
    for deps in g.values():
        deps.discard("xla_lab")
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_the_check_sees_imports_inside_functions():
    g = graph()
    assert "xla_lab.view.panel" in g["xla_lab.view.progress"] or "xla_lab.view.panel_model" in g["xla_lab.view.progress"]
    assert "xla_lab.hlo.parser" in g["xla_lab.hlo.lazy_graph"]
    assert "xla_lab.capture.recovery" in g["xla_lab.cell_run"]  # imported inside repair_lost_tensors
