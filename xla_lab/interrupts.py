"""Holding SIGINT (Ctrl-C, the kernel's interrupt button) while xla_lab does work that must not be cut
short: recording a cell (an interrupt there would leave the sync hook installed and the capture
unrecorded) and waiting for a precompile job (the cell must not start beside a compile).

A held interrupt is remembered, not lost: the caller delivers it once the work is done. Only the main
thread can hold SIGINT (Python runs signal handlers there); elsewhere ``HeldInterrupts`` holds nothing
and an interrupt arrives as usual.
"""

from __future__ import annotations

import signal
import sys


class HeldInterrupts:
    """``with HeldInterrupts(note) as held:`` ... ``held.interrupted`` says whether SIGINT arrived.
    ``note`` is printed to stderr at the first interrupt, so the user knows it was heard."""

    def __init__(self, note: str = ""):
        self.note = note
        self.interrupted = False
        self._previous = None
        self._holding = False

    def __enter__(self) -> "HeldInterrupts":
        self.hold()
        return self

    def __exit__(self, *exc) -> bool:
        self.release()
        return False

    def hold(self) -> None:
        if self._holding:
            return
        try:
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None:  # None: a handler not installed from Python; leave it alone
                signal.signal(signal.SIGINT, self._hold)
                self._previous, self._holding = previous, True
        except ValueError:  # not the main thread
            pass

    def release(self) -> None:
        if self._holding:
            self._holding = False
            signal.signal(signal.SIGINT, self._previous)

    @property
    def holding(self) -> bool:
        return self._holding

    def _hold(self, signum, frame) -> None:
        if not self.interrupted and self.note:
            print(f"xla_lab: {self.note}", file=sys.stderr, flush=True)
        self.interrupted = True
