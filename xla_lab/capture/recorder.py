"""Turn one run of a cell into a ``CellCapture``.

``CellRecorder.start()`` snapshots the metrics and instruments torch_xla (``instrument.py``: the
sync hook, source-line tracking); ``finish()`` waits for the device and reads four sources:

* the sync log (one block per execution, one per compile: hash, graph name, Python frames),
* the IR log (IR text of each synced graph),
* XLA's dump (HLO before/after of each compile, in compile order),
* metric samples (compile / execute / transfer times, in time order),

joins them into steps (``steps.py``, pure functions), stores each graph's text once
(``ArtifactStore``) and analyses each new compile (``analysis.py``).
"""

from __future__ import annotations

import time

from . import steps as joins
from .analysis import CellFiles, analyze_module
from .dumps import DumpDirectory
from .instrument import LineTracking, SyncHook, fallback_counts
from .metrics import MetricsDelta, MetricsSnapshot, Sample
from .records import CellCapture
from .store import ArtifactStore
from .xla_logs import AppendedLog, CompileWatch, parse_debug_log, parse_ir_log


EXECUTE_METRICS = ("ExecuteTime", "ExecuteReplicatedTime")
LEAN_REASON = (" (lean capture: compared on the optimized modules, whose inputs and ops are XLA's after "
               "optimization; full capture compares the traced graphs)")


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
        self.lean = getattr(runtime, "mode", "full") == "lean"
        self._hook = SyncHook(str(runtime.debug_file), self._tracking, frames=self.lean, cell_file=cell_file)
        self._to_analyze: list[tuple] = []  # (artifacts, module) of graphs to analyse in complete()
        self.outside_modules: list = []
        self._waited = False
        self._ended = None  # (the logs' text, the metrics delta), from end() for build()
        self._lean = None  # lean: modules of compiles outside the cell (e.g. precompile jobs)
        self._paired: list[joins.Paired] = []
        self._before: MetricsSnapshot | None = None
        self._previous_graph_name: str | None = None
        self._t0 = 0.0
        self._explicit_of_step: list[joins.ExplicitSync | None] = []  # parallel to capture.steps
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

    def on_explicit_sync(self, listener) -> None:
        """Call ``listener(executed, compiles)`` after each explicit sync of the cell (``torch_xla.sync()``,
        ``xm.mark_step()``; ``compiles``: torch_xla's UncachedCompile count after it, which the hook has read
        anyway); the time it takes is not counted as the user's."""
        self._hook.listeners.append(listener)

    def compile_watch(self) -> CompileWatch:
        """A watch on the sync log that says "a compile started for graph H at time t" while the cell
        runs (for live progress); it reads without consuming, so the capture is unchanged."""
        return CompileWatch(self.runtime.debug_file if self.runtime.sync_log else None)

    def final_sync(self) -> None:
        """Sync what the cell left pending (the cell's last step)."""
        __tracebackhide__ = True  # noqa: F841
        import torch_xla

        from xla_lab.runtime import runtime_started

        if not runtime_started():  # nothing ran on this process's device (e.g. only xmp.spawn's workers):
            return  # a sync would start the runtime, and torch_xla refuses xmp.spawn after that
        self._hook.final_pending = True
        try:
            torch_xla.sync()
        finally:
            self._hook.final_pending = False

    def wait_for_device(self) -> None:
        """Wait until the cell's graphs have run (once; ``finish`` calls it too). A graph that failed while
        running becomes ``device_error`` and a note (the magic reports it)."""
        if self._waited:
            return
        self._waited = True
        import torch_xla.core.xla_model as xm

        from xla_lab.runtime import runtime_started

        try:
            if runtime_started():  # (waiting would start it: see final_sync)
                xm.wait_device_ops()
        except Exception as exc:  # a graph failed while running (e.g. out of memory)
            self.device_error = exc
            self.capture.notes.append(f"XLA failed while running a graph: {exc}")

    def finish(self, error: BaseException | None = None, modules: list | None = None, lean=None) -> CellCapture:
        """``end`` then ``build``: the capture with its steps."""
        self.end(error)
        return self.build(modules, lean)

    def end(self, error: BaseException | None = None) -> CellCapture:
        """What must happen when the cell ends: wait for the device, take the hook off, read the
        metrics and the logs, note the error. Never raises for capture problems: they become notes.
        The capture has no steps until ``build``."""
        import torch_xla

        try:
            self.wait_for_device()
            end = time.time()
            self._hook.uninstall()
            self._tracking.stop()
            self._fallbacks_at_end = fallback_counts()
            after = MetricsSnapshot()
            torch_xla._XLAC._set_current_graph_name(self._previous_graph_name or "")
            delta = MetricsDelta(self._before, after)
            logs = (self._sync_log.read_and_reset(), self._ir_log.read_and_reset() if self.runtime.ir_log else "")
            self.capture.wall_s = end - self._t0
            self.capture.metrics = delta.as_dict()
            self.capture.fallback_ops = dict(delta.fallbacks)
            error = error if error is not None else self.device_error
            if error is not None:
                self.capture.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            self._ended = (logs, delta)
        except Exception as exc:  # capture must never take the user's cell down
            self._hook.uninstall()
            self._tracking.stop()
            self.capture.notes.append(f"capture failed: {type(exc).__name__}: {exc}")
        return self.capture

    def build(self, modules: list | None = None, lean=None) -> CellCapture:
        """The steps and their timings, from what ``end`` read (it need not run before the cell ends).
        ``modules``: lean capture's compiled modules (``profile/lean_modules.py``), in place of the dump's;
        ``lean``: (its ``LeanModules``, [(session bytes, executions counted when it opened)]), to tell which
        module each execution ran. What takes longer (analysing new graphs, recompile reasons) is left
        for ``complete()``."""
        self._lean = lean
        if self._ended is None:
            return self.capture
        (sync_text, ir_text), delta = self._ended
        self._ended = None
        try:
            events = parse_debug_log(sync_text)
            irs = parse_ir_log(ir_text) if self.runtime.ir_log else []
            if modules is None:
                modules = self.dumps.collect()
            self._build_steps(events, irs, modules, delta)
        except Exception as exc:  # capture must never take the user's cell down
            self.capture.notes.append(f"capture failed: {type(exc).__name__}: {exc}")
        return self.capture

    # --- joining the sources ---------------------------------------------------------------
    def _build_steps(self, events, irs, modules, delta: MetricsDelta) -> None:
        executions = [e for e in events if e.kind == "execute"]
        if self.lean:  # (lean: the log has compiles only)
            executions = [e for e in events if e.kind == "compile"]
            seen = delta.counts["compile"]
        else:
            seen = delta.counts["execute"]
        if seen and not executions and self.runtime.sync_log:
            self.runtime.sync_log = False
            self.capture.notes.append(
                "torch_xla's sync log is not reaching xla_lab in this kernel (the runtime started "
                "before xla_lab was loaded), so steps are rebuilt from metrics only."
            )
        if self.lean and self.runtime.sync_log:
            self._steps_lean(events, modules, delta)
        elif executions:
            self._steps_from_events(events, irs, modules)
        else:
            self.capture.steps = joins.steps_from_metrics(delta.samples, self.capture.graph_name)
            self._explicit_of_step = [None] * len(self.capture.steps)
        self.capture.outside_steps = joins.assign_timings(self.capture.steps, self._explicit_of_step, delta.samples,
                                                          self._t0)
        joins.assign_fallbacks(self.capture.steps, self._explicit_of_step, self._fallbacks_at_start,
                               self._fallbacks_at_end)
        executions, compiles = delta.counts["execute"], delta.counts["compile"]
        misses = sum(1 for s in self.capture.steps if s.cache == "miss")
        if self.capture.steps and (executions != len(self.capture.steps) or compiles != misses):
            self.capture.notes.append(
                f"torch_xla recorded {executions} executions and {compiles} compiles for {len(self.capture.steps)} "
                f"steps with {misses} misses (work outside the graph syncs, e.g. another thread, ran too): "
                "per-step times were matched to the latest samples and may be shifted; totals are exact."
            )
        eager_ops, eager_compiles = delta.counts.get("eager_execute", 0), delta.counts.get("eager_compile", 0)
        if eager_ops or eager_compiles:
            self.capture.notes.append(
                f"eager mode: {eager_ops} ops ran one by one (torch_xla.experimental.eager_mode), "
                f"{eager_compiles} of them compiled on their own ({delta.totals_s['eager_compile']:.3f} s compiling, "
                f"{delta.totals_s['eager_execute']:.3f} s running); XLA fuses nothing across them and they are "
                "not graph steps. For a fused graph, wrap the step in torch_xla.compile or leave eager mode."
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

    def sync_windows(self) -> dict[int, tuple[float, float]]:
        """Step index -> when the explicit sync that ended it was entered and returned (unix seconds):
        what a profiler session's events of that sync are found by (``profile/attach.py``)."""
        return {step.index: (record.enter, record.exit)
                for step, record in zip(self.capture.steps, self._explicit_of_step) if record is not None}

    def complete(self) -> list[str]:
        """The work ``finish()`` left: analyse each graph the cell compiled (or first ran, when it was
        compiled outside ``%%xla``) once, then say why each miss recompiled. Returns notes."""
        notes: list[str] = []
        pending, self._to_analyze = self._to_analyze, []
        for artifacts, module in pending:
            notes.extend(analyze_module(artifacts, module, self.cells))
        if self._paired or any(s.cache == "miss" for s in self.capture.steps):
            earlier = [c for c in self.earlier if c is not self.capture]  # (the history holds this run by now)
            joins.explain_recompiles(self.capture.steps, joins.previous_runs(self.capture, earlier, self.named),
                                     earlier, self.capture.execution_count)
            if self.lean:
                for step in self.capture.steps:
                    if step.cache == "miss" and step.recompile_reason and step.artifacts is not None \
                            and step.artifacts.lean:
                        step.recompile_reason += LEAN_REASON
        return notes

    def _steps_lean(self, events, modules, delta: MetricsDelta) -> None:
        """Lean capture: executions from metrics, explicit syncs from the hook, compiles from the sync
        log's compile blocks (``steps.pair_lean``); the modules from the profiler session, in order."""
        compiles = [e for e in events if e.kind == "compile"]
        runs = joins.previous_runs(self.capture, [c for c in self.earlier if c is not self.capture], self.named)
        known: dict = {}
        for run in reversed(runs):  # (newest last: its sites win)
            known.update(getattr(run, "lean_sites", None) or {})
        executions = delta.samples["execute"]
        lost = delta.lost.get("execute", 0)
        if lost:  # (torch_xla keeps the last 1024 samples: the first steps of a long loop are its records')
            first = executions[0].start if executions else float("inf")
            early = sorted((r for r in self._hook.records if r.executed and r.enter < first),
                           key=lambda r: r.enter)[-lost:]
            executions = [Sample(end=r.exit, seconds=0.0) for r in early] + list(executions)
        programs, graph_of = [None] * len(executions), {}
        if self._lean is not None:
            lean_modules, recorded = self._lean
            first = sum(m.count for name, m in self._before.metrics.items() if name in EXECUTE_METRICS)
            programs, graph_of = lean_modules.programs(recorded, first, len(executions)), lean_modules.graph_of
        paired = joins.pair_lean(compiles, self._hook.records, executions, delta.samples["compile"],
                                 known, self.capture.graph_name, programs, graph_of)
        self._pair_modules(paired, programs, modules, graph_of)
        self._join(paired, {}, modules)
        self.capture.lean_sites = joins.lean_sites(self.capture.steps, paired)
        if any(s.graph_hash == "unknown" for s in self.capture.steps):
            self.capture.notes.append(
                "lean capture: some cached steps ran a graph the cell had not synced from that place before; "
                "torch_xla's per-execution analysis, which names it, is off in lean mode, so their graph is unknown.")

    def _pair_modules(self, paired, programs: list, modules: list, graph_of: dict) -> None:
        """Each miss's module: the one its execution ran (the profile's program id), else, in order, the
        newest modules left (a session lists every module made since the last one, e.g. a precompile
        job's before the cell's). Modules no miss took are ``outside_modules``."""
        by_id = {m.number: n for n, m in enumerate(modules)}
        misses = [(p, program) for p, program in zip(paired, programs) if p.miss]
        for p, program in misses:
            if program in by_id:
                p.module = by_id.pop(program)
        left = [p for p, _ in misses if p.module is None]
        spare = sorted(by_id.values())
        if left and len(spare) >= len(left):
            for p, n in zip(left, spare[len(spare) - len(left):]):
                p.module = n
        elif left:
            self.capture.notes.append(
                f"lean capture: the profiler session brought {len(spare)} new modules for {len(left)} of the "
                "cell's compiles: those steps have no HLO.")
        taken = {p.module for p, _ in misses if p.module is not None}
        for p, _ in misses:
            if p.module is not None:
                graph_of[modules[p.module].number] = p.event.graph_hash
        self.outside_modules = [m for n, m in enumerate(modules) if n not in taken]

    def _steps_from_events(self, events, irs, modules) -> None:
        """The joined steps, with each graph's text stored once and each new compile queued for analysis."""
        ir_by_hash = {}
        for g in irs:
            ir_by_hash.setdefault(g.graph_hash, g.ir_text)
        paired = joins.pair_executions(events, len(modules), self._hook.records)
        self._join(paired, ir_by_hash, modules)

    def _join(self, paired, ir_by_hash: dict, modules) -> None:
        steps = joins.steps_of(paired, self.cell_file, self.source_lines, self.cells.files)
        for step, p in zip(steps, paired):
            if step.graph_hash == "unknown":  # (lean capture: a hit of a graph it cannot name)
                continue
            artifacts = step.artifacts = self.store.get_or_create(step.graph_hash, step.graph_name)
            if step.graph_hash in ir_by_hash:
                self.store.attach_ir(artifacts, ir_by_hash[step.graph_hash])
            module = modules[p.module] if p.module is not None else None
            if p.miss:
                if module is not None:
                    self.store.attach_module(artifacts, module, self.capture.execution_count)
                elif self.runtime.hlo_dump:
                    self.capture.notes.append(f"no XLA dump was found for the compile of {step.graph_hash}")
            module = module or self.store.take_unanalyzed(step.graph_hash)  # compiled outside %%xla
            if module is not None:
                self._to_analyze.append((artifacts, module))
            if not p.miss and self.claim_precompiled is not None:
                step.saved_s = self.claim_precompiled(step.graph_hash)
                if step.saved_s is not None:
                    step.cache = "precompiled"
        self._explicit_of_step = [p.explicit for p in paired]
        self._paired = paired
        self.capture.steps = steps
