"""Will it fit? The largest batch (or sequence length) of a marked step whose compiled peak memory fits a
budget, found from a few compiles on shadow state, before anything runs (``%xla fit``,
``xla_lab.fit``).

Each compile is a precompile-queue job (``Job.compile_only``): it runs in the background while the kernel
is idle, never beside user code, a cell that starts meanwhile waits for a compile in flight (a job still
tracing is put back), and the user's objects and random state are untouched, as for every job. When a
job ends, its peak is read from XLA's buffer assignment of the compiled program (``hlo.memory``; under
SPMD the partitioned program's, per device), ``fit_search`` picks the next size, and the next job is
queued. A variant compiled before in this process is not compiled again: its peak is remembered.

``FitResult`` is the data (``to_dict``); ``view/fit_view.py`` renders it (``FitView``); ``xla_lab.fit``
and ``%xla fit`` start a fit in the kernel's session.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .budget import Budget, parse_budget
from .fit_search import FitSearch, Point
from .marked import MarkedFunction, state_fingerprint

_DIM = re.compile(r"^(?P<arg>[A-Za-z_]\w*)\[(?P<dim>-?\d+)\]$")


@dataclass
class FitResult:
    step: str
    dims: dict[str, int]  # argument -> the dimension varied
    base: int  # the size the step last ran with
    budget: Budget
    platform: str = "CPU"  # torch_xla's device type
    devices: int = 1
    spmd: bool = False
    state: str = "queued"  # queued | running | done | nothing fits | no limit | gave up | failed
    error: str | None = None
    search: FitSearch | None = None
    buffers: list[dict] = field(default_factory=list)  # the largest buffers at the answer, with sources
    notes: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    wall_s: float | None = None
    reused: int = 0  # points read from earlier compiles
    progress: str = ""  # what is being compiled now
    listeners: list[Callable[["FitResult"], None]] = field(default_factory=list, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    # --- what the views read ----------------------------------------------------------------------
    @property
    def dimension(self) -> str:
        return ", ".join(f"{a}[{d}]" for a, d in self.dims.items())

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    @property
    def answer(self) -> Point | None:
        return self.search.answer if self.search else None

    @property
    def compiles(self) -> int:
        return self.search.compiles if self.search else 0

    @property
    def prediction_error(self) -> float | None:
        return self.search.prediction_error if self.search else None

    def to_dict(self) -> dict:
        s = self.search
        answer = self.answer
        nxt = s.at(answer.size + s.multiple) if s and answer else None
        return {
            "step": self.step, "dimension": self.dimension, "base": self.base,
            "budget": {"bytes": self.budget.bytes, "label": self.budget.label, "device": self.budget.device},
            "platform": self.platform, "devices": self.devices, "spmd": self.spmd,
            "state": self.state, "error": self.error,
            "answer": None if answer is None else {"size": answer.size, "peak": answer.peak,
                                                   "headroom": self.budget.bytes - answer.peak},
            "next_up": None if nxt is None else {"size": nxt.size, "peak": nxt.peak},
            "line": None if not s or not s.line else {"a": s.line.a, "b": s.line.b},
            "confirm": None if not s or not s.confirm else {"size": s.confirm.size, "peak": s.confirm.peak,
                                                            "predicted": s.predicted_peak},
            "prediction_error": self.prediction_error,
            "affine": s.affine if s else None,
            "points": [p.to_dict() for p in sorted(s.points, key=lambda p: p.size)] if s else [],
            "compiles": self.compiles, "reused": self.reused,
            "buffers": self.buffers, "notes": list(self.notes), "wall_s": self.wall_s,
            "multiple": s.multiple if s else 1, "max_size": s.max_size if s else None,
            "progress": self.progress,
        }

    def wait(self, timeout: float | None = None) -> "FitResult":
        """Block until the fit has its answer (the queue runs it while the kernel is idle: call this
        from a thread, or use ``%xla fit ... --wait`` / ``xla_lab.fit(..., wait=True)``)."""
        self._done.wait(timeout)
        return self

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener(self)
            except Exception:  # a view must not break the worker
                pass


def parse_dims(step: MarkedFunction, spec) -> tuple[dict[str, int], int]:
    """``"batch"`` (dimension 0 of every tensor argument whose dimension 0 is the first one's),
    ``"x[1]"``, ``"ids[1] mask[1]"``, or a dict {argument: dimension} -> ({argument: dimension}, the
    size they have now). Raises ValueError with one line."""
    if not step.calls:
        raise ValueError(f"{step.name} has not run yet: run it once so xla_lab knows its inputs")
    shapes = step.calls[-1].shapes
    if not shapes:
        raise ValueError(f"{step.name} has no tensor argument on the XLA device to vary")
    listing = ", ".join(f"{k} {'x'.join(map(str, v)) or 'scalar'}" for k, v in shapes.items())
    if isinstance(spec, dict):
        dims = {str(k): int(v) for k, v in spec.items()}
    else:
        words = str(spec).replace(",", " ").split()
        if words == ["batch"]:
            first = next((v for v in shapes.values() if v), None)
            if first is None:
                raise ValueError(f"{step.name}'s tensor arguments are scalars: nothing to vary")
            dims = {k: 0 for k, v in shapes.items() if v and v[0] == first[0]}
        else:
            dims = {}
            for word in words:
                m = _DIM.match(word)
                if not m:
                    raise ValueError(f"cannot read the dimension {word!r}: write batch, or ARG[DIM] such as x[0] "
                                     f"or ids[1] (the inputs of {step.name}: {listing})")
                dims[m["arg"]] = int(m["dim"])
    if not dims:
        raise ValueError("name the dimension to vary: batch, or ARG[DIM] such as x[0]")
    sizes = set()
    for arg, dim in list(dims.items()):
        if arg not in shapes:
            raise ValueError(f"{step.name} has no tensor input {arg!r}; its inputs are {listing}")
        rank = len(shapes[arg])
        if not -rank <= dim < rank:
            raise ValueError(f"{arg} has {rank} dimension(s) ({'x'.join(map(str, shapes[arg])) or 'scalar'}): "
                             f"no dimension {dim}")
        dims[arg] = dim % rank
        sizes.add(shapes[arg][dims[arg]])
    if len(sizes) != 1:
        raise ValueError(f"the dimensions to vary together have different sizes now ({listing}): "
                         "vary one, or ones of the same size")
    return dims, sizes.pop()


def _platform() -> tuple[str, int, bool]:
    try:
        import torch_xla.runtime as xr

        return str(xr.device_type() or "CPU"), int(xr.global_runtime_device_count()), bool(xr.is_spmd())
    except Exception:  # pragma: no cover
        return "CPU", 1, False


class FitRun:
    """One ``%xla fit``: queues a compile-only job per size ``FitSearch`` asks for."""

    def __init__(self, queue, step: MarkedFunction, dims: dict[str, int], base: int, budget: Budget,
                 multiple: int = 1, max_size: int | None = None, session=None):
        self.queue, self.step, self.dims, self.session = queue, step, dims, session
        self.call = step.calls[-1]
        platform, devices, spmd = _platform()
        self.result = FitResult(step.name, dims, base, budget, platform, devices, spmd,
                                search=FitSearch(budget.bytes, base, multiple, max_size))
        self.placeholders = False  # set after the first compile: only if the step runs no graph of its own
        self._lock = threading.Lock()
        self._largest: dict[int, list] = {}

    def shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        out = {}
        for arg, dim in self.dims.items():
            shape = list(self.call.shapes[arg])
            shape[dim] = size
            out[arg] = tuple(shape)
        return out

    def _key(self, size: int) -> tuple:
        full = dict(self.call.shapes)
        full.update(self.shapes(size))
        return (id(self.step), state_fingerprint(list(self.call.bound().values())),
                tuple(sorted(full.items())), self.call.training)

    def start(self) -> FitResult:
        self._advance()
        return self.result

    def _advance(self) -> None:
        """Queue the next compile, taking remembered peaks without compiling; finish when the search is over."""
        r, search = self.result, self.result.search
        while True:
            nxt = search.next()
            if nxt is None:
                self._finish()
                return
            size, role = nxt
            known = self.queue.fit_peaks.get(self._key(size))
            if known is None:
                break
            peak, graph_hash, largest, grows = known
            search.add(Point(size, peak, role, compiled=False, graph_hash=graph_hash, grows=grows))
            self._largest[size] = largest
            r.reused += 1
        label = f"fit {r.dimension}={size} ({role})"
        self.queue.add_variant(self.step, self.shapes(size), reason=f"%xla fit: {role} at {r.dimension}={size}",
                               compile_only=True, placeholders=self.placeholders,
                               on_done=lambda job, size=size, role=role: self._compiled(job, size, role))
        r.state = "running" if search.points else "queued"
        r.progress = f"compiling {label}; {search.compiles} compiled so far"
        r._changed()

    def _compiled(self, job, size: int, role: str) -> None:
        r = self.result
        if job.state == "failed" or job.error:
            return self._fail(f"the step failed on the shadow at {r.dimension}={size}: {job.error}")
        if job.state == "pending":  # put back (a cell started): it runs again later
            return
        if not job.compiled:
            return self._fail(f"XLA compiled nothing for {r.dimension}={size}: its graph was in XLA's cache "
                              "from before this fit, without its buffer assignment; restart the kernel to fit again")
        peaks = []
        for h in job.compiled:
            summary = self._summary(h)
            if summary.get("peak_bytes") is not None:
                peaks.append((summary["peak_bytes"], h, summary.get("largest", []), _grows(summary)))
        if not peaks:
            return self._fail(f"no buffer assignment was recorded for {r.dimension}={size}: XLA's dump is off, "
                              "or (lean capture) no profiler session could list the module (%xla status says why)")
        peak, graph_hash, largest, grows = max(peaks, key=lambda p: p[0])
        if job.synced_while_tracing and "mid-step" not in " ".join(r.notes):
            r.notes.append("the step ran a graph of its own mid-step (.item(), print, a sync): the peak is the "
                           "largest of its graphs'; new inputs are real zero tensors, so each try holds their memory")
        elif not r.spmd:
            self.placeholders = True  # nothing mid-step runs: the next inputs need no memory
        self.queue.fit_peaks[self._key(size)] = (peak, graph_hash, largest, grows)
        self._largest[size] = largest
        r.search.add(Point(size, peak, role, compiled=True, compile_s=job.compile_s, graph_hash=graph_hash,
                           grows=grows))
        self._advance()

    def _summary(self, graph_hash: str) -> dict:
        return self.session.store.memory_of(graph_hash) if self.session is not None else {}

    def _fail(self, why: str) -> None:
        r = self.result
        r.state, r.error = "failed", why
        r.wall_s = time.time() - r.started_at
        r._done.set()
        r._changed()

    def _finish(self) -> None:
        r, s = self.result, self.result.search
        r.state, r.progress = s.state, ""
        answer = s.answer
        if answer is not None:
            r.buffers = self._buffers_with_sources(answer)
        if r.platform.upper() == "CPU":
            r.notes.append("figures are the CPU compiler's buffer assignment: layouts, padding and fusion differ "
                           "on TPU and GPU, where the same command gives that device's own figures")
        if r.spmd:
            r.notes.append(f"SPMD on {r.devices} devices: each peak is one device's, of the partitioned program, "
                           "with the new inputs sharded as the step's own were (a size that does not split "
                           f"evenly is padded by the partitioner: --multiple {r.devices} keeps to sizes that do)")
        if s.confirm is not None and not s.affine:
            r.notes.append(f"the peak is not affine in {r.dimension} here (the line was off by "
                           f"{100 * abs(s.prediction_error):.1f}% at {s.confirm.size}): XLA pads dimensions to tile "
                           "sizes and fuses or rematerializes differently as sizes change, so the answer comes from "
                           "compiles on either side of it, not from the line")
        elif s.line is not None:
            r.notes.append("assumed: peak = a + b x size between the compiled sizes (weights and optimizer state "
                           "fixed, activations proportional); the answer itself is compiled, and the size above it (over the "
                           "budget)")
        r.notes.append("compiled without running: the step's in-place updates (weights, optimizer state) are "
                       "counted once, as donated buffers; torch_xla's own step can keep some twice (8% more on "
                       "an AdamW MLP on the CPU client)")
        if s.state == "gave up":
            r.notes.append(f"the search stopped after {s.max_compiles} compiles; the bracket found is shown")
        r.wall_s = time.time() - r.started_at
        r._done.set()
        r._changed()

    def _buffers_with_sources(self, answer: Point) -> list[dict]:
        """The largest buffers of the answer's program, each with the source line of the op that wrote
        it (the graph's full analysis, on a copy: the stored graph keeps its own for later)."""
        largest = self._largest.get(answer.size, [])
        store = self.session.store if self.session is not None else None
        art = store.get(answer.graph_hash) if store is not None and answer.graph_hash else None
        if art is not None:
            try:
                from xla_lab.capture.analysis import analyze_module

                module = store.take_unanalyzed(answer.graph_hash)
                if module is not None:
                    work = copy.copy(art)
                    analyze_module(work, module, _cell_files())
                    store.defer_analysis(art, module)
                    largest = (work.memory or {}).get("largest", largest)
                elif art.memory:
                    largest = art.memory.get("largest", largest)
            except Exception as exc:  # the answer stands without its lines
                self.result.notes.append(f"the buffers' source lines could not be read ({type(exc).__name__}: {exc})")
        return [dict(b) for b in largest[:6]]


def _grows(summary: dict) -> int | None:
    """Of a compile's peak, the bytes taken to grow with the size (the second probe's estimate, not the
    answer: the answer is compiled). The temporaries, unless about one gradient's worth of them (within
    10% of the program's own outputs, the gradients) is shaped like its weights: then that part is a
    fixed copy of the gradients (ResNet-18 on the CPU client computes its convolutions' weight
    gradients into temporaries in XLA's layout and copies them out: 44.3 MB of its 46.8 MB of
    temporaries at 4 images), and the rest grows. Shapes alone are not trusted further: in a small
    transformer many activations have a weight's shape (a batch of 2 x 64 tokens by 128 is a 128 x 128
    matrix), so the temporaries grow whole unless the copy is that clear."""
    temp, moving, outputs = summary.get("temp_bytes"), summary.get("growing_temp_bytes"), summary.get("output_bytes")
    if temp is None:
        return None
    if moving is not None and outputs and abs((temp - moving) - outputs) <= 0.1 * outputs:
        return moving
    return temp


def _cell_files():
    from xla_lab.capture.analysis import CellFiles

    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:  # pragma: no cover
        shell = None
    return CellFiles.from_shell(shell, None, None) if shell is not None else CellFiles()



def start_fit(queue, step, dims, budget, multiple: int = 1, max_size: int | None = None, session=None) -> FitResult:
    """Check the request and queue the fit's first compile. ValueError (one line) for a bad request."""
    if not isinstance(step, MarkedFunction):
        name = getattr(step, "__name__", repr(step))
        raise ValueError(f"{name} is not a marked step: decorate it with @xla_lab.step and run it once")
    if step.problems:
        raise ValueError(f"{step.name} cannot run on shadow state: {step.problems[0]}")
    budget = budget if isinstance(budget, Budget) else parse_budget(budget)
    dims, base = parse_dims(step, dims)
    if multiple < 1:
        raise ValueError("--multiple takes 1 or more")
    if max_size is not None and max_size < multiple:
        raise ValueError(f"--max {max_size} is below the multiple {multiple}")
    if queue.marked.get(step.name) is not step:
        queue.add(step)
    run = FitRun(queue, step, dims, base, budget, multiple, max_size, session)
    return run.start()
