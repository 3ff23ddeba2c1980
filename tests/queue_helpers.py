"""Waiting on the precompile queue in tests, through its public controls and state only (the queue has
no wait of its own for tests: what a user needs, ``%xla queue run`` and the wait before a cell, is in
it)."""

from __future__ import annotations

import time


def settle(queue) -> None:
    """No job in flight and none about to start: a start the idle timer has due is cancelled (``pause``,
    which the worker also reads before each job) and the job in flight, if any, waited for. For the
    set-up and tear-down of tests that run the queue's jobs themselves (``%xla queue run``). The queue
    is left paused or not as it was, and with no start due."""
    paused = queue.paused
    queue.pause()
    queue.wait_for_job()
    queue.paused = paused


def wait_until_done(queue, timeout: float = 120) -> None:
    """Until the queue's worker has run every pending job (after ``%xla queue resume``)."""
    deadline = time.time() + timeout
    while queue.job_in_flight() or any(j.state == "pending" for j in queue.jobs):
        if time.time() > deadline:
            raise AssertionError(f"the precompile queue did not finish in {timeout} s: "
                                 f"{[(j.label, j.state) for j in queue.jobs]}, blocked: {queue.blocked}")
        time.sleep(0.01)
