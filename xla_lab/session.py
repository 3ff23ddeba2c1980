"""The workbench of one kernel: runtime set-up, the artifact store, the dump directory, the history."""

from __future__ import annotations

from xla_lab import runtime
from xla_lab.capture.dumps import DumpDirectory
from xla_lab.capture.records import CellCapture
from xla_lab.capture.recorder import CellRecorder
from xla_lab.capture.store import ArtifactStore


class Session:
    def __init__(self):
        self.runtime = runtime.prepare()
        self.store = ArtifactStore()
        self.dumps = DumpDirectory(self.runtime.dump_dir)
        self.history: list[CellCapture] = []

    def recorder(self, *, cell_id: str, execution_count: int | None, source: str,
                 cell_file: str | None, graph_name: str | None, track_lines: str = "auto") -> CellRecorder:
        return CellRecorder(self.runtime, self.store, self.dumps, cell_id=cell_id,
                            execution_count=execution_count, source=source, cell_file=cell_file,
                            graph_name=graph_name, track_lines=track_lines)

    def add(self, capture: CellCapture) -> None:
        self.history.append(capture)

    def clear(self) -> None:
        self.history.clear()
        self.store.clear()


_SESSION: Session | None = None


def get() -> Session:
    """The session of this process, created on first use (sets the runtime up)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = Session()
    return _SESSION


def current() -> Session | None:
    return _SESSION
