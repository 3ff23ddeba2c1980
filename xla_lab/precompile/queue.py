"""The precompile queue: compile the graphs the planner expects while the kernel is idle.

Why it is built this way (see the precompile section of shared/design.md): a live ``torch_xla.sync()``
takes every pending tensor on the device and a foreground sync waits for (or breaks on) a background
compile, so jobs run *only* while the kernel is idle and never overlap user code:

* ``kernel_idle`` (IPython's ``post_execute``) plans, then starts the worker after ``idle_delay``
  seconds, so "Run all" never waits for jobs between cells;
* ``kernel_busy`` (``pre_execute``, which fires for every execution, silent ones too) stops the worker
  from taking another job and says whether one is in flight;
* ``wait_for_job`` (called before the execution's code runs, see ``xla_lab.hooks``) waits until the
  job in flight has ended: a job still copying or tracing is abandoned (its shadow dropped), one
  already compiling is waited for, and the cell is told how long it waited and why. The wait is on
  an event the worker sets as its very last act, never on ``Thread.is_alive()``: on Python 3.11 an
  interrupted ``Thread.join()`` can mark a running thread as stopped.

A job copies the step's state (``shadow.build_shadow``), runs the step on the copy with zero inputs of
the variant's shapes, and syncs. XLA keeps the compiled graph in its cache, so the user's real step
with those shapes hits it; ``claim`` turns that hit into ``cache="precompiled"`` with the seconds it
saved. A job's errors and what its step prints stay in the job (``job_output``; nothing shared, such
as ``sys.stdout``, is swapped); the user's objects and RNG states are untouched.
"""

from __future__ import annotations

import contextlib
import gc
import io
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from xla_lab.capture.recovery import pending_lazy_work  # (a live sync would take that work along)

from .job_output import with_private_print
from .planner import Variant, call_key, group_key, plan
from .shadow import RngState, build_shadow, shadow_call
from .compile_only import compile_without_running, mark_donors
from .marked import MarkedCall, MarkedFunction, graph_runs, running_in_job

STATES = ("pending", "running", "compiled", "cached", "failed")


@dataclass
class Job:
    number: int
    variant: Variant
    state: str = "pending"  # one of STATES
    phase: str = ""  # while running: "copying state", "tracing", "compiling"
    label: str = ""
    reason: str = ""
    started_at: float | None = None
    wall_s: float | None = None
    compiled: dict[str, float] = field(default_factory=dict)  # graph hash -> compile seconds
    used: int = 0  # real steps that hit a graph this job compiled
    saved_s: float = 0.0
    shadow_bytes: int = 0
    error: str | None = None
    output: str = ""  # what the step printed on the shadow
    missed: str | None = None  # why a real call it was planned for compiled another graph
    # A job of %xla fit: compile the variant without running it (precompile/compile_only.py) to read
    # its buffer assignment; XLA's cache entry is not one a real step hits, so it counts as no
    # precompile. ``placeholders``: its new inputs hold no memory. ``on_done(job)`` runs in the
    # worker once the job has ended (it may queue the next one).
    compile_only: bool = False
    placeholders: bool = False
    on_done: Callable[["Job"], None] | None = field(default=None, repr=False)
    synced_while_tracing: bool = False  # the step ran a graph of its own mid-trace (.item(), a sync)

    @property
    def compile_s(self) -> float:
        return sum(self.compiled.values())


@dataclass
class Wait:
    """A cell that waited for a job in flight."""

    seconds: float
    job: str


class PrecompileQueue:
    def __init__(self, absorb: Callable[[], list[str]], namespace: Callable[[], dict] | None = None,
                 idle_delay: float = 0.5, max_jobs_per_plan: int = 8):
        """``absorb`` reads what XLA wrote for work outside %%xla cells and returns the graph hashes
        compiled, in order (``Session.absorb_outside_work``); ``namespace`` gives the notebook's
        variables (for DataLoaders)."""
        self.absorb = absorb
        self.namespace = namespace or (lambda: {})
        self.idle_delay = idle_delay
        self.max_jobs_per_plan = max_jobs_per_plan
        self.jobs: list[Job] = []
        self.paused = False
        self.blocked: str | None = None  # why pending jobs are not starting
        self.last_wait: Wait | None = None
        self.persistent_cache = "not set up"  # what xla_lab.precompile.persistent did, for the views
        self.shadow_bytes_peak = 0
        self.listeners: list[Callable[["PrecompileQueue"], None]] = []
        self._seen: set[tuple] = set()  # keys whose graph already compiled
        self._tried: set[tuple] = set()  # keys of jobs that ran
        self._watch: list[Job] = []  # compiled jobs a real call of the running cell should use
        self._unclaimed: dict[str, Job] = {}  # graph hash -> job that compiled it, not yet used
        self._lock = threading.RLock()
        self._busy = False  # user code is about to run or running: take no job
        # Set while no job is in flight; cleared (under the lock) before a worker starts, set by the
        # worker as its very last act. Waits are on this event, never on Thread.is_alive().
        self._idle = threading.Event()
        self._idle.set()
        self._timer: threading.Timer | None = None
        self._current: Job | None = None
        self._numbers = 0
        self.marked: dict[str, MarkedFunction] = {}  # by name: a re-run definition replaces the old one
        # %xla fit: (step id, state fingerprint, shapes, mode) -> (peak, graph hash, largest buffers,
        # temporaries' bytes) of each variant compiled. What XLA's cache holds: a variant compiled once is
        # not compiled again (XLA would compile nothing and write no buffer assignment), so they outlive
        # %xla clear, as _seen does.
        self.fit_peaks: dict[tuple, tuple[int, str | None, list, int | None]] = {}

    # --- what the user marked and ran ----------------------------------------------------------
    def add(self, fn: MarkedFunction) -> None:
        """Watch a marked function (``xla_lab.step`` calls this)."""
        old = self.marked.get(fn.name)
        if old is not None and old is not fn and self._on_call in old.listeners:
            old.listeners.remove(self._on_call)
        self.marked[fn.name] = fn
        if self._on_call not in fn.listeners:
            fn.listeners.append(self._on_call)
        for call in fn.calls:
            self._on_call(call)

    def adopt(self, namespace: dict) -> None:
        """Watch the marked functions of a namespace (marked before xla_lab was loaded)."""
        for value in list(namespace.values()):
            if isinstance(value, MarkedFunction) and self.marked.get(value.name) is not value:
                self.add(value)

    def _on_call(self, call: MarkedCall) -> None:
        key = call_key(call)
        self._seen.add(key)
        with self._lock:  # a job compiled this call's graph, unless the real step misses anyway
            watched = {id(j) for j in self._watch}
            self._watch += [j for j in self.jobs if j.state == "compiled" and not j.used and not j.missed
                            and id(j) not in watched and j.variant.key() == key]

    def explain_misses(self, capture, explain_pair: Callable[[str, str], str | None]) -> list[str]:
        """After a cell: for each job planned for a call the cell made, if the real step compiled a
        graph of its own instead of running the job's, say why (``explain_pair(real hash, job hash)``
        compares the two graphs), so a miss is never silent. Returns notes for the cell."""
        groups = self._groups()
        with self._lock:
            watched, self._watch = self._watch, []
            seen = {id(j) for j in watched}
            keys = {group_key(group) for group in groups.values()}
            watched += [j for j in self.jobs if j.state == "compiled" and not j.used and not j.missed
                        and id(j) not in seen and j.variant.group and j.variant.key() in keys]  # a group's job
        notes = []
        for job in watched:
            misses = [s for s in capture.steps if s.cache == "miss" and s.graph_hash not in job.compiled]
            if job.used or not misses or not job.compiled:
                continue
            real, ours = misses[-1], next(iter(job.compiled))
            group = groups.get(id(job.variant.step)) if not job.variant.group else None  # (a one-call job)
            if group and group[0].at < capture.started_at:
                group = None  # an earlier cell's
            try:
                why = explain_pair(real.graph_hash, ours) or "the two graphs could not be compared"
            except Exception as exc:  # explaining must not break the cell's capture
                why = f"the two graphs could not be compared ({type(exc).__name__}: {exc})"
            if group:  # the job compiled one call, the cell ran several into one graph
                name, k = job.variant.step.name, len(group)
                calls = "both calls" if k == 2 else f"all {k} calls"
                why = (f"{name} ran {k} times before one sync, so the graph holds {calls}. Sync after each call "
                       f"to reuse one graph for any number of batches, or keep it: the queue now compiles the "
                       f"{k}-call graph for next time; {why}")
            job.missed = why
            notes.append(f"precompile job #{job.number} ({job.label}) compiled a graph for this call, but "
                         f"step {real.index} compiled another one: {why}")
        if notes:
            self._notify()
        return notes

    def steps(self) -> list[MarkedFunction]:
        return list(self.marked.values())

    def _groups(self) -> dict[int, list[MarkedCall]]:
        """Each marked step's group of calls that ran as one graph (``MarkedFunction.fused_group``), by
        the step's id. Their graphs compiled: the queue counts their keys as seen."""
        out = {id(step): group for step in self.steps() if len(group := step.fused_group()) > 1}
        with self._lock:
            self._seen.update(group_key(group) for group in out.values())
        return out

    # --- planning --------------------------------------------------------------------------------
    def plan(self) -> list[Job]:
        """Queue the planner's variants that have not compiled yet."""
        added = []
        self._groups()
        with self._lock:
            queued = {j.variant.key() for j in self.jobs if j.state in ("pending", "running")}
            for variant in plan(self.steps(), self.namespace()):
                if len(added) >= self.max_jobs_per_plan:
                    break
                key = variant.key()
                if key in queued or key in self._tried or (key in self._seen and not variant.unsure):
                    continue
                queued.add(key)
                added.append(self._add(variant))
        if added:
            self._notify()
        return added

    def add_variant(self, step: MarkedFunction, shapes: dict[str, tuple[int, ...]], reason: str = "added by hand",
                    *, compile_only: bool = False, placeholders: bool = False,
                    on_done: Callable[[Job], None] | None = None) -> Job:
        """Queue ``step`` with these argument shapes (borrowing the arguments of its last call).
        ``compile_only``, ``placeholders``, ``on_done``: see ``Job`` (``%xla fit``'s jobs)."""
        if not step.calls:
            raise ValueError(f"{step.name} has not run yet: run it once so xla_lab knows its arguments")
        call = step.calls[-1]
        unknown = set(shapes) - set(call.shapes)
        if unknown:
            raise ValueError(f"{step.name} has no tensor argument {', '.join(sorted(unknown))}; "
                             f"its tensor arguments are {', '.join(call.shapes) or 'none'}")
        full = dict(call.shapes)
        full.update(shapes)
        with self._lock:
            job = self._add(Variant(step, call, full, call.training, reason))
            job.compile_only, job.placeholders, job.on_done = compile_only, placeholders, on_done
        self._notify()
        return job

    def _add(self, variant: Variant) -> Job:
        self._numbers += 1
        job = Job(self._numbers, variant, label=variant.label(), reason=variant.reason)
        self.jobs.append(job)
        return job

    # --- controls --------------------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True
        self._cancel_timer()
        self._notify()

    def resume(self) -> None:
        self.paused = False
        self._notify()
        if not self._busy:
            self._schedule(0.0)

    def clear(self) -> int:
        """Drop pending jobs (a running one finishes; finished ones stay in the record)."""
        with self._lock:
            pending = [j for j in self.jobs if j.state == "pending"]
            self.jobs = [j for j in self.jobs if j.state != "pending"]
        self._notify()
        return len(pending)

    def forget(self) -> int:
        """``%xla clear``: drop every job, pending and finished, and which graphs they compiled (a running
        one finishes, unlisted). What XLA's cache holds stays known (``_seen``, ``fit_peaks``). Returns
        how many were dropped."""
        with self._lock:
            dropped = [j for j in self.jobs if j is not self._current]
            self.jobs = [j for j in self.jobs if j is self._current]
            self._watch.clear()
            self._unclaimed.clear()
            self.last_wait = None
        self._notify()
        return len(dropped)

    # --- kernel events ---------------------------------------------------------------------------
    def kernel_idle(self, result=None) -> None:
        """``post_execute``: plan, and start working once the kernel has stayed idle a moment."""
        with self._lock:
            self._busy = False
        try:
            self.plan()
        except Exception as exc:  # the planner must never disturb the user's cell
            self.blocked = f"planning failed: {type(exc).__name__}: {exc}"
        if not self.paused:
            self._schedule(self.idle_delay)

    def kernel_busy(self) -> bool:
        """``pre_execute``: no new job starts from now on. True if a job is in flight (the execution's
        code must then wait for it: ``wait_for_job``)."""
        with self._lock:
            self._busy = True
            self._cancel_timer()
            self.last_wait = None
            return not self._idle.is_set()

    def job_in_flight(self) -> bool:
        return not self._idle.is_set()

    def wait_for_job(self, out=None) -> Wait | None:
        """Block until the job in flight (if any) has ended, however long its compile takes, and say
        so on ``out``. A KeyboardInterrupt cannot end the wait (XLA's compile cannot be stopped, and
        user code must not run beside it): callers hold SIGINT and deliver it afterwards; one that
        arrives anyway is re-raised once the job has ended."""
        if self._idle.is_set():
            return None
        job = self._current
        start = time.time()
        compiling = job is not None and job.phase == "compiling"
        if compiling and out is not None:
            expected = self.expected_compile_s(job)
            left = "" if expected is None else f", about {max(0.0, expected - (start - (job.started_at or start))):.1f} s left"
            print(f"xla_lab: waiting for the precompile job {job.label} to finish compiling{left}…",
                  file=out, flush=True)
        interrupted = False
        while True:
            try:
                if self._idle.wait(0.25):
                    break
            except KeyboardInterrupt:
                interrupted = True
        waited = time.time() - start
        self.last_wait = Wait(waited, job.label if job else "")
        if out is not None and waited > 0.05 and compiling:
            print(f"xla_lab: waited {waited:.1f} s for the precompile job.", file=out, flush=True)
        if interrupted:
            raise KeyboardInterrupt("interrupted while waiting for a precompile job")
        return self.last_wait

    def run_pending(self) -> None:
        """Run the pending jobs now, in this thread, paused or not (``%xla queue run``: what a pause
        to read gives the queue, on demand; tests and tutorials use it to be deterministic)."""
        while True:  # take the worker's place atomically: no timer may start one meanwhile
            self.wait_for_job()
            with self._lock:
                self._cancel_timer()
                if self._idle.is_set():
                    self._idle.clear()
                    break
        try:
            self._work(force=True)
        finally:
            self._idle.set()

    # --- accounting ------------------------------------------------------------------------------
    def claim(self, graph_hash: str) -> float | None:
        """A real step ran ``graph_hash`` from the cache: if a job compiled it, the compile seconds
        that step did not spend (once per compiled graph)."""
        with self._lock:
            job = self._unclaimed.pop(graph_hash, None)
            if job is None:
                return None
            saved = job.compiled.get(graph_hash, 0.0)
            job.used += 1
            job.saved_s += saved
        self._notify()
        return saved

    @property
    def saved_s(self) -> float:
        return sum(j.saved_s for j in self.jobs)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for j in self.jobs:
            out[j.state] += 1
        out["used"] = sum(1 for j in self.jobs if j.used)
        out["unused"] = sum(1 for j in self.jobs if j.state == "compiled" and not j.used and not j.compile_only)
        return out

    def expected_compile_s(self, job: Job) -> float | None:
        """How long compiles of this step took before (jobs of the same step), if known."""
        times = [j.compile_s for j in self.jobs if j.variant.step is job.variant.step and j.compiled
                 and j.compile_only == job.compile_only]
        return max(times) if times else None

    def current(self) -> Job | None:
        return self._current

    # --- the worker ------------------------------------------------------------------------------
    def _schedule(self, delay: float) -> None:
        with self._lock:
            self._cancel_timer()
            if not any(j.state == "pending" for j in self.jobs):
                return
            self._timer = threading.Timer(delay, self._start_worker)
            self._timer.daemon = True
            self._timer.start()

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _start_worker(self) -> None:
        """The idle timer fired: start a worker thread, unless user code started meanwhile."""
        with self._lock:
            if self._busy or self.paused or not self._idle.is_set():
                return
            if not any(j.state == "pending" for j in self.jobs):
                return
            self._idle.clear()  # in flight from now on: a cell that starts waits for the event
            thread = threading.Thread(target=self._worker, name="xla_lab-precompile", daemon=True)
        try:
            thread.start()
        except BaseException:
            self._idle.set()
            raise

    def _worker(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # a bug of xla_lab's: the queue stops, and says why; nothing is printed
            self.blocked = f"the precompile worker failed: {type(exc).__name__}: {exc}"
        finally:
            self._idle.set()  # the very last act: a waiting cell may start now

    def _work(self, force: bool = False) -> None:
        while True:
            with self._lock:
                if (self._busy or self.paused) and not force:
                    return
                job = next((j for j in self.jobs if j.state == "pending"), None)
                if job is None:
                    return
                if pending_lazy_work():
                    self.blocked = ("the kernel has pending lazy tensors (a cell left work unsynced); "
                                    "jobs start after the next sync")
                    self._notify()
                    return
                self.blocked = None
                job.state, job.phase, job.started_at = "running", "copying state", time.time()
                self._current = job
            self._notify()
            try:
                self._run(job, in_foreground=force)
            finally:
                self._current = None
                self._notify()

    def _run(self, job: Job, in_foreground: bool = False) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        from xla_lab.capture.metrics import MetricsDelta, MetricsSnapshot

        variant = job.variant
        # what ran before (the last cell's deferred capture work, whose profiler session must not record
        # the job, and plain cells' compiles) is put away first
        self.absorb()
        rng = RngState.save()
        before = MetricsSnapshot()
        graph_name = torch_xla._XLAC._get_current_graph_name()
        torch_xla._XLAC._set_current_graph_name(f"precompile_{variant.step.name}")  # names the dump
        shadow = None
        printed = io.StringIO()
        result = None
        try:
            shadow = build_shadow(variant.call.args, variant.call.kwargs, variant.changed(),
                                  variant.call.names, variant.training, placeholders=job.placeholders)
            donors = mark_donors(shadow, set(variant.changed())) if job.compile_only else []
            job.shadow_bytes = shadow.bytes
            self.shadow_bytes_peak = max(self.shadow_bytes_peak, shadow.bytes)
            job.phase = "tracing"
            self._notify()
            step_fn = with_private_print(variant.step.fn, printed)
            runs_before = graph_runs()
            with running_in_job():
                # The result stays alive through the sync, as in ``loss = step(...)``: a live
                # tensor is a graph output, and outputs are part of the graph's hash.
                if not variant.group:
                    result = step_fn(*shadow.args, **shadow.kwargs)
                else:  # a group's calls, one graph; the results the user did not hold were not outputs
                    result = []
                    for call, shapes, held in zip(variant.group, variant.group_shapes, variant.held):
                        args, kwargs = ((shadow.args, shadow.kwargs) if call is variant.call
                                        else shadow_call(shadow, call, shapes))
                        out = step_fn(*args, **kwargs)
                        if held:
                            result.append(out)
                        del out
            job.synced_while_tracing = graph_runs() != runs_before
            if self._busy and not in_foreground:  # a cell is waiting: drop the traced work, do not compile it
                shadow.release()
                shadow = result = None
                donors = []
                gc.collect()
                if not pending_lazy_work():
                    job.state, job.phase = "pending", ""
                    job.started_at = None
                    return
            job.phase = "compiling"
            self._notify()
            if job.compile_only:
                compile_without_running(shadow, result, donors)
            else:
                torch_xla.sync()
                xm.wait_device_ops()
            result = None
            donors = []
        except Exception as exc:
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.output = printed.getvalue()[-4000:]
            if shadow is not None:
                shadow.release()
            shadow = result = None
            donors = []
            gc.collect()
            if pending_lazy_work():  # a failed trace left work behind: run it so no cell inherits it
                with contextlib.suppress(Exception):
                    torch_xla.sync()
                    xm.wait_device_ops()
            rng.restore()
            torch_xla._XLAC._set_current_graph_name(graph_name or "")
        job.wall_s = time.time() - (job.started_at or time.time())
        hashes = self.absorb()
        seconds = [s.seconds for s in MetricsDelta(before, MetricsSnapshot()).samples["compile"]]
        with self._lock:
            for h, s in zip(hashes, seconds + [0.0] * (len(hashes) - len(seconds))):
                job.compiled[h] = s
                if not job.compile_only:  # (a compile-only graph is no cache entry a real step hits)
                    self._unclaimed[h] = job
            if not job.compile_only:
                self._seen.add(variant.key())
                self._tried.add(variant.key())
            if job.state != "failed":
                job.state = "compiled" if job.compiled else "cached"
            job.phase = ""
        if job.on_done is not None:
            try:
                job.on_done(job)
            except Exception as exc:  # the fit's bug must not stop the queue: it is the job's error
                job.error = (job.error + "; " if job.error else "") + f"{type(exc).__name__}: {exc}"

    def _notify(self) -> None:
        for listener in list(self.listeners):
            try:
                listener(self)
            except Exception:  # a view must not break the worker
                pass
