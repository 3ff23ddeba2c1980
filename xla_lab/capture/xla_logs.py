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

import os
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


_EDGE_MARK = " Analysis: ===="
_EDGE_LINES = ("Compilation Analysis: ====", "Execution Analysis: ====", "Unexpected Execution Analysis: ====")


def hash_text(raw: bytes) -> str:
    """A graph hash as torch_xla's logs write it (``torch::lazy::HashToString``: the high 64 bits in
    hex without padding, then the low 64 bits padded to 16 digits), from the 16 little-endian bytes
    its Python bindings hand over. Plain hex of the bytes pads the high half, and one hash in 16 would
    then not match the same graph's compile in the logs."""
    value = int.from_bytes(bytes(raw), "little")
    return f"{value >> 64:x}{value & (2**64 - 1):016x}"


def parse_debug_log(text: str) -> list[SyncEvent]:
    """Parse PT_XLA_DEBUG analysis blocks into events, in the order they happened.

    A block starts and ends with a ``... Analysis: ====`` line. A cached loop writes the same block
    (same graph, same frames) on every step, so each distinct block is parsed once and the same event
    object stands for every copy: events are read-only. A 1,000-step cell is read in milliseconds."""
    edges = []
    at = text.find(_EDGE_MARK)
    while at != -1:
        line_start = text.rfind("\n", 0, at) + 1
        if text.startswith(_EDGE_LINES, line_start):
            edges.append(line_start)
        at = text.find(_EDGE_MARK, at + len(_EDGE_MARK))
    parsed: dict[str, SyncEvent] = {}
    events: list[SyncEvent] = []
    for start, end in zip(edges[::2], edges[1::2]):
        block = text[start:end]
        event = parsed.get(block)
        if event is None:
            event = parsed[block] = _parse_block(block)
        events.append(event)
    return events


def _parse_block(block: str) -> SyncEvent:
    """One analysis block, without its closing line."""
    lines = block.splitlines()
    prefix = next(p for p in _PREFIXES if lines[0].startswith(p))
    current = SyncEvent(kind=_PREFIXES[prefix])
    section = None
    for raw in lines[1:]:
        if not raw.startswith(prefix):
            continue
        body = raw[len(prefix):]
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
    return current


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


@dataclass
class CompileInProgress:
    """A compile torch_xla announced (its "Compilation Analysis" block) and has not finished yet."""

    graph_hash: str
    graph_name: str | None
    since: float  # when the watch first saw it (unix time)
    step: int  # index of the step it compiles for (executions seen before it in this cell)


_EXEC_MARKS = ("\nExecution Analysis: ====", "\nUnexpected Execution Analysis: ====")
_DONE_PREFIXES = ("Post Compilation Analysis: ", "Execution Analysis: ", "Unexpected Execution Analysis: ")
_INFO = re.compile(r"^Compilation Analysis:\s+Graph (Hash|Name): (.*?)\s*$")


class CompileWatch:
    """Follows the PT_XLA_DEBUG file while a cell runs (without consuming it: the recorder reads it
    after the cell) and says whether a compile is in progress. ``poll()`` costs one ``stat`` when
    nothing was written and a few C-level string searches of what was; it never parses execution
    blocks, so a fast cached loop is not slowed by it."""

    def __init__(self, path: Path | str | None, clock=None):
        import time

        self.path = str(path) if path else None
        self._clock = clock or time.time
        self._offset = 0
        self._carry = "\n"  # an incomplete last line, kept for the next read (starts as a line break)
        self._in_compile = False  # inside a "Compilation Analysis" block whose compile has not ended
        self._exec_marks = 0
        self.current: CompileInProgress | None = None
        self.finished: list[tuple[CompileInProgress, float]] = []  # (compile, when its end was seen)

    def poll(self) -> CompileInProgress | None:
        if self.path is None:
            return None
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return self.current
        if size < self._offset:  # truncated by someone reading it: start over
            self._offset, self._carry, self._in_compile = 0, "\n", False
        if size == self._offset:
            return self.current
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        self._offset += len(data)
        text = self._carry + data.decode("utf-8", "replace")
        cut = text.rfind("\n") + 1
        text, self._carry = text[:cut], "\n" + text[cut:] if cut < len(text) else "\n"
        self._scan(text)
        return self.current

    def _scan(self, text: str) -> None:
        if self.current is None and not self._in_compile and "\nCompilation Analysis: " not in text:
            self._exec_marks += sum(text.count(m) for m in _EXEC_MARKS)  # the common case: C-level counts
            return
        now = self._clock()
        info: dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("Compilation Analysis: "):
                self._in_compile = True
                m = _INFO.match(line)
                if m:
                    info[m[1]] = m[2]
                if self.current is None and "Hash" in info:
                    self.current = CompileInProgress(info["Hash"], info.get("Name") or None, now,
                                                     self._exec_marks // 2)
                elif self.current is not None and m and m[1] == "Name":
                    self.current.graph_name = m[2] or None
            elif line.startswith(_DONE_PREFIXES):
                if self.current is not None:
                    self.finished.append((self.current, now))
                self.current, self._in_compile, info = None, False, {}
                if "====" in line and not line.startswith("Post"):
                    self._exec_marks += 1
