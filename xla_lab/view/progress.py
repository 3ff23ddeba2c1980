"""Live progress under a running ``%%xla`` cell while XLA compiles (compiles can take minutes).

A background thread polls the recorder's ``CompileWatch`` (PT_XLA_DEBUG writes a "Compilation
Analysis" block when a compile starts) four times a second. Once a compile has run for
``SHOW_AFTER_S`` it displays a widget (the panel's ``progress`` traitlet, or an ipywidgets ``HTML``
when the panel's front end is not built): what is compiling, elapsed time, and the expected time
(how long the same graph, or the same compile of the cell's previous run, took). The display's
bundle holds only the widget view, which nbval never compares, and when the cell ends it is replaced
by an empty output, so saved notebooks stay deterministic. Nothing is shown for quick compiles, and
a cell that compiles nothing costs one ``stat`` per poll.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Callable

from xla_lab.capture.records import CellCapture
from xla_lab.capture.xla_logs import CompileInProgress, CompileWatch

from .panel_model import WIDGET_MIME

SHOW_AFTER_S = 0.5
INTERVAL_S = 0.25


def expected_compile_s(history: list[CellCapture], cell_id: str, compiling: CompileInProgress,
                       nth: int) -> float | None:
    """How long this compile should take: the same graph compiled before in this kernel, else the
    ``nth`` compile of the cell's previous run."""
    for c in reversed(history):
        for s in c.steps:
            if s.graph_hash == compiling.graph_hash and s.cache == "miss" and s.timings.get("compile_s"):
                return s.timings["compile_s"]
    previous = [c for c in history if c.cell_id == cell_id]
    if previous:
        misses = [s for s in previous[-1].steps if s.cache == "miss"]
        if nth < len(misses) and misses[nth].timings.get("compile_s"):
            return misses[nth].timings["compile_s"]
    return None


def progress_text(p: dict) -> str:
    if p.get("state") != "compiling":
        return f"xla_lab: {p.get('state', 'idle')}"
    expected = p.get("expected_s")
    tail = f" (last time {expected:.1f} s)" if expected else ""
    return f"xla_lab: compiling {p['what']}: {p['elapsed_s']:.1f} s{tail}"


class ProgressDisplay:
    """``start()`` after the recorder starts, ``stop()`` when the cell's syncs are done (idempotent).
    ``updates`` keeps every progress dict produced (what tests read)."""

    def __init__(self, watch: CompileWatch, expected: Callable[[CompileInProgress, int], float | None] | None = None,
                 *, show_after: float | None = None, interval: float | None = None):
        self.watch = watch
        self.expected = expected or (lambda compiling, nth: None)
        self.show_after = SHOW_AFTER_S if show_after is None else show_after
        self.interval = INTERVAL_S if interval is None else interval
        self.updates: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._widget = None
        self._handle = None
        self._expected_cache: dict[str, float | None] = {}

    def start(self) -> "ProgressDisplay":
        if self.watch.path is None:
            return self  # no sync log: nothing to watch
        self._thread = threading.Thread(target=self._run, name="xla_lab-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        if self.updates:
            self._emit({**self.updates[-1], "state": "done"}, final=True)

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._tick()
        except Exception:  # progress is a nicety: never let it disturb the cell
            pass

    def _tick(self) -> None:
        compiling = self.watch.poll()
        now = time.time()
        if compiling is None:
            if self.updates and self.updates[-1]["state"] == "compiling":
                self._emit({**self.updates[-1], "state": "running", "elapsed_s": self.updates[-1]["elapsed_s"]})
            return
        elapsed = now - compiling.since
        if elapsed < self.show_after and not self.updates:
            return
        key = compiling.graph_hash
        if key not in self._expected_cache:
            self._expected_cache[key] = self.expected(compiling, len(self.watch.finished))
        name = compiling.graph_name or "graph"
        what = f"{name} ({compiling.graph_hash[:12]}) for step {compiling.step}"
        self._emit({"state": "compiling", "what": what, "elapsed_s": round(elapsed, 1),
                    "expected_s": self._expected_cache[key], "step": compiling.step})

    # --- output -------------------------------------------------------------------------------
    def _emit(self, progress: dict, final: bool = False) -> None:
        self.updates.append(progress)
        try:
            self._show(progress, final)
        except Exception:
            pass

    def _show(self, progress: dict, final: bool) -> None:
        from IPython.display import display, update_display

        if final:
            if self._handle is not None:
                update_display({}, raw=True, display_id=self._handle)  # the output disappears
            if self._widget is not None:
                self._widget.close()
            return
        if self._widget is None:
            self._widget = _progress_widget()
            self._handle = f"xla-lab-progress-{self._widget.model_id}"
            display({WIDGET_MIME: {"version_major": 2, "version_minor": 1, "model_id": self._widget.model_id}},
                    raw=True, display_id=self._handle)
        if hasattr(self._widget, "progress"):
            self._widget.progress = progress
        else:
            self._widget.value = f'<code>{html.escape(progress_text(progress))}</code>'


def _progress_widget():
    from .panel import FRONTEND_BUILT, XlaPanel

    if FRONTEND_BUILT:
        return XlaPanel()  # an empty model: the panel shows only its progress line
    import ipywidgets

    return ipywidgets.HTML()
