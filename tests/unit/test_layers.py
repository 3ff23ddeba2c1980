"""The package's layers, checked from its source (every import, at module level or inside a function):
data flows one way, and a module imports only modules below it in ``ORDER``:

    settings < runtime, interrupts, compat < the layers < launch < session < fits < display < cell_code
    < cell_run < verbs (a package) < hooks < magics < frontend < xla_lab (__init__)

``settings`` imports nothing of xla_lab's; the base modules (runtime, interrupts, compat) import only
``settings``; anyone may import either. Within the layers, ``hlo`` (pure analysis of XLA's text)
imports only itself; ``capture`` (one cell run -> records) adds ``hlo``; ``profile`` (measured time)
adds ``capture``; ``precompile`` and ``view`` add ``capture`` (``view`` also ``profile``); neither
imports the other, and views never import torch. The top-level modules above them tie them to
IPython: ``launch`` (multi-process work: workers' environment) is used by the session and by a cell's
run; ``session`` (one kernel's state) and ``cell_run`` (one cell's run, handed the session) do not
import each other; ``display`` puts views in a terminal or a notebook and holds the side panel's
channel; ``cell_code`` compiles a cell as IPython would; ``verbs`` is the table of %xla verbs;
``hooks`` (IPython's events) asks the verbs which lines need not wait; ``magics`` (%%xla, %xla)
dispatches; ``frontend`` (what JupyterLab's extension calls) uses the display's channel; the
package's ``__init__`` (the public API, %load_ext) is the top, and nothing imports it. No module
depends on itself through others."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xla_lab"
LAYERS = "the layers"  # every module of hlo, capture, profile, precompile and view (ALLOWED orders them)
PACKAGE_VERBS = "xla_lab.verbs"  # a package above the layers: its modules share its place and import each other
ORDER = [  # lowest first: a module imports only modules of the entries before its own
    {"xla_lab.settings"},
    {"xla_lab.runtime", "xla_lab.interrupts", "xla_lab.compat"},
    LAYERS,
    {"xla_lab.launch"},
    {"xla_lab.session"},
    {"xla_lab.fits"},
    {"xla_lab.display"},
    {"xla_lab.cell_code"},
    {"xla_lab.cell_run"},
    {PACKAGE_VERBS},
    {"xla_lab.hooks"},
    {"xla_lab.magics"},
    {"xla_lab.frontend"},
    {"xla_lab"},
]
BASE = ORDER[0] | ORDER[1]  # anyone may import them
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
    return parts[1] if len(parts) >= 2 and parts[1] in ALLOWED else None


def rank(module: str) -> int | None:
    """The entry of ``ORDER`` that holds ``module``."""
    if layer(module) is not None:
        return ORDER.index(LAYERS)
    if module == PACKAGE_VERBS or module.startswith(PACKAGE_VERBS + "."):
        module = PACKAGE_VERBS
    return next((i for i, entry in enumerate(ORDER) if entry != LAYERS and module in entry), None)


def same_package(a: str, b: str) -> bool:
    return rank(a) == rank(b) == ORDER.index({PACKAGE_VERBS})


def test_every_module_has_its_place_in_the_order():
    """A new top-level module must be placed in ORDER (and the README's layout) to be checked."""
    assert [m for m in graph() if rank(m) is None] == []
    assert not [m for entry in ORDER if entry != LAYERS for m in entry if m not in graph()]
    assert {"xla_lab.verbs.table", "xla_lab.verbs.queue"} <= set(graph())


def test_every_module_imports_only_what_is_below_it():
    bad = [(module, d) for module, deps in graph().items() for d in deps
           if not (rank(d) < rank(module) or rank(d) == rank(module) == ORDER.index(LAYERS) or same_package(d, module))]
    assert not bad, "imports against the order: " + ", ".join(f"{a} -> {b}" for a, b in sorted(bad))


def test_every_layer_imports_only_what_is_below_it():
    bad = []
    for module, deps in graph().items():
        own = layer(module)
        if own is None:
            continue  # (the order above checks the rest)
        for d in deps:
            if d not in BASE and layer(d) not in ALLOWED[own]:
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
    assert "xla_lab.capture.recovery" in g["xla_lab.cell_run"]  # imported inside repair_and_note_lost_tensors


def readme_layout() -> set[str]:
    """The modules the README's layout tree names: ``  name.py`` under ``xla_lab/``, ``  pkg/`` (its
    ``__init__.py``) and ``    name.py`` under it."""
    text = (PACKAGE.parent / "README.md").read_text()
    tree = text.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    found: set[str] = set()
    inside, package = False, None
    for line in tree.splitlines():
        indent, name = len(line) - len(line.lstrip(" ")), line.strip().split(" ", 1)[0]
        if not name:
            continue
        if indent == 0:
            inside = name == "xla_lab/"
        elif inside and indent == 2:
            package = name[:-1] if name.endswith("/") else None
            found.add(f"{package}/__init__.py" if package else name)
        elif inside and indent == 4 and package:
            found.add(f"{package}/{name}")
    return found


def test_the_readme_layout_names_every_module():
    tree = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    named = readme_layout()
    assert (sorted(tree - named), sorted(named - tree)) == ([], [])  # (missing from the README, not in the tree)
