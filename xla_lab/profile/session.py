"""A profiler session around one cell: torch_xla's in-process session (the one behind
``torch_xla.debug.profiler.start_trace``), which hands back the recorded XSpace as bytes, without a
server or a file. Only while asked (``%%xla --profile``): a session records every thunk XLA runs.

A session records the cell's first ``max_steps`` explicit steps, not its whole loop. XLA's CPU
runtime records a few hundred events per step of a small model (many more for a large one); a
200-step cached loop runs about 14% slower while recorded, and ending the session and reading its
events costs as much again, all growing with the step count (a 10,000-step cell would keep hundreds
of MB of events). A cached loop runs the same graph each step, so its first steps measure what the
rest cost; ``max_steps=None`` (``--profile-steps all``) records every step.
"""

from __future__ import annotations

DEFAULT_STEPS = 20
_EXECUTIONS = ("ExecuteTime", "ExecuteReplicatedTime")


class ProfilerBusy(RuntimeError):
    """Another profiler session (e.g. the user's ``xp.start_trace``) is running."""


def _executions() -> int:
    """How many graph executions torch_xla has counted so far."""
    import torch_xla.debug.metrics as met

    return sum((met.metric_data(name) or (0,))[0] for name in _EXECUTIONS)


class ProfilerSession:
    def __init__(self, max_steps: int | None = DEFAULT_STEPS):
        self._session = None
        self.max_steps = max_steps
        self._synced = 0
        self._executions_at_start = 0
        self._data: bytes | None = None  # the XSpace, once the window closed before the cell ended
        # executions the session recorded when its window closed (None: it ran to the cell's end)
        self.recorded_executions: int | None = None
        self.failure: str | None = None  # why the session ended without a profile

    def start(self) -> None:
        import torch_xla
        import torch_xla.debug.profiler as xp

        if getattr(getattr(xp, "_profile_state", None), "profile_session", None) is not None:
            raise ProfilerBusy("a torch_xla profiler trace (xp.start_trace) is already running")
        self._executions_at_start = _executions()
        try:
            self._session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
        except Exception as exc:  # e.g. a session started through the profiler server
            raise ProfilerBusy(f"the profiler could not start: {exc}") from None

    def after_sync(self, executed: bool, compiles: int) -> None:
        """Called after each explicit sync of the cell: once ``max_steps`` of them ran a graph, wait
        for those steps to finish on the device and end the session (the rest of the cell runs
        unrecorded). ``compiles`` (the sync hook's compile count) is not needed here."""
        if self._session is None or self.max_steps is None or not executed:
            return
        self._synced += 1
        if self._synced < self.max_steps:
            return
        import torch_xla.core.xla_model as xm

        try:
            xm.wait_device_ops()  # the last recorded step's kernels end inside the session
        except Exception:  # a graph failed on the device: the cell's end reports it (recorder.finish)
            pass
        self.recorded_executions = _executions() - self._executions_at_start
        try:
            self._data = self._stop()
        except Exception as exc:  # (inside the user's sync: the cell goes on, the profile is lost)
            self._data = b""
            self.failure = f"the profiler session failed to end: {type(exc).__name__}: {exc}"

    def stop(self) -> bytes:
        """The XSpace of everything recorded (empty bytes if the session failed)."""
        if self._data is not None:
            data, self._data = self._data, None
            return data
        return self._stop()

    def _stop(self) -> bytes:
        session, self._session = self._session, None
        if session is None:
            return b""
        return bytes(session.stop())

    @property
    def running(self) -> bool:
        return self._session is not None

    @property
    def executions_at_start(self) -> int:
        """torch_xla's execution count when the session started (its first execution is the next)."""
        return self._executions_at_start
