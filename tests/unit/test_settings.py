"""xla_lab's settings (``xla_lab/settings.py``): every ``XLA_LAB_*`` variable is defined there and read
there only (checked from the source), how values are read, what a bad value does, and the README's
table of them. Pure: no device, no kernel."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from xla_lab import settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "xla_lab"
NAME = re.compile(r"XLA_LAB_[A-Z0-9_]+")


def package_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


# --- read in one place --------------------------------------------------------------------------

def names_spelled_out(source: str) -> list[str]:
    """String constants that are exactly an ``XLA_LAB_`` name (a message or docstring that mentions
    one is longer text, and fine)."""
    return [node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value)]


_ENV_CALLS = {"get", "pop", "setdefault", "getenv", "putenv", "unsetenv", "__getitem__", "__setitem__"}


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every use of ``os.environ`` / ``os.getenv`` whose variable is an ``XLA_LAB_``
    name: a string constant, or a name taken from ``xla_lab.settings`` (``settings.PID_ENV``,
    ``from xla_lab.settings import LAUNCH_DIR_ENV``)."""
    tree = ast.parse(source)
    from_settings = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     and node.module == "xla_lab.settings" for a in node.names}

    def variable(expr) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            value = expr.value
        elif isinstance(expr, ast.Name) and expr.id in from_settings:
            value = getattr(settings, from_settings[expr.id], None)
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "settings":
            value = getattr(settings, expr.attr, None)
        else:
            return None
        return value if isinstance(value, str) and NAME.fullmatch(value) else None

    def is_environ(expr) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or \
            (isinstance(expr, ast.Name) and expr.id == "environ")

    found = []
    for node in ast.walk(tree):
        keys = []
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ENV_CALLS \
                and (is_environ(node.func.value) or node.func.attr in ("getenv", "putenv", "unsetenv")):
            keys = node.args[:1]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getenv":
            keys = node.args[:1]
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            keys = [node.left]
        found += [(node.lineno, v) for v in map(variable, keys) if v]
    return found


def test_no_module_but_settings_spells_out_an_xla_lab_variable():
    spelled = {path: names for path, source in package_sources().items()
               if path != "xla_lab/settings.py" and (names := names_spelled_out(source))}
    assert not spelled, f"XLA_LAB_ names belong in xla_lab/settings.py: {spelled}"


def test_no_module_but_settings_reads_an_xla_lab_setting_from_the_environment():
    """Only the internal names (written by xla_lab for its own processes) are read where they are used."""
    read = {path: [(line, v) for line, v in environment_reads(source) if v not in settings.INTERNAL]
            for path, source in package_sources().items() if path != "xla_lab/settings.py"}
    read = {k: v for k, v in read.items() if v}
    assert not read, f"read the setting from xla_lab.settings.current() instead: {read}"
    internal = {v for source in package_sources().values() for _, v in environment_reads(source)}
    assert internal == set(settings.INTERNAL)  # (the check sees them: it would see a setting read the same way)


def test_the_checks_see_every_way_of_reading_the_environment():
    source = '''
import os
from os import environ, getenv
from xla_lab import settings
from xla_lab.settings import LAUNCH_DIR_ENV as here
a = os.environ.get("XLA_LAB_A")
b = os.environ["XLA_LAB_B"]
c = os.getenv("XLA_LAB_C", "1")
d = "XLA_LAB_D" in os.environ
e = environ.get(settings.PID_ENV)
f = getenv(here)
os.environ.setdefault("XLA_LAB_G", "1")
fine = os.environ.get("HOME"), "set XLA_LAB_A=1 to ...", os.environ.get(settings.name("save"))
'''
    assert [v for _, v in environment_reads(source)] == \
        ["XLA_LAB_A", "XLA_LAB_B", "XLA_LAB_C", "XLA_LAB_D", "XLA_LAB_PID", "XLA_LAB_LAUNCH_DIR", "XLA_LAB_G"]
    assert names_spelled_out(source) == ["XLA_LAB_A", "XLA_LAB_B", "XLA_LAB_C", "XLA_LAB_D", "XLA_LAB_G"]


def test_every_xla_lab_name_xla_lab_mentions_is_defined():
    """Messages, docstrings, the README and the browser side name only variables that exist."""
    texts = dict(package_sources())
    texts["README.md"] = (ROOT / "README.md").read_text()
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "extension" / "src").rglob("*.ts"))})
    known = set(settings.BY_NAME) | set(settings.INTERNAL)
    unknown = {path: sorted(set(NAME.findall(text)) - known) for path, text in texts.items()}
    assert not {k: v for k, v in unknown.items() if v}


def test_every_setting_is_defined_once_with_a_one_line_doc():
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names)) and all(NAME.fullmatch(n) for n in names)
    assert not set(names) & set(settings.INTERNAL)
    for s in settings.SETTINGS:
        assert s.doc and "\n" not in s.doc and s.values and "\n" not in s.values, s.name
        assert getattr(settings.read({}), s.attr) == s.default
        assert settings.name(s.attr) == s.name
    assert settings.read({}).problems == ()


# --- how values are read ------------------------------------------------------------------------

def test_counts():
    s = settings.read({"XLA_LAB_MAX_GRAPHS": "7", "XLA_LAB_MAX_GRAPH_MB": " 3 ", "XLA_LAB_MAX_HISTORY": "0",
                       "XLA_LAB_MAX_PANELS": "12"})
    assert (s.max_graphs, s.max_graph_mb, s.max_history, s.max_panels, s.problems) == (7, 3, 0, 12, ())


def test_an_empty_value_is_no_value():
    s = settings.read({n: "" for n in settings.BY_NAME} | {"XLA_LAB_MAX_GRAPHS": "  "})
    assert s == settings.read({})


def test_a_count_that_is_not_a_number_keeps_the_default_and_says_so():
    s = settings.read({"XLA_LAB_MAX_GRAPHS": "not a number", "XLA_LAB_MAX_HISTORY": "1.5"})
    assert s.max_graphs == 200 and s.max_history == 1000
    assert s.problems == (
        "XLA_LAB_MAX_GRAPHS='not a number' is not a whole number (a count; 0 = no cap): using the default, 200",
        "XLA_LAB_MAX_HISTORY='1.5' is not a whole number (a count; 0 = keep all): using the default, 1000")


def test_a_negative_count_is_0_as_it_always_was_and_says_so():
    s = settings.read({"XLA_LAB_MAX_PANELS": "-5"})
    assert s.max_panels == 0
    assert s.problems == ("XLA_LAB_MAX_PANELS='-5' is below 0 (a count; 0 = no cap): using 0",)


def test_save():
    assert settings.read({"XLA_LAB_SAVE": " Summary "}).save == "summary"
    s = settings.read({"XLA_LAB_SAVE": "html"})
    assert s.save == "full"
    assert s.problems == ("XLA_LAB_SAVE='html' is not a choice (full or summary): using the default, 'full'",)


@pytest.mark.parametrize("text, on, said", [("1", True, False), ("0", False, False), (" 0 ", False, False),
                                            ("yes", True, True), ("false", True, True)])
def test_ir_log_is_on_for_any_value_but_0(text, on, said):
    s = settings.read({"XLA_LAB_IR_LOG": text})
    assert s.ir_log is on and bool(s.problems) is said
    if said:
        assert s.problems[0].endswith("using on (any value but 0 turns it on)")


@pytest.mark.parametrize("text, on, said", [("1", True, False), ("0", False, False), ("off", True, True)])
def test_persistent_cache_is_off_for_0_only(text, on, said):
    s = settings.read({"XLA_LAB_PERSISTENT_CACHE": text})
    assert s.persistent_cache is on and bool(s.problems) is said


def test_peaks():
    assert settings.read({"XLA_LAB_PEAKS": "197e12,819e9"}).peaks == (197e12, 819e9)
    for text in ("197e12", "1,2,3", "fast,slow", "0,5", "-1,5"):
        s = settings.read({"XLA_LAB_PEAKS": text})
        assert s.peaks == settings.PEAKS_UNREADABLE, text
        assert s.problems == (f"XLA_LAB_PEAKS={text!r} is not two positive numbers (FLOPS,BYTES, e.g. 197e12,819e9): "
                              "using no peaks (no roofline)",)


def test_read_once_until_reloaded_and_problems_said_once(monkeypatch, capsys):
    before = settings.current()
    try:
        monkeypatch.setenv("XLA_LAB_MAX_HISTORY", "17")
        monkeypatch.setenv("XLA_LAB_SAVE", "everything")
        assert settings.current() is before  # read at first use, not again
        reread = settings.reload()
        assert reread.max_history == 17 and reread.save == "full" and settings.current() is reread
        assert capsys.readouterr().err == ("xla_lab: XLA_LAB_SAVE='everything' is not a choice (full or summary): "
                                           "using the default, 'full'\n")
        settings.current()
        assert capsys.readouterr().err == ""
        assert settings.reload({"XLA_LAB_MAX_HISTORY": "3"}).max_history == 3  # (tests: any mapping)
    finally:
        monkeypatch.undo()
        settings.reload()
        capsys.readouterr()


# --- the users take their values from here ----------------------------------------------------

@pytest.fixture
def reread():
    """``reread(environ)``: the settings of ``environ`` for the test; the real ones again afterwards."""
    yield settings.reload
    settings.reload()


def test_the_modules_take_their_values_from_settings(reread):
    from xla_lab import runtime
    from xla_lab.capture.store import ArtifactStore
    from xla_lab.precompile import persistent
    from xla_lab.profile import peaks

    reread({"XLA_LAB_MAX_GRAPHS": "5", "XLA_LAB_MAX_GRAPH_MB": "2", "XLA_LAB_IR_LOG": "1",
            "XLA_LAB_PERSISTENT_CACHE": "0", "XLA_LAB_PEAKS": "2e12,1e11"})
    store = ArtifactStore()
    assert (store.max_graphs, store.max_bytes) == (5, 2 << 20)
    assert runtime.ir_log_requested()
    assert persistent.enable("TPU") == "off (XLA_LAB_PERSISTENT_CACHE=0)"
    assert peaks.peaks("TPU") == {"flops_per_s": 2e12, "bytes_per_s": 1e11, "source": "XLA_LAB_PEAKS"}
    reread({"XLA_LAB_PEAKS": "2e12"})
    assert peaks.peaks("CPU") is None  # set but unreadable: unknown, as before (not measured)


# --- the README -------------------------------------------------------------------------------

def readme_rows() -> list[str]:
    def default(s):
        if isinstance(s.default, bool):
            return "on" if s.default else "off"
        return "unset" if s.default is None else str(s.default)

    return [f"| `{s.name}` | {default(s)} | {s.values} | {s.doc} |" for s in settings.SETTINGS]


def test_the_readme_lists_every_setting_as_defined():
    readme = (ROOT / "README.md").read_text()
    missing = [row for row in readme_rows() if row not in readme]
    assert not missing, "the README's table of settings should have these rows:\n" + "\n".join(readme_rows())
