"""xla_lab: a Jupyter-first workbench for PyTorch/XLA.

    %load_ext xla_lab        # first cell: sets the XLA runtime up for capture
    %%xla                    # run a cell on the lazy XLA device and see every sync it made

    @xla_lab.step            # a step whose state comes through its arguments: precompiled ahead
    %xla queue               # what the precompile queue is doing

Public API: ``history()``, ``last()``, ``annotate()``, ``step``, ``queue()``, ``fit()``, ``ScannedStack``,
``CellCapture``, ``StepRecord``.
"""

from __future__ import annotations

import sys

from xla_lab.capture.records import SCHEMA, CaptureFormatError, CellCapture, GraphArtifacts, StepRecord

__version__ = "0.1.0"
__all__ = ["SCHEMA", "CaptureFormatError", "CellCapture", "GraphArtifacts", "ScannedStack", "StepRecord", "annotate", "fit", "history", "last", "queue", "step",
           "load_ipython_extension", "unload_ipython_extension"]


def history() -> list[CellCapture]:
    """Every ``%%xla`` cell run of this kernel, oldest first."""
    from xla_lab import session

    s = session.current()
    return list(s.history) if s else []


def last() -> CellCapture:
    """The capture of the most recent ``%%xla`` cell run."""
    runs = history()
    if not runs:
        raise LookupError("no %%xla cell has run yet in this kernel")
    return runs[-1]


def step(fn=None, **options):
    """Mark a function that runs a training or eval step for the precompile queue: ``@xla_lab.step``
    or ``@xla_lab.step(buckets=...)``. Its state must come through its arguments; see
    ``xla_lab.precompile.marked.mark`` for the options."""
    if fn is None:
        return lambda f: step(f, **options)
    from xla_lab import session
    from xla_lab.precompile.marked import mark

    marked = mark(fn, **options)
    s = session.current()
    if s is not None and s.queue is not None:  # (marked before %load_ext: found in the namespace then)
        s.queue.add(marked)
    return marked


def fit(step, dims="batch", budget=None, *, multiple: int = 1, max_size: int | None = None, wait: bool = True):
    """Will it fit? The largest size of ``dims`` ("batch", or "x[1]", "ids[1] mask[1]") of a marked step
    whose compiled peak memory fits ``budget`` ("16GiB", "v5e", "A100-80GB", bytes), from a few
    compiles on shadow state (``%xla fit``). Returns its ``FitView`` (the result, rendering itself); ``wait=False``
    leaves the compiles to the queue, which runs them while the kernel is idle."""
    from xla_lab.fits import start_fit

    return start_fit(step, dims, budget, multiple=multiple, max_size=max_size, wait=wait)


def queue():
    """The precompile queue of this kernel (``%load_ext xla_lab`` starts it)."""
    from xla_lab import session

    s = session.current()
    if s is None or s.queue is None:
        raise LookupError("the precompile queue starts with %load_ext xla_lab")
    return s.queue


def annotate(target) -> str:
    """The source lines of a capture (or step) with the XLA kernels each line feeds."""
    from xla_lab.view.annotate import annotate as _annotate

    return _annotate(target)


def __getattr__(name: str):
    """``xla_lab.ScannedStack``: a stack of identical layers run through torch_xla's scan_layers, as the
    scan what-if measures it (imported when asked for: it needs torch)."""
    if name == "ScannedStack":
        from xla_lab.precompile.layer_call import ScannedStack

        return ScannedStack
    raise AttributeError(f"module 'xla_lab' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """``%load_ext xla_lab``: set the runtime up (before the PJRT client starts) and add the magics."""
    from xla_lab import compat, hooks, session
    from xla_lab.magics import XlaMagics

    s = session.get()  # (first: it sets the runtime's environment before anything imports torch_xla)
    for problem in compat.load_problems():  # a torch_xla outside the supported range: one line
        print(f"xla_lab: {problem}", file=sys.stderr)
    s.loaded(ipython.user_ns)
    ipython.register_magics(XlaMagics)
    hooks.register(ipython, s)
    for problem in s.runtime.problems:
        print(f"xla_lab: {problem}", file=sys.stderr)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext xla_lab``: remove the magics and pause the precompile queue. Captures stay
    readable through ``history()``."""
    from xla_lab import hooks, session

    s = session.current()
    if s is not None:
        s.unloaded()
        hooks.unregister(ipython, s)
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("xla", None)
    ipython.magics_manager.registry.pop("XlaMagics", None)


def _jupyter_labextension_paths():
    """The prebuilt JupyterLab extension (built from extension/ into xla_lab/labextension), for
    `jupyter labextension develop`; wheels install it as shared data."""
    return [{"src": "labextension", "dest": "xla-lab"}]
