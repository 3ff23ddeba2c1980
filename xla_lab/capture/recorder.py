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
from .analysis import CellFiles, analyze
from .dumps import DumpDirectory
from .instrument import LineTracking, SyncHook, fallback_counts
from .metrics import MetricsDelta, MetricsSnapshot
from .records import CellCapture
from .store import ArtifactStore
from .xla_logs import AppendedLog, CompileWatch, parse_debug_log, parse_ir_log


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
        """Call ``listener(executed)`` after each explicit sync of the cell (``torch_xla.sync()``,
        ``xm.mark_step()``); the time it takes is not counted as the user's."""
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

    def finish(self, error: BaseException | None = None) -> CellCapture:
        """Wait for the device, read every source, build the steps. Never raises for capture
        problems: they become notes on the capture."""
        import torch_xla
        import torch_xla.core.xla_model as xm

        try:
            from xla_lab.runtime import runtime_started

            try:
                if runtime_started():  # (waiting would start it: see final_sync)
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
            joins.explain_recompiles(self.capture.steps, joins.previous_runs(self.capture, self.earlier, self.named),
                                    self.earlier, self.capture.execution_count)
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

    def _steps_from_events(self, events, irs, modules) -> None:
        """The joined steps, with each graph's text stored once and each new compile analysed once."""
        ir_by_hash = {}
        for g in irs:
            ir_by_hash.setdefault(g.graph_hash, g.ir_text)
        paired = joins.pair_executions(events, len(modules), self._hook.records)
        steps = joins.steps_of(paired, self.cell_file, self.source_lines, self.cells.files)
        for step, p in zip(steps, paired):
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
                self.capture.notes.extend(analyze(artifacts, module.proto_before, self.cells))
            if not p.miss and self.claim_precompiled is not None:
                step.saved_s = self.claim_precompiled(step.graph_hash)
                if step.saved_s is not None:
                    step.cache = "precompiled"
        self._explicit_of_step = [p.explicit for p in paired]
        self.capture.steps = steps
