"""Read what torch_xla writes about each sync.

Two files, both appended to by torch_xla's C++ on every sync (explicit or implicit), set up by
``xla_lab.runtime``:

* the ``PT_XLA_DEBUG_FILE`` (``PT_XLA_DEBUG_LEVEL=2``): a "Compilation Analysis" block before each
  compile and an "Execution Analysis" block before each execution, with the graph hash, graph name
  and the Python frames that triggered it. This is the only place implicit syncs (``.item()``,
  ``print``) are visible from.
* the ``XLA_SAVE_TENSORS_FILE``: the lazy IR text of every synced graph, closed by its graph hash.

Both are read from an offset and truncated between cells, so they stay small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_PREFIXES = {
    "Compilation Analysis: ": "compile",
    "Execution Analysis: ": "execute",
    "Unexpected Execution Analysis: ": "execute",
}


@dataclass
class Frame:
    function: str
    file: str
    line: int


@dataclass
class SyncEvent:
    """One compile or execution as torch_xla's debug analysis reported it."""

    kind: str  # "compile" | "execute"
    xla_cause: str = ""
    graph_name: str | None = None
    graph_hash: str = ""
    n_inputs: int | None = None
    n_outputs: int | None = None
    frames: list[Frame] = field(default_factory=list)


@dataclass
class IrGraph:
    """The lazy IR of one synced graph, from the saved-tensors file."""

    graph_hash: str
    graph_name: str | None
    ir_text: str
    frames: list[Frame] = field(default_factory=list)


def parse_debug_log(text: str) -> list[SyncEvent]:
    """Parse PT_XLA_DEBUG analysis blocks into events, in the order they happened."""
    events: list[SyncEvent] = []
    current: SyncEvent | None = None
    section = None
    for raw in text.splitlines():
        prefix = next((p for p in _PREFIXES if raw.startswith(p)), None)
        if prefix is None:
            continue  # post-compilation sizes, computation hashes, blank lines
        kind = _PREFIXES[prefix]
        body = raw[len(prefix):]
        if body.startswith("====="):
            if current is None:
                current = SyncEvent(kind=kind)
                section = None
            else:
                events.append(current)
                current = None
            continue
        if current is None:
            continue
        stripped = body.strip()
        if stripped in ("Compilation Cause", "Execution Cause"):
            section = "cause"
        elif stripped == "Graph Info:":
            section = "info"
        elif stripped == "Python Frame Triggered Execution:":
            section = "frames"
        elif body.startswith("-----"):
            section = None
        elif section == "cause":
            current.xla_cause = (current.xla_cause + " " + stripped).strip()
        elif section == "info":
            key, _, value = stripped.partition(": ")
            if key == "Graph Name":
                current.graph_name = value
            elif key == "Graph Hash":
                current.graph_hash = value
            elif key == "Number of Graph Inputs":
                current.n_inputs = int(value)
            elif key == "Number of Graph Outputs":
                current.n_outputs = int(value)
        elif section == "frames":
            m = _FRAME.match(body)
            if m:
                current.frames.append(Frame(m["function"], m["file"], int(m["line"])))
    return events


def parse_ir_log(text: str) -> list[IrGraph]:
    """Parse the saved-tensors file (text format) into one ``IrGraph`` per synced graph."""
    graphs: list[IrGraph] = []
    for block in text.split("[ScheduleSyncTensorsGraph]\n")[1:]:
        head, sep, rest = block.partition("\n## BEGIN_GRAPH\n")
        if not sep:
            continue
        graph_text, sep, tail = rest.partition("\nGraph Hash: ")
        if not sep:
            continue  # the sync is still being written (or failed before hashing)
        graph_hash = tail.split("\n", 1)[0].strip()
        name = None
        frames = []
        for line in head.splitlines():
            if line.startswith("Graph Name: "):
                name = line[len("Graph Name: "):]
            m = _FRAME.match(line)
            if m:
                frames.append(Frame(m["function"], m["file"], int(m["line"])))
        graphs.append(IrGraph(graph_hash, name, graph_text.strip() + "\n", frames))
    return graphs


class AppendedLog:
    """A file torch_xla appends to; we read what is new and then empty it."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read_and_reset(self) -> str:
        try:
            with open(self.path, "r+", encoding="utf-8", errors="replace") as f:
                text = f.read()
                f.seek(0)
                f.truncate()
        except FileNotFoundError:
            return ""
        return text
