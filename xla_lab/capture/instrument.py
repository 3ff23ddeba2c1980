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

from .xla_logs import Frame, hash_text

CACHED_RUN_FUNCTION = "_xla_lab_cached_run"
TENSOR_SYNC_FUNCTION = "_xla_lab_tensor_sync"


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
            if not self.paused and self.mode == "auto" and self.hits_in_a_row >= self.STEADY_AFTER:
                self._set(False)  # (once: a steady loop's later syncs touch nothing here)

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
        self._originals: dict[str, Callable] = {}  # what lean capture wraps besides: name -> torch_xla's own
        self.records: list[ExplicitSync] = []
        self.final_pending = False
        self.tracking = tracking
        self.frames = frames
        self.cell_file = cell_file
        # called with ``executed`` and torch_xla's UncachedCompile count after each explicit sync of the
        # cell (e.g. a profiler window that closes after N steps); their time is the sync record's
        # ``held_s``, not the user's
        self.listeners: list[Callable[[bool, int], None]] = []

    def install(self) -> None:
        if self._original is not None:
            return
        original = self._xlac._xla_step_marker
        if getattr(original, "__name__", "") == HOOK_FUNCTION:  # left over from a crashed run
            original = original.__wrapped__
        self._original = original
        # Everything the hook calls is bound here once: it runs on every sync of a cached loop, where each
        # attribute or module lookup is a share of the step (see "Capture modes" in the README).
        records = self.records
        debug_file = self._debug_file
        hook = self
        after_sync = self.tracking.after_sync
        listeners = self.listeners
        compiles = self._xlac._xla_counter_value
        fallback_ops = self._xlac._get_executed_fallback_ops
        frames_of = CallerFrames(self.cell_file) if self.frames else None
        now = time.time
        get_frame = sys._getframe

        def _xla_lab_step_marker(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841  (an error of the sync shows at the user's line)
            ops = fallback_ops()
            record = ExplicitSync(now(), final=hook.final_pending, fallbacks=_counts(compiles, ops) if ops else {})
            # full capture: an execution writes a block to the sync log; lean capture's log has blocks for
            # compiles only, so torch_xla's counters tell (a cache hit counts as a cached compile)
            if frames_of is not None:
                record.frames = frames_of(get_frame(1))
                size = -1
                cached = compiles("CachedCompile")
            else:
                size = _size(debug_file)
            uncached = compiles("UncachedCompile")
            done = False
            try:
                out = original(*args, **kwargs)
                done = True
                return out
            finally:
                returned = now()
                uncached_now = compiles("UncachedCompile")
                compiled = uncached_now != uncached
                # A sync that raised (XLA rejected the graph) logged a compile but ran nothing.
                if frames_of is not None:
                    record.executed = done and (compiled or compiles("CachedCompile") != cached)
                else:
                    record.executed = done and _size(debug_file) != size
                records.append(record)
                after_sync(compiled, record.executed)
                if listeners:
                    for listener in listeners:
                        listener(record.executed, uncached_now or 0)
                    record.exit = now()
                    record.held_s = record.exit - returned
                else:
                    record.exit = returned

        _xla_lab_step_marker.__wrapped__ = original
        self._xlac._xla_step_marker = _xla_lab_step_marker
        if self.frames:
            self._wrap_cached_runs()

    def _wrap_cached_runs(self) -> None:
        """Lean capture: torch.compile's openxla backend first syncs the graph's pending inputs
        (``_xla_sync_multi``, and waits), then runs the graph it traced (``_run_cached_graph(hash,
        inputs)``). torch_xla logs no frames for either at the compile-only level, so the hook records
        each call (when, the graph's hash, the caller's frames) as a record of its own: each hands over
        one execution, in order, which is how ``steps._owners`` tells them from the syncs around them."""
        for name, wrapper_name, wrap in (("_run_cached_graph", CACHED_RUN_FUNCTION, self._cached_run),
                                         ("_xla_sync_multi", TENSOR_SYNC_FUNCTION, self._tensor_sync)):
            original = getattr(self._xlac, name, None)
            if original is None or name in self._originals:
                continue
            if getattr(original, "__name__", "") == wrapper_name:  # left over from a crashed run
                original = original.__wrapped__
            self._originals[name] = original
            setattr(self._xlac, name, wrap(original))

    def _cached_run(self, original):
        records, frames_of = self.records, CallerFrames(self.cell_file)

        def _xla_lab_cached_run(graph_hash, *args, **kwargs):
            __tracebackhide__ = True  # noqa: F841
            record = ExplicitSync(enter=time.time(), executed=True, frames=frames_of(sys._getframe(1)),
                                  graph_hash=hash_text(graph_hash) if isinstance(graph_hash, bytes) else None)
            try:
                return original(graph_hash, *args, **kwargs)
            finally:
                record.exit = time.time()
                records.append(record)

        _xla_lab_cached_run.__wrapped__ = original
        return _xla_lab_cached_run

    def _tensor_sync(self, original):
        records, frames_of, compiles = self.records, CallerFrames(self.cell_file), self._xlac._xla_counter_value

        def _xla_lab_tensor_sync(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841
            record = ExplicitSync(enter=time.time(), frames=frames_of(sys._getframe(1)), tensors=True)
            # (it runs a graph only if the tensors had pending work: a compile or a cache hit says so)
            before = (compiles("UncachedCompile") or 0, compiles("CachedCompile") or 0)  # (None until counted)
            done = False
            try:
                out = original(*args, **kwargs)
                done = True
                return out
            finally:
                record.exit = time.time()
                record.executed = done and (compiles("UncachedCompile") or 0, compiles("CachedCompile") or 0) != before
                records.append(record)

        _xla_lab_tensor_sync.__wrapped__ = original
        return _xla_lab_tensor_sync

    def uninstall(self) -> None:
        if self._original is not None:
            self._xlac._xla_step_marker = self._original
            self._original = None
        for name, original in self._originals.items():
            setattr(self._xlac, name, original)
        self._originals.clear()


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


class CallerFrames:
    """``caller_frames`` for a hook that runs on every step: a loop syncs from the same lines each time,
    so each distinct chain of (code, line) is turned into ``Frame`` records once, and later syncs from it
    share that list (read-only). The memo keeps the code objects it has seen, so their ids stay unique."""

    def __init__(self, cell_file: str | None, limit: int = 32):
        self.cell_file = cell_file
        self.limit = limit
        self._memo: dict[tuple, tuple[list, list[Frame]]] = {}
        # the last chain when it was two frames ending at the cell's (a loop's ``torch_xla.sync()``):
        # (inner code, its line, the cell's code, its line) -> frames, checked before any walk
        self._last: tuple = (None, 0, None, 0, None)

    def __call__(self, frame) -> list[Frame]:
        outer = frame.f_back
        code, line, cell_code, cell_line, frames = self._last
        if (outer is not None and frame.f_code is code and outer.f_code is cell_code and frame.f_lineno == line
                and outer.f_lineno == cell_line):
            return frames
        frames = self._walk(frame)
        if outer is not None and outer.f_code.co_filename == self.cell_file and len(frames) == 2:
            self._last = (frame.f_code, frame.f_lineno, outer.f_code, outer.f_lineno, frames)
        return frames

    def _walk(self, frame) -> list[Frame]:
        key = []
        start, cell_file, limit = frame, self.cell_file, self.limit * 2
        while frame is not None and len(key) < limit:
            code = frame.f_code
            key.append(id(code))
            key.append(frame.f_lineno)
            if code.co_filename == cell_file:
                break
            frame = frame.f_back
        key = tuple(key)
        known = self._memo.get(key)
        if known is None:
            frames = caller_frames(start, cell_file, self.limit)
            codes, f = [], start
            for _ in frames:  # (kept alive with the entry)
                codes.append(f.f_code)
                f = f.f_back
            known = self._memo[key] = (codes, frames)
        return known[1]


def fallback_counts() -> dict[str, int]:
    """Cumulative count per CPU-fallback op (about 1 us when there are none)."""
    import torch_xla

    xlac = torch_xla._XLAC
    names = xlac._get_executed_fallback_ops()
    return _counts(xlac._xla_counter_value, names) if names else {}


def _counts(counter, names) -> dict[str, int]:
    return {n.removeprefix("aten::"): counter(n) or 0 for n in names if n not in NOT_FALLBACKS}


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
