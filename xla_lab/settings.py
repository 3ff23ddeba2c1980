"""xla_lab's settings: every ``XLA_LAB_*`` environment variable a user may set, defined once here (its
name, default, how its value is read, and what it does), and read from the environment once, at first
use (``current()``: in a kernel, during ``%load_ext xla_lab``). Set them before that; ``reload()``
reads the environment again. Every other module takes its value from here (``tests/unit/test_settings.py``
fails if one reads an ``XLA_LAB_`` variable itself). This module imports nothing of xla_lab's, so any
layer may import it.

A value that cannot be read keeps what xla_lab always did with it (the default, mostly) and says so,
once, on stderr, when the settings are read. An empty value is the same as no value.

Two ``XLA_LAB_`` names are not settings: xla_lab writes them for its own processes (``INTERNAL``). They
are named here so every ``XLA_LAB_`` name is in one place, but read where they are written, each time:
their values change while the kernel runs.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

SAVE_CHOICES = ("full", "summary")  # XLA_LAB_SAVE, %xla save, %%xla --save
CAPTURE_MODES = ("full", "lean")  # XLA_LAB_CAPTURE, %xla mode

# Written by xla_lab for itself, not by users (see the module's docstring).
PID_ENV = "XLA_LAB_PID"
LAUNCH_DIR_ENV = "XLA_LAB_LAUNCH_DIR"
INTERNAL = {
    PID_ENV: "the process whose xla_lab set the runtime's environment up (runtime.py): a child process "
             "that inherits that environment knows the dump settings are its parent's, not the user's",
    LAUNCH_DIR_ENV: "the directory of one multi-process launch (launch.py), set for its workers "
                    "(capture/worker.py) while the launch starts them",
}


class BadValue(ValueError):
    """A value a setting cannot read: ``why`` it cannot, and what is used instead (``use``; the
    default when not given)."""

    _DEFAULT = object()

    def __init__(self, why: str, use: Any = _DEFAULT, used: str | None = None):
        super().__init__(why)
        self.why, self.use, self.used = why, use, used


@dataclass(frozen=True)
class Setting:
    name: str  # the environment variable
    default: Any
    parse: Callable[[str], Any]  # the value of a non-empty text; raises BadValue
    doc: str  # one line: what it does
    values: str  # the values it takes, for the README's table and the messages
    attr: str = ""  # the field of Settings that holds it


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise BadValue("is not a whole number") from None
    if n < 0:
        raise BadValue("is below 0", use=0, used="0")
    return n


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise BadValue("is not a choice")
        return value

    return parse


def _switch(other_values: str) -> Callable[[str], bool]:
    """A switch: ``0`` is off, ``1`` is on, and any other value is on too (as it always was), saying so
    with ``other_values`` (how the setting reads such a value)."""
    def parse(text: str) -> bool:
        if text.strip() == "0":
            return False
        if text.strip() != "1":
            raise BadValue("is not 0 or 1", use=True, used=f"on ({other_values})")
        return True

    return parse


PEAKS_UNREADABLE: tuple[float, ...] = ()  # XLA_LAB_PEAKS was set but cannot be read: the peaks are unknown


def _peaks(text: str) -> tuple[float, ...]:
    try:
        flops, moved = (float(v) for v in text.split(","))
    except ValueError:
        flops = moved = None
    if flops is None or not (flops > 0 and moved > 0):
        raise BadValue("is not two positive numbers", use=PEAKS_UNREADABLE, used="no peaks (no roofline)")
    return (flops, moved)


def _setting(name: str, default: Any, parse: Callable[[str], Any], values: str, doc: str):
    return field(default=default, metadata={"setting": Setting(name, default, parse, doc, values)})


@dataclass(frozen=True)
class Settings:
    """The settings' values (one field each) and the problems met reading them."""

    max_graphs: int = _setting(
        "XLA_LAB_MAX_GRAPHS", 200, _count, "a count; 0 = no cap",
        "graphs whose text (HLO, buffer assignment, rebuilt graph) and analysis the session keeps, least recently used dropped first")
    max_graph_mb: int = _setting(
        "XLA_LAB_MAX_GRAPH_MB", 256, _count, "MiB; 0 = no cap",
        "MiB of stored graph text the session keeps, least recently used graphs dropped first")
    max_history: int = _setting(
        "XLA_LAB_MAX_HISTORY", 1000, _count, "a count; 0 = keep all",
        "%%xla cell runs whose captures the history keeps, oldest dropped first")
    max_panels: int = _setting(
        "XLA_LAB_MAX_PANELS", 1000, _count, "a count; 0 = no cap",
        "displayed panels whose widgets the kernel keeps live; older ones are closed (their saved outputs stay)")
    save: str = _setting(
        "XLA_LAB_SAVE", "full", _choice(SAVE_CHOICES), " or ".join(SAVE_CHOICES),
        "what notebooks keep of a %%xla output until %xla save changes it: every view, or a summary to share")
    capture: str = _setting(
        "XLA_LAB_CAPTURE", "full", _choice(CAPTURE_MODES), " or ".join(CAPTURE_MODES),
        "what %%xla records: full (XLA's dump: every view; a compile takes about 1.1-1.4x as long) or lean "
        "(no dump, modules from the compile's profiler session: no graph before optimization, near-plain speed)")
    ir_log: bool = _setting(
        "XLA_LAB_IR_LOG", False, _switch("any value but 0 turns it on"), "1 = on, 0 = off",
        "torch_xla's own lazy-IR text of every sync, cache hits too (costly); off, the graph is rebuilt from the HLO")
    persistent_cache: bool = _setting(
        "XLA_LAB_PERSISTENT_CACHE", True, _switch("only 0 turns it off"), "0 = off, 1 = on",
        "XLA's persistent compile cache per notebook, on clients that can read it back (TPU, GPU)")
    compile_profile: bool = _setting(
        "XLA_LAB_COMPILE_PROFILE", True, _switch("only 0 turns it off"), "0 = off, 1 = on",
        "a profiler session open while a cell's syncs may compile: where each compile's seconds went")
    peaks: tuple[float, ...] | None = _setting(
        "XLA_LAB_PEAKS", None, _peaks, "FLOPS,BYTES, e.g. 197e12,819e9",
        "the device's peak FLOP/s and bytes/s for the roofline; unset, the CPU client measures them once")
    problems: tuple[str, ...] = ()  # one message per value that could not be read


SETTINGS: tuple[Setting, ...] = tuple(replace(f.metadata["setting"], attr=f.name)
                                      for f in fields(Settings) if "setting" in f.metadata)
BY_NAME = {s.name: s for s in SETTINGS}


def name(attr: str) -> str:
    """The environment variable of the field ``attr`` of ``Settings`` (``name("peaks")`` is XLA_LAB_PEAKS)."""
    return next(s.name for s in SETTINGS if s.attr == attr)


def read(environ: Mapping[str, str]) -> Settings:
    """The settings in ``environ`` (pure: nothing is printed; problems are in ``.problems``)."""
    values: dict[str, Any] = {}
    problems = []
    for s in SETTINGS:
        text = environ.get(s.name)
        if text is None or not text.strip():
            values[s.attr] = s.default
            continue
        try:
            values[s.attr] = s.parse(text)
        except BadValue as bad:
            value = s.default if bad.use is BadValue._DEFAULT else bad.use
            values[s.attr] = value
            used = bad.used or f"the default, {s.default!r}"
            problems.append(f"{s.name}={text!r} {bad.why} ({s.values}): using {used}")
    return Settings(**values, problems=tuple(problems))


_CURRENT: Settings | None = None
_LOCK = threading.RLock()


def current() -> Settings:
    """The settings of this process, read from the environment at first use (problems go to stderr,
    once)."""
    if _CURRENT is None:
        with _LOCK:
            if _CURRENT is None:
                reload()
    return _CURRENT


def reload(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings again, from ``environ`` (default ``os.environ``), and say what could not be read."""
    global _CURRENT
    with _LOCK:
        _CURRENT = read(os.environ if environ is None else environ)
        for problem in _CURRENT.problems:
            print(f"xla_lab: {problem}", file=sys.stderr)
        return _CURRENT
