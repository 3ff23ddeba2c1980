"""Turn one run of a cell into a ``CellCapture``.

``CellRecorder.start()`` snapshots the metrics and hooks explicit syncs; ``finish()`` syncs what the
cell left pending, then joins four sources into steps:

* the sync log (one block per execution, one per compile: hash, graph name, Python frames),
* the IR log (IR text of each synced graph),
* XLA's dump (HLO before/after of each compile, in compile order),
* metric samples (compile / execute / transfer times, in time order).

A step's host-side window runs from the end of the previous step to the end of its own sync
(the hook's return for explicit syncs; the end of the value's execution and transfer for implicit
ones). ``trace_s`` is the host time of that window not spent compiling, transferring or (for
implicit syncs) waiting for the execution.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .dumps import DumpDirectory
from .analysis import CellFiles, analyze
from .metrics import NOT_FALLBACKS, MetricsDelta, MetricsSnapshot, Sample
from .recompile import explain

from .records import TIMING_KEYS, CellCapture, StepRecord
from .store import ArtifactStore
from .xla_logs import AppendedLog, CompileWatch, Frame, SyncEvent, parse_debug_log, parse_ir_log

HOOK_FUNCTION = "_xla_lab_step_marker"


@dataclass
class _ExplicitSync:
    enter: float
    exit: float = 0.0
    executed: bool = False
    final: bool = False
    fallbacks: dict[str, int] | None = None


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
            if self.mode == "auto" and self.hits_in_a_row >= self.STEADY_AFTER:
                self._set(False)

    def stop(self) -> None:
        self._set(True)  # outside %%xla cells, graphs compile with their lines

    def _set(self, on: bool) -> None:
        self.paused = not on
        self._xlac._set_ir_debug(on)


class SyncHook:
    """Wraps ``torch_xla._XLAC._xla_step_marker`` (what ``torch_xla.sync`` and ``xm.mark_step``
    call) to timestamp explicit syncs. Costs a few clock and counter reads and one ``stat`` per sync."""

    def __init__(self, debug_file: str, tracking: LineTracking):
        import torch_xla

        self._xlac = torch_xla._XLAC
        self._debug_file = debug_file
        self._original = None
        self.records: list[_ExplicitSync] = []
        self.final_pending = False
        self.tracking = tracking

    def install(self) -> None:
        if self._original is not None:
            return
        original = self._xlac._xla_step_marker
        if getattr(original, "__name__", "") == HOOK_FUNCTION:  # left over from a crashed run
            original = original.__wrapped__
        self._original = original
        records = self.records
        debug_file = self._debug_file
        hook = self
        tracking = self.tracking
        compiles = self._xlac._xla_counter_value

        def _xla_lab_step_marker(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841  (an error of the sync shows at the user's line)
            record = _ExplicitSync(enter=time.time(), final=hook.final_pending, fallbacks=fallback_counts())
            size = _size(debug_file)
            uncached = compiles("UncachedCompile")
            done = False
            try:
                out = original(*args, **kwargs)
                done = True
                return out
            finally:
                record.exit = time.time()
                # A sync that raised (XLA rejected the graph) logged a compile but ran nothing.
                record.executed = done and _size(debug_file) != size
                records.append(record)
                tracking.after_sync(compiled=compiles("UncachedCompile") != uncached, executed=record.executed)

        _xla_lab_step_marker.__wrapped__ = original
        self._xlac._xla_step_marker = _xla_lab_step_marker

    def uninstall(self) -> None:
        if self._original is not None:
            self._xlac._xla_step_marker = self._original
            self._original = None


def fallback_counts() -> dict[str, int]:
    """Cumulative count per CPU-fallback op (about 1 us when there are none)."""
    import torch_xla

    xlac = torch_xla._XLAC
    names = xlac._get_executed_fallback_ops()
    if not names:
        return {}
    return {n.removeprefix("aten::"): xlac._xla_counter_value(n) or 0 for n in names if n not in NOT_FALLBACKS}


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


class CellRecorder:
    """Records one run of one cell. Use ``start()``, run the cell, then ``finish()``."""

    def __init__(self, runtime, store: ArtifactStore, dumps: DumpDirectory, *, cell_id: str,
                 execution_count: int | None, source: str, cell_file: str | None,
                 graph_name: str | None, track_lines: str = "auto", cells: CellFiles | None = None,
                 earlier: list[CellCapture] | None = None, claim_precompiled=None):
        self.runtime = runtime
        # graph hash -> seconds a precompile job saved, for the first real run of a graph it compiled
        self.claim_precompiled = claim_precompiled
        self.device_error: BaseException | None = None  # a graph failed while running (set by finish)
        self.named = False  # the user named the cell's graphs (%%xla -n): runs of other cells may share it
        self.store = store
        self.cells = cells or CellFiles({cell_file: execution_count} if cell_file else {})
        self.earlier = earlier or []  # captures of earlier cell runs, oldest first
        self.dumps = dumps
        self.capture = CellCapture(cell_id=cell_id, execution_count=execution_count, source=source,
                                   started_at=time.time(), graph_name=graph_name)
        self.cell_file = cell_file
        self.source_lines = source.splitlines()
        self._sync_log = AppendedLog(runtime.debug_file)
        self._ir_log = AppendedLog(runtime.ir_file)
        self._tracking = LineTracking(track_lines)
        self._hook = SyncHook(str(runtime.debug_file), self._tracking)
        self._before: MetricsSnapshot | None = None
        self._previous_graph_name: str | None = None
        self._t0 = 0.0
        self._explicit_of_step: list[_ExplicitSync | None] = []  # parallel to capture.steps
        self._fallbacks_at_start: dict[str, int] = {}
        self._fallbacks_at_end: dict[str, int] = {}

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        import torch_xla

        # Anything written before this cell (syncs outside %%xla) is not ours.
        self._sync_log.read_and_reset()
        if self.runtime.ir_log:
            self._ir_log.read_and_reset()
        self.dumps.collect()
        self._previous_graph_name = torch_xla._XLAC._get_current_graph_name()
        if self.capture.graph_name:
            torch_xla._XLAC._set_current_graph_name(self.capture.graph_name)
        self._before = MetricsSnapshot()
        self._fallbacks_at_start = fallback_counts()
        self._tracking.start()
        self._hook.install()
        self._t0 = time.time()
        self.capture.started_at = self._t0

    def compile_watch(self) -> CompileWatch:
        """A watch on the sync log that says "a compile started for graph H at time t" while the cell
        runs (for live progress); it reads without consuming, so the capture is unchanged."""
        return CompileWatch(self.runtime.debug_file if self.runtime.sync_log else None)

    def final_sync(self) -> None:
        """Sync what the cell left pending (the cell's last step)."""
        __tracebackhide__ = True  # noqa: F841
        import torch_xla

        self._hook.final_pending = True
        try:
            torch_xla.sync()
        finally:
            self._hook.final_pending = False

    def finish(self, error: BaseException | None = None) -> CellCapture:
        """Wait for the device, read every source, build the steps. Never raises for capture
        problems: they become notes on the capture."""
        import torch_xla
        import torch_xla.core.xla_model as xm

        try:
            try:
                xm.wait_device_ops()
            except Exception as exc:  # a graph failed while running (e.g. out of memory): the magic reports it
                self.device_error = exc
                self.capture.notes.append(f"XLA failed while running a graph: {exc}")
            end = time.time()
            self._hook.uninstall()
            self._tracking.stop()
            self._fallbacks_at_end = fallback_counts()
            after = MetricsSnapshot()
            torch_xla._XLAC._set_current_graph_name(self._previous_graph_name or "")
            delta = MetricsDelta(self._before, after)
            events = parse_debug_log(self._sync_log.read_and_reset())
            irs = parse_ir_log(self._ir_log.read_and_reset()) if self.runtime.ir_log else []
            modules = self.dumps.collect()
            self.capture.wall_s = end - self._t0
            self.capture.metrics = delta.as_dict()
            self.capture.fallback_ops = dict(delta.fallbacks)
            error = error if error is not None else self.device_error
            if error is not None:
                self.capture.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            self._build_steps(events, irs, modules, delta)
        except Exception as exc:  # capture must never take the user's cell down
            self._hook.uninstall()
            self._tracking.stop()
            self.capture.notes.append(f"capture failed: {type(exc).__name__}: {exc}")
        return self.capture

    # --- joining the sources ---------------------------------------------------------------
    def _build_steps(self, events, irs, modules, delta: MetricsDelta) -> None:
        executions = [e for e in events if e.kind == "execute"]
        if delta.counts["execute"] and not executions and self.runtime.sync_log:
            self.runtime.sync_log = False
            self.capture.notes.append(
                "torch_xla's sync log is not reaching xla_lab in this kernel (the runtime started "
                "before xla_lab was loaded), so steps are rebuilt from metrics only."
            )
        if executions:
            self._steps_from_events(events, irs, modules)
            self._explain_recompiles()
        else:
            self._steps_from_metrics(delta)
        self._assign_timings(delta)
        executions, compiles = delta.counts["execute"], delta.counts["compile"]
        misses = sum(1 for s in self.capture.steps if s.cache == "miss")
        if self.capture.steps and (executions != len(self.capture.steps) or compiles != misses):
            self.capture.notes.append(
                f"torch_xla recorded {executions} executions and {compiles} compiles for {len(self.capture.steps)} "
                f"steps with {misses} misses (work outside the graph syncs, e.g. another thread, ran too): "
                "per-step times were matched to the latest samples and may be shifted; totals are exact."
            )
        if self._tracking.compiled_while_paused:
            self.capture.notes.append(
                f"{self._tracking.compiled_while_paused} graph(s) compiled after the loop had reached a "
                "steady state, while source-line tracking was paused for speed: their HLO has op types "
                "but no source lines. Use `%%xla --track-lines always` to keep lines on every step."
            )
        if any(delta.lost.values()):
            lost = ", ".join(f"{k}: {v}" for k, v in delta.lost.items() if v)
            self.capture.notes.append(
                "torch_xla keeps the last 1024 samples per metric; the earliest samples of this cell "
                f"were dropped ({lost}), so the first steps have no per-step timings. Totals are exact."
            )

    def _steps_from_events(self, events: list[SyncEvent], irs, modules) -> None:
        ir_by_hash = {}
        for g in irs:
            ir_by_hash.setdefault(g.graph_hash, g.ir_text)
        module_queue = list(modules)
        # A compile XLA rejected is logged but never executed, and it may have left a dump: if every
        # compile left one, pair them in order, so the next compile does not take the rejected one's.
        compiles = [e for e in events if e.kind == "compile"]
        by_order = len(modules) == len(compiles) and len(compiles) > sum(
            1 for a, b in zip(events, events[1:]) if a.kind == "compile" and b.kind == "execute"
            and a.graph_hash == b.graph_hash)
        explicit = [r for r in self._hook.records if r.executed]
        pending_compile: SyncEvent | None = None
        compiled_module = None
        steps = []
        for ev in events:
            if ev.kind == "compile":
                pending_compile = ev
                if by_order:
                    compiled_module = module_queue.pop(0) if module_queue else None
                continue
            miss = pending_compile is not None and pending_compile.graph_hash == ev.graph_hash
            pending_compile = None
            artifacts = self.store.get_or_create(ev.graph_hash, ev.graph_name)
            if ev.graph_hash in ir_by_hash:
                self.store.attach_ir(artifacts, ir_by_hash[ev.graph_hash])
            module = None
            if miss:
                if by_order:
                    module = compiled_module
                else:
                    module = module_queue.pop(0) if module_queue else None
                if module is not None:
                    self.store.attach_module(artifacts, module, self.capture.execution_count)
                elif self.runtime.hlo_dump:
                    self.capture.notes.append(f"no XLA dump was found for the compile of {ev.graph_hash}")
            module = module or self.store.take_unanalyzed(ev.graph_hash)  # compiled outside %%xla
            if module is not None:
                self.capture.notes.extend(analyze(artifacts, module.proto_before, module.proto_after, self.cells))
            is_explicit = any(f.function == HOOK_FUNCTION for f in ev.frames)
            record = explicit.pop(0) if (is_explicit and explicit) else None
            cause, line = self._cause(ev, record)
            saved = None if miss or self.claim_precompiled is None else self.claim_precompiled(ev.graph_hash)
            steps.append(StepRecord(
                index=len(steps), graph_name=ev.graph_name, graph_hash=ev.graph_hash,
                cache="miss" if miss else ("hit" if saved is None else "precompiled"), sync_cause=cause,
                sync_line=line, sync_code=self._code(line), artifacts=artifacts, saved_s=saved,
            ))
            self._explicit_of_step.append(record)
        self.capture.steps = steps

    def _explain_recompiles(self) -> None:
        """For each miss, compare with the nearest earlier graph of this cell: an earlier step of this
        run synced at the same place, else the same step of the cell's previous run (or, for a cell
        run for the first time, of the last run of a cell with the same ``--name``)."""
        steps = self.capture.steps
        previous_runs = [c for c in reversed(self.earlier) if c.cell_id == self.capture.cell_id]
        if not previous_runs and self.named:
            # A new cell that reuses a name (``%%xla -n predict`` in two cells) continues that graph.
            previous_runs = [c for c in reversed(self.earlier) if c.graph_name == self.capture.graph_name]
        for step in steps:
            if step.cache != "miss":
                continue
            candidates = [other for other in reversed(steps[:step.index])
                          if (other.sync_line, other.sync_cause) == (step.sync_line, step.sync_cause)]
            for run in previous_runs:
                candidates += [s for s in run.steps if s.index == step.index]
                candidates += [s for s in run.steps
                               if (s.sync_line, s.sync_cause) == (step.sync_line, step.sync_cause)]
            candidates = [c for c in candidates if c.graph_hash != step.graph_hash]
            # Prefer a graph with as many inputs: then the difference is in what those inputs are.
            baseline = next((c for c in candidates if _same_arity(c, step)), candidates[0] if candidates else None)
            new = step.artifacts.signature if step.artifacts else None
            old = baseline.artifacts.signature if baseline is not None and baseline.artifacts else None
            split = None
            if step.sync_cause.startswith("implicit"):
                where = f" at line {step.sync_line}" if step.sync_line else ""
                split = f"the step was cut mid-way{where} ({step.sync_cause.removeprefix('implicit: ')}): " \
                        "the graph ends there and the rest of the step is another graph"
            if new is None:
                step.recompile_reason = split or "no HLO was captured for this compile, so it cannot be compared"
            elif baseline is not None and old is None:
                evicted = baseline.artifacts is not None and baseline.artifacts.evicted
                step.recompile_reason = split or (
                    "the earlier graph of this cell was evicted to bound memory (XLA_LAB_MAX_GRAPHS), so it "
                    "cannot be compared" if evicted else "the earlier graph of this cell has no captured HLO to compare with")
            else:
                step.recompile_reason = explain(new, old, split_by=split)

    def _steps_from_metrics(self, delta: MetricsDelta) -> None:
        """Degraded mode (no sync log): one step per execution sample; a compile that ended before
        an execution started is that execution's miss."""
        compiles = list(delta.samples["compile"])
        steps = []
        for sample in delta.samples["execute"]:
            miss = bool(compiles) and compiles[0].end <= sample.start + 1e-3
            if miss:
                compiles.pop(0)
            steps.append(StepRecord(index=len(steps), graph_name=self.capture.graph_name,
                                    graph_hash="unknown", cache="miss" if miss else "hit",
                                    sync_cause="unknown (sync log unavailable)"))
            self._explicit_of_step.append(None)
        self.capture.steps = steps

    def _cause(self, ev: SyncEvent, record: _ExplicitSync | None) -> tuple[str, int | None]:
        line = self._cell_line(ev.frames)
        if record is not None and record.final:
            return "end of cell", None
        functions = [(f.function, os.path.basename(f.file)) for f in ev.frames]
        if record is not None or any(f.function == HOOK_FUNCTION for f in ev.frames):
            if ("next", "parallel_loader.py") in functions:
                return "torch_xla.sync() by the device loader (MpDeviceLoader)", line
            if ("mark_step", "xla_model.py") in functions:
                return "xm.mark_step()", line
            if ("optimizer_step", "xla_model.py") in functions:
                return "xm.optimizer_step(barrier=True)", line
            return "torch_xla.sync()", line
        return implicit_cause(ev.frames, self._code(line)), line

    def _cell_line(self, frames: list[Frame]) -> int | None:
        if self.cell_file is None:
            return None
        for f in frames:
            if f.file == self.cell_file:
                return f.line
        return None

    def _code(self, line: int | None) -> str | None:
        if line is None or not 1 <= line <= len(self.source_lines):
            return None
        return self.source_lines[line - 1].strip()

    # --- timings -------------------------------------------------------------------------
    def _assign_timings(self, delta: MetricsDelta) -> None:
        steps = self.capture.steps
        executes = _align(delta.samples["execute"], len(steps))
        misses = [s for s in steps if s.cache == "miss"]
        compiles = dict(zip(map(id, misses), _align(delta.samples["compile"], len(misses))))
        from_device = list(delta.samples["from_device"])
        # End of each step's host-side window.
        ends: list[float | None] = []
        for step, ex in zip(steps, executes):
            record = self._explicit_of_step[len(ends)]
            if record is not None:
                ends.append(record.exit)
            elif ex is not None:
                later = [s.end for s in from_device if s.end >= ex.end]
                ends.append(min(later) if later else ex.end)
            else:
                ends.append(None)
        buckets = {k: [0.0] * len(steps) for k in ("to_device", "from_device")}
        outside = {"to_device_s": 0.0, "from_device_s": 0.0}
        for kind in ("to_device", "from_device"):
            for sample in delta.samples[kind]:
                idx = next((i for i, e in enumerate(ends) if e is not None and sample.end <= e + 1e-4), None)
                if idx is None:
                    outside[f"{kind}_s"] += sample.seconds
                else:
                    buckets[kind][idx] += sample.seconds
        previous_end = self._t0
        for i, step in enumerate(steps):
            ex = executes[i]
            comp = compiles.get(id(step))
            t = dict.fromkeys(TIMING_KEYS)
            t["execute_s"] = ex.seconds if ex else None
            t["compile_s"] = (comp.seconds if comp else None) if step.cache == "miss" else 0.0
            t["to_device_s"] = buckets["to_device"][i]
            t["from_device_s"] = buckets["from_device"][i]
            if ends[i] is not None:
                window = ends[i] - previous_end
                blocking = (t["compile_s"] or 0.0) + t["to_device_s"] + t["from_device_s"]
                if self._explicit_of_step[i] is None:
                    blocking += t["execute_s"] or 0.0
                t["trace_s"] = max(0.0, window - blocking)
                previous_end = ends[i]
            step.timings = t
        self.capture.outside_steps = {k: v for k, v in outside.items() if v}
        self._assign_fallbacks()

    def _assign_fallbacks(self) -> None:
        """Fallbacks that ran since the previous explicit sync go to the next explicit step (implicit
        syncs have no hook to count at); what ran after the last one goes to the last step."""
        previous = self._fallbacks_at_start
        steps = self.capture.steps
        for step, record in zip(steps, self._explicit_of_step):
            if record is not None and record.fallbacks is not None:
                step.fallback_ops = _diff(record.fallbacks, previous)
                previous = record.fallbacks
        rest = _diff(self._fallbacks_at_end, previous)
        if rest and steps:
            for op, n in rest.items():
                steps[-1].fallback_ops[op] = steps[-1].fallback_ops.get(op, 0) + n


def _same_arity(a: StepRecord, b: StepRecord) -> bool:
    sa = a.artifacts.signature if a.artifacts else None
    sb = b.artifacts.signature if b.artifacts else None
    return bool(sa and sb) and len(sa["params"]) == len(sb["params"])


def _align(samples: list[Sample], n: int) -> list[Sample | None]:
    """The last ``n`` samples line up with the last ``n`` steps (older ones may have been dropped)."""
    samples = samples[-n:] if n else []
    return [None] * (n - len(samples)) + list(samples)


_VALUE_READS = (
    (".item(", ".item()"),
    (".tolist(", ".tolist()"),
    (".numpy(", ".numpy()"),
    (".cpu(", ".cpu()"),
    ("'cpu'", ".to('cpu')"),
    ('"cpu"', '.to("cpu")'),
)


def implicit_cause(frames: list[Frame], code: str | None) -> str:
    """Name the Python action that made torch_xla run the graph before a sync was asked for."""
    names = [(f.function, os.path.basename(f.file)) for f in frames]
    if any(file == "_tensor_str.py" or (fn in ("__repr__", "__str__", "__format__") and file == "_tensor.py")
           for fn, file in names):
        return "implicit: tensor printed (print/repr/format needs its value)"
    if code:
        for needle, label in _VALUE_READS:
            if needle in code:
                return f"implicit: {label} reads the value"
    if any(fn in ("__bool__", "__index__", "__int__", "__float__") for fn, _ in names):
        return "implicit: tensor used as a Python number/bool"
    return "implicit: Python read a tensor's value (data-dependent code or a CPU fallback)"
