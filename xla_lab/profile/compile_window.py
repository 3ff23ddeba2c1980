"""The profiler session behind compile profiles: open from a cell's start while its syncs may compile,
closed once its loop is steady, opened again after a compile it missed. The bytes it recorded become
compile profiles (``compile_profile.py``) when the cell ends.

Why a window and not the whole cell: a session records every kernel XLA runs, which a long cached
loop pays for (``session.py``); around compiles it costs nothing measurable (``design.md``). A loop is
steady, as source-line tracking reads it (``capture/instrument.py``), once its explicit syncs hit the
cache ``STEADY_AFTER`` times in a row. A graph compiled while the window is closed (a value read after
the loop) gets no profile; the window opens again right after, so the next compile of the cell has
one, and before the end-of-cell sync when the cell left work pending, which that sync compiles or runs.
"""

from __future__ import annotations

STEADY_AFTER = 2


class CompileWindow:
    def __init__(self):
        self._session = None
        self._compiles = 0  # torch_xla's UncachedCompile at the last look
        self._hits = 0
        self.chunks: list[bytes] = []  # what each opening recorded
        self.opened_at: list[int] = []  # torch_xla's execution count when each opening began (lean capture)
        self._opened = 0
        self.started_closed = False  # start(closed=True): the cell's last run compiled nothing
        self.missed = 0  # graphs compiled while the window was closed
        self.failure: str | None = None  # why there is no session (another profiler runs, ...)
        self.closed_by_steady = 0  # how often the window closed on a steady loop
        self._original_start_trace = None  # torch_xla's, while the window stands aside for it

    def start(self, closed: bool = False) -> bool:
        """Open the window; False (and ``failure`` says why) when a session cannot start. ``closed``: start
        as if the loop were steady already (the cell's last run compiled nothing): a session would only
        record the cached steps and cost its ending (tens of ms: most of what a short cached loop would
        pay); a compile then opens it, and that compile is told to have no profile."""
        self._compiles = _uncached_compiles()
        if closed:
            self.started_closed = True
            return True
        return self._open()

    def _open(self) -> bool:
        import torch_xla
        import torch_xla.debug.profiler as xp

        if getattr(getattr(xp, "_profile_state", None), "profile_session", None) is not None:
            self.failure = "a torch_xla profiler trace (xp.start_trace) is running"
            return False
        try:
            self._session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
        except Exception as exc:  # e.g. a session started through the profiler server
            self.failure = f"the profiler could not start: {exc}"
            return False
        from .session import _executions

        self._opened = _executions()
        self._yield_to_user_traces(xp)
        return True

    def _yield_to_user_traces(self, xp) -> None:
        """XLA allows one profiler session at a time: a ``xp.start_trace`` in the cell ends the window
        first (what it recorded is kept), so the user's trace starts as it would without xla_lab."""
        if self._original_start_trace is not None:
            return
        original = self._original_start_trace = xp.start_trace
        window = self

        def start_trace(*args, **kwargs):
            if window.running:
                window._close()
            if window.failure is None:
                window.failure = "a torch_xla profiler trace (xp.start_trace) began in the cell"
            return original(*args, **kwargs)

        start_trace.__wrapped__ = original
        xp.start_trace = start_trace

    def _restore_user_traces(self) -> None:
        if self._original_start_trace is not None:
            import torch_xla.debug.profiler as xp

            xp.start_trace, self._original_start_trace = self._original_start_trace, None

    def after_sync(self, executed: bool, compiles: int) -> None:
        """After each explicit sync of the cell (``CellRecorder.on_explicit_sync``); ``compiles``: torch_xla's
        UncachedCompile count, which the sync hook has just read."""
        compiled, self._compiles = compiles != self._compiles, compiles
        if compiled:
            self._hits = 0
            if self._session is None and self.failure is None:
                self.missed += 1
                self._open()
            return
        if not executed:
            return
        self._hits += 1
        if self._session is not None and self._hits >= STEADY_AFTER:
            self._close()
            self.closed_by_steady += 1

    def before_final_sync(self) -> None:
        """The end-of-cell sync may compile what the cell left pending: open again if the loop had
        closed the window and work is pending (a cell that never went steady, or whose loop's last
        sync left nothing, pays nothing here: a session costs tens of ms to end)."""
        if self._session is None and self.closed_by_steady and self.failure is None and _work_pending():
            self._compiles = _uncached_compiles()
            self._open()

    def _close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            self.chunks.append(bytes(session.stop()))
            self.opened_at.append(self._opened)
        except Exception as exc:  # the cell goes on; the compile profiles of this opening are lost
            self.failure = f"the profiler session failed to end: {type(exc).__name__}: {exc}"

    def stop(self) -> list[bytes]:
        """End the window (at the cell's end); every opening's bytes (``opened_at`` stays, parallel)."""
        self._close()
        self._restore_user_traces()
        chunks, self.chunks = self.chunks, []
        return chunks

    @property
    def running(self) -> bool:
        return self._session is not None


def _uncached_compiles() -> int:
    import torch_xla

    return torch_xla._XLAC._xla_counter_value("UncachedCompile") or 0


def _work_pending() -> bool:
    """Whether a live XLA tensor needs a computation (what the end-of-cell sync would compile or run);
    True where torch_xla cannot say."""
    from xla_lab.capture.recovery import pending_lazy_work

    try:
        return pending_lazy_work()
    except Exception:  # (a torch_xla without the call, or a tensor in a state it refuses)
        return True
