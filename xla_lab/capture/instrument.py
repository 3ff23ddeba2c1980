"""What xla_lab attaches to torch_xla while a ``%%xla`` cell runs: a hook on explicit syncs
(timestamps, whether the sync compiled or ran anything, CPU-fallback counts at that moment), the
switch for source lines on traced ops, and the fallback counters. Their records are joined with
torch_xla's logs by ``capture/steps.py``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from .frames import is_internal
from .metrics import NOT_FALLBACKS
from .steps import HOOK_FUNCTION, ExplicitSync

CACHED_RUN_FUNCTION = "_xla_lab_cached_run"
from .xla_logs import Frame


class LineTracking:
    """Source locations on IR nodes (``XLA_IR_DEBUG``) cost a Python stack walk per traced op, which
    in a fast cached loop is a third of the step. They only matter for graphs that get compiled, so
    in ``auto`` mode tracking pauses once a cell's explicit syncs hit the cache twice in a row and
    resumes after any compile. A graph first compiled while paused has op types but no lines."""

    STEADY_AFTER = 2

    def __init__(self, mode: str = "auto"):
        import torch_xla

        self._xlac = torch_xla._XLAC
        self.mode = mode
        self.hits_in_a_row = 0
        self.paused = False
        self.compiled_while_paused = 0

    def start(self) -> None:
        self._set(True)

    def after_sync(self, compiled: bool, executed: bool) -> None:
        if compiled:
            if self.paused:
                self.compiled_while_paused += 1
            self.hits_in_a_row = 0
            self._set(True)
        elif executed:
            self.hits_in_a_row += 1
            if self.mode == "auto" and self.hits_in_a_row >= self.STEADY_AFTER:
                self._set(False)

    def stop(self) -> None:
        self._set(True)  # outside %%xla cells, graphs compile with their lines

    def _set(self, on: bool) -> None:
        self.paused = not on
        self._xlac._set_ir_debug(on)


class SyncHook:
    """Wraps ``torch_xla._XLAC._xla_step_marker`` (what ``torch_xla.sync`` and ``xm.mark_step``
    call) to timestamp explicit syncs. Costs a few clock and counter reads and one ``stat`` per sync."""

    def __init__(self, debug_file: str, tracking: LineTracking, frames: bool = False, cell_file: str | None = None):
        """``frames``: record each sync's caller frames up to ``cell_file``'s (lean capture: torch_xla's
        per-execution analysis, which logs them, is off)."""
        import torch_xla

        self._xlac = torch_xla._XLAC
        self._debug_file = debug_file
        self._original = None
        self._original_run = None  # torch_xla's _run_cached_graph, while lean capture wraps it
        self.records: list[ExplicitSync] = []
        self.final_pending = False
        self.tracking = tracking
        self.frames = frames
        self.cell_file = cell_file
        # called with ``executed`` after each explicit sync of the cell (e.g. a profiler window that
        # closes after N steps); their time is the sync record's ``held_s``, not the user's
        self.listeners: list[Callable[[bool], None]] = []

    def install(self) -> None:
        if self._original is not None:
            return
        original = self._xlac._xla_step_marker
        if getattr(original, "__name__", "") == HOOK_FUNCTION:  # left over from a crashed run
            original = original.__wrapped__
        self._original = original
        records = self.records
        debug_file = self._debug_file
        hook = self
        tracking = self.tracking
        listeners = self.listeners
        compiles = self._xlac._xla_counter_value
        with_frames = self.frames
        cell_file = self.cell_file

        def _xla_lab_step_marker(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841  (an error of the sync shows at the user's line)
            record = ExplicitSync(enter=time.time(), final=hook.final_pending, fallbacks=fallback_counts())
            if with_frames:
                record.frames = caller_frames(sys._getframe(1), cell_file)
            size = _size(debug_file)
            uncached = compiles("UncachedCompile")
            cached = compiles("CachedCompile")
            done = False
            try:
                out = original(*args, **kwargs)
                done = True
                return out
            finally:
                returned = time.time()
                # A sync that raised (XLA rejected the graph) logged a compile but ran nothing.
                # (lean capture's log has no block for a cache hit: torch_xla's counters tell)
                record.executed = done and (_size(debug_file) != size or compiles("CachedCompile") != cached
                                            or compiles("UncachedCompile") != uncached)
                records.append(record)
                tracking.after_sync(compiled=compiles("UncachedCompile") != uncached, executed=record.executed)
                for listener in listeners:
                    listener(record.executed)
                record.exit = time.time()
                if listeners:
                    record.held_s = record.exit - returned

        _xla_lab_step_marker.__wrapped__ = original
        self._xlac._xla_step_marker = _xla_lab_step_marker
        if with_frames:
            self._wrap_cached_runs()

    def _wrap_cached_runs(self) -> None:
        """Lean capture: torch.compile's openxla backend runs the graphs it traced through
        ``_run_cached_graph(hash, inputs)``; torch_xla logs no frames for them at the compile-only level,
        so the hook records each call (when, the graph's hash, the caller's frames) as a record of its own."""
        original = getattr(self._xlac, "_run_cached_graph", None)
        if original is None or self._original_run is not None:
            return
        if getattr(original, "__name__", "") == CACHED_RUN_FUNCTION:
            original = original.__wrapped__
        self._original_run = original
        records, cell_file = self.records, self.cell_file

        def _xla_lab_cached_run(graph_hash, *args, **kwargs):
            __tracebackhide__ = True  # noqa: F841
            record = ExplicitSync(enter=time.time(), executed=True, frames=caller_frames(sys._getframe(1), cell_file),
                                  graph_hash=bytes(graph_hash)[::-1].hex() if isinstance(graph_hash, bytes) else None)
            try:
                return original(graph_hash, *args, **kwargs)
            finally:
                record.exit = time.time()
                records.append(record)

        _xla_lab_cached_run.__wrapped__ = original
        self._xlac._run_cached_graph = _xla_lab_cached_run

    def uninstall(self) -> None:
        if self._original is not None:
            self._xlac._xla_step_marker = self._original
            self._original = None
        if self._original_run is not None:
            self._xlac._run_cached_graph = self._original_run
            self._original_run = None


def caller_frames(frame, cell_file: str | None, limit: int = 32) -> list[Frame]:
    """The frames from ``frame`` outwards (innermost first), as the sync log would list them, up to the
    running cell's (at most ``limit``): a few attribute reads per frame."""
    out = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append(Frame(code.co_name, code.co_filename, frame.f_lineno))
        if code.co_filename == cell_file:
            break
        frame = frame.f_back
    return out


def fallback_counts() -> dict[str, int]:
    """Cumulative count per CPU-fallback op (about 1 us when there are none)."""
    import torch_xla

    xlac = torch_xla._XLAC
    names = xlac._get_executed_fallback_ops()
    if not names:
        return {}
    return {n.removeprefix("aten::"): xlac._xla_counter_value(n) or 0 for n in names if n not in NOT_FALLBACKS}


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
