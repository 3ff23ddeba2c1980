"""A profiler session around one cell: torch_xla's in-process session (the one behind
``torch_xla.debug.profiler.start_trace``), which hands back the recorded XSpace as bytes, without a
server or a file. Only while asked (``%%xla --profile``): a session records every thunk XLA runs."""

from __future__ import annotations


class ProfilerBusy(RuntimeError):
    """Another profiler session (e.g. the user's ``xp.start_trace``) is running."""


class ProfilerSession:
    def __init__(self):
        self._session = None

    def start(self) -> None:
        import torch_xla
        import torch_xla.debug.profiler as xp

        if getattr(getattr(xp, "_profile_state", None), "profile_session", None) is not None:
            raise ProfilerBusy("a torch_xla profiler trace (xp.start_trace) is already running")
        try:
            self._session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
        except Exception as exc:  # e.g. a session started through the profiler server
            raise ProfilerBusy(f"the profiler could not start: {exc}") from None

    def stop(self) -> bytes:
        """The XSpace of everything recorded since ``start`` (empty bytes if the session failed)."""
        session, self._session = self._session, None
        if session is None:
            return b""
        return bytes(session.stop())

    @property
    def running(self) -> bool:
        return self._session is not None
