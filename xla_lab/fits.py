"""Fits of this kernel: ``xla_lab.fit`` and ``%xla fit`` start one (``precompile/fit.py``) in the session's
precompile queue and hand back its ``FitView`` (``view/fit_view.py``)."""

from __future__ import annotations

from xla_lab import session as session_mod


def start_fit(step, dims, budget, *, multiple: int = 1, max_size: int | None = None, wait: bool = True,
              namespace=None):
    """Queue the fit's compiles and, with ``wait``, run them now; ValueError (one line) for a bad request."""
    from xla_lab.precompile import fit as fit_mod
    from xla_lab.view.fit_view import FitView

    if budget is None:
        raise ValueError("give a budget: 16GiB, 512MiB, or a device such as v5e or A100")
    session = session_mod.get()
    queue = session.start_queue(namespace)
    result = fit_mod.start_fit(queue, step, dims, budget, multiple, max_size, session)
    session.fits[:] = session.fits[-7:] + [result]
    if wait:
        queue.run_pending()
    return FitView(result)
