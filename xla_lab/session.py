"""The workbench of one kernel, its state in one place: runtime set-up, the artifact store, the dump
directory, the history, the queue, the notebook's prompts, the live panels, the launches no capture took
yet, the fits, the IPython hooks. ``clear()`` is the one reset (``%xla clear``); ``unloaded()`` and
``loaded()`` are ``%unload_ext`` and ``%load_ext``. Settings are read when the session is made, never
at import."""

from __future__ import annotations

import copy
import re
import threading

from xla_lab import runtime, settings
from xla_lab.capture.analysis import CellFiles, analyze_module
from xla_lab.capture.recompile import explain
from xla_lab.capture.dumps import DumpDirectory
from xla_lab.capture.records import CellCapture
from xla_lab.capture.recorder import CellRecorder
from xla_lab.capture.store import ArtifactStore
from xla_lab.capture import subgraphs
from xla_lab.capture.xla_logs import AppendedLog, parse_debug_log
from xla_lab.profile.session import DEFAULT_STEPS as DEFAULT_PROFILE_STEPS


def _compile_blocks(text: str) -> str:
    """Only the compile analyses (a plain loop can leave megabytes of execution analyses)."""
    prefix = "Compilation Analysis: "
    return "\n".join(line for line in text.splitlines() if line.startswith(prefix))


_EXECUTED_HASH = re.compile(r"^(?:Unexpected )?Execution Analysis: \s*Graph Hash: (\S+)", re.M)


class Session:
    def __init__(self):
        self.runtime = runtime.prepare()
        from xla_lab import launch
        from xla_lab.capture.prompts import CellPrompts
        from xla_lab.view.panel import LivePanels

        self.launches = launch.Launches()  # ended multi-process launches that no capture took yet
        launch.install(self.launches)  # multi-process work never touches this kernel's capture files
        subgraphs.install()  # the call stacks of loop bodies (scan, while_loop) that the graph loses
        if self.runtime.persistent_cache == "not set up":
            from xla_lab.precompile import persistent

            self.runtime.persistent_cache = persistent.enable(self.runtime.device_env)
        self.store = ArtifactStore()
        self.dumps = DumpDirectory(self.runtime.dump_dir)
        from xla_lab.profile.lean_modules import LeanModules

        self.lean_modules = LeanModules()  # lean capture's modules, from the profiler sessions
        self._lean_pending: list = []  # lean: compiles outside cells still waiting for their module
        self._history: list[CellCapture] = []
        self._completing: threading.Thread | None = None  # the last capture's completion (defer())
        self._needed = threading.Event()  # set when something waits for it (settle())
        # Oldest captures are dropped past this many (XLA_LAB_MAX_HISTORY, default 1000; 0 = keep all):
        # a capture is a few KB without its graphs, but a day of cells adds up.
        self.max_history = settings.current().max_history
        self.dropped_history = 0
        self.queue = None  # the precompile queue, made by start_queue()
        self.save = settings.current().save  # what notebooks keep of a %%xla output: full | summary (%xla save)
        self._unload_paused_queue = False
        self.profile_every_cell = False  # %xla profile on: every %%xla cell runs as with --profile
        self.profile_steps: int | None = DEFAULT_PROFILE_STEPS  # steps a profiled cell records (None: all)
        # the raw profiles (XSpace bytes) of the last profiled captures, for the XProf export; the
        # capture itself keeps the joined record
        self._profiles: list[tuple[CellCapture, bytes]] = []
        # how the model called each stack of identical layers in the last %%xla cell that ran it
        # (expr -> (the module list, weakly, its LayerCall, the cell's prompt)): the scan what-if's inputs
        self.layer_calls: dict[str, tuple] = {}
        self.prompts = CellPrompts()  # the notebook's prompts, fed before each cell runs (hooks.CellTracker)
        self.panels = LivePanels(settings.current().max_panels)  # displayed panels whose widgets are kept
        self.fits: list = []  # this kernel's fits (precompile/fit.FitResult), latest last
        self.hooks = None  # the gate and the cell tracker (xla_lab.hooks.KernelHooks, made when registered)

    @property
    def history(self) -> list[CellCapture]:
        """The captures, oldest first, each complete (``settle()``)."""
        self.settle()
        return self._history

    @property
    def lean(self) -> bool:
        return self.runtime.mode == "lean"

    def defer(self, capture: CellCapture, work) -> None:
        """Finish ``capture`` in the background: ``work()`` (analysing new graphs, recompile reasons,
        compile profiles, advice) needs no device and nothing the user does next, so the cell ends without
        waiting for it. Whatever reads captures, and every next execution, waits for it first (``settle``).
        Runs after the previous capture's work, in order; its failure is a note on the capture."""
        previous = self._completing
        self._needed = needed = threading.Event()

        def run():
            # Part of the work holds the interpreter in C++ (ending a profiler session, printing a module):
            # starting it at once would hold up the end of the cell itself (IPython's events, the kernel's
            # reply), so it starts a moment later, or as soon as something needs it (settle).
            needed.wait(DEFER_DELAY_S)
            if previous is not None:
                previous.join()
            try:
                work()
            except Exception as exc:  # never lose the capture to its analysis
                capture.notes.append(f"xla_lab's analysis of the cell failed: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=run, name="xla_lab-complete-capture", daemon=True)
        self._completing = thread
        thread.start()

    def settle(self) -> None:
        """Wait for the captures' deferred work (``defer``); at once when there is none."""
        thread = self._completing
        if thread is None or thread is threading.current_thread():
            return
        self._needed.set()
        thread.join()
        if self._completing is thread:
            self._completing = None

    def start_queue(self, namespace=None):
        """The precompile queue of this kernel (made once)."""
        from xla_lab.precompile.queue import PrecompileQueue

        if self.queue is None:
            variables = namespace if callable(namespace) or namespace is None else (lambda: namespace)
            self.queue = PrecompileQueue(lambda: self.absorb_outside_work(claim=False), variables)
            self.queue.persistent_cache = self.runtime.persistent_cache
        return self.queue

    def unloaded(self) -> None:
        """``%unload_ext xla_lab``: the queue stops taking jobs (nothing runs them without the events)."""
        if self.queue is not None and not self.queue.paused:
            self.queue.pause()
            self._unload_paused_queue = True

    def loaded(self, namespace) -> None:
        """``%load_ext xla_lab`` (again): the queue works again, unless the user had paused it."""
        self.start_queue(namespace).adopt(namespace)
        if self._unload_paused_queue:
            self._unload_paused_queue = False
            self.queue.resume()

    def recorder(self, *, cell_id: str, execution_count: int | None, source: str,
                 cell_file: str | None, graph_name: str | None, track_lines: str = "auto",
                 cells: CellFiles | None = None) -> CellRecorder:
        return CellRecorder(self.runtime, self.store, self.dumps, cell_id=cell_id,
                            execution_count=execution_count, source=source, cell_file=cell_file,
                            graph_name=graph_name, track_lines=track_lines, cells=cells,
                            earlier=self._history,
                            claim_precompiled=self.queue.claim if self.queue is not None else None)

    def add(self, capture: CellCapture) -> None:
        self._history.append(capture)
        if self.max_history and len(self._history) > self.max_history:
            extra = len(self._history) - self.max_history
            del self._history[:extra]
            self.dropped_history += extra
        # (the store is trimmed once the capture's analysis is done: cell_run's deferred work)

    def absorb_outside_work(self, claim: bool = True) -> list[str]:
        """After work outside ``%%xla`` cells (plain cells, precompile jobs): keep the HLO of graphs it
        compiled (a later ``%%xla`` cell that hits them analyses and shows it), empty the logs, and
        delete the dump's other files. Returns the hashes compiled, in order."""
        self.settle()
        if not self.runtime.sync_log:
            self.dumps.collect()
            return []
        text = AppendedLog(self.runtime.debug_file).read_and_reset()
        if self.runtime.ir_log:
            AppendedLog(self.runtime.ir_file).read_and_reset()
        compiles = [e for e in parse_debug_log(_compile_blocks(text)) if e.kind == "compile"]
        compiled = {e.graph_hash for e in compiles}
        if claim and self.queue is not None:  # a plain cell ran a precompiled graph: it counts as used
            for h in dict.fromkeys(_EXECUTED_HASH.findall(text)):
                if h not in compiled:
                    self.queue.claim(h)
        if self.lean:  # the modules: from a profiler session's list of live modules
            self._lean_pending.extend(compiles)
            if compiles:
                self.adopt_lean_modules(self.lean_modules.new([live_modules()]))
        else:
            for event, module in zip(compiles, self.dumps.collect()):
                self._keep_outside(event, module)
        if compiles:
            self.store.trim()
        return [e.graph_hash for e in compiles]

    def _keep_outside(self, event, module) -> None:
        art = self.store.get_or_create(event.graph_hash, event.graph_name)
        self.store.attach_module(art, module, None)
        self.store.defer_analysis(art, module)

    def adopt_lean_modules(self, modules: list) -> None:
        """Lean capture: modules compiled outside ``%%xla`` cells (precompile jobs, plain cells), paired
        with the compiles the sync log named since (newest with newest: a module freed before the session
        listed it leaves the oldest compile without one)."""
        pending, self._lean_pending = self._lean_pending, []
        n = min(len(pending), len(modules))
        for event, module in zip(pending[len(pending) - n:], modules[len(modules) - n:]):
            self.lean_modules.graph_of[module.number] = event.graph_hash
            self._keep_outside(event, module)

    def keep_profile(self, capture: CellCapture, data: bytes, keep: int = 8) -> None:
        self._profiles = [(c, d) for c, d in self._profiles if c is not capture][-(keep - 1):] + [(capture, data)]

    def raw_profile(self, capture: CellCapture) -> bytes | None:
        return next((d for c, d in self._profiles if c is capture), None)

    def explain_pair(self, new_hash: str, old_hash: str) -> str | None:
        """Why graph ``new_hash`` differs from ``old_hash`` (e.g. a precompile job's graph that the
        real step did not hit), analysing a graph compiled outside a cell first if need be."""
        signatures = []
        for graph_hash in (new_hash, old_hash):
            art = self.store.get(graph_hash)
            if art is not None and art.signature is None:
                module = self.store.take_unanalyzed(graph_hash)
                if module is not None:
                    # on a copy, with no cells known: the graph keeps its full analysis for later
                    art, stored = copy.copy(art), art
                    analyze_module(art, module, CellFiles())
                    self.store.defer_analysis(stored, module)
            signatures.append(art.signature if art is not None else None)
        if not all(signatures):
            return None
        return explain(signatures[0], signatures[1], compared_with="the job's graph")

    def keep_layer_calls(self, stacks: dict, calls: dict, prompt: int) -> None:
        """The calls cell ``prompt`` recorded (``layer_call.CallRecording``), by the stacks' names."""
        import weakref

        for expr, call in calls.items():
            self.layer_calls[expr] = (weakref.ref(stacks[expr]), call, prompt)

    def layer_call(self, layers):
        """(the recorded call of this module list, the prompt of the cell that ran it), by identity under
        whatever name it was reached, or (None, None)."""
        for ref, call, prompt in self.layer_calls.values():
            if ref() is layers:
                return call, prompt
        return None, None

    def clear(self) -> dict[str, int]:
        """``%xla clear``: forget every capture, stored graph, raw profile, recorded layer call, queue job,
        fit and untaken launch, and close the live panels' widgets. Kept: the settings and choices
        (%xla save, profile), the notebook's prompts (they name lines of cells that run later), and what
        mirrors the process's compiled code (the queue's knowledge of XLA's cache, the loop bodies'
        stacks). Returns how many of each were dropped."""
        self.settle()
        dropped = {"captures": len(self._history), "panels": self.panels.close_all(),
                   "queue jobs": self.queue.forget() if self.queue is not None else 0,
                   "profiles": len(self._profiles), "fits": len(self.fits)}
        self._history.clear()
        self._profiles.clear()
        self.layer_calls.clear()
        self.fits.clear()
        self.launches.clear()
        self.store.clear()
        self.dropped_history = 0
        return dropped


DEFER_DELAY_S = 0.1  # how long a capture's deferred work lets the cell's own end go first


def live_modules() -> bytes:
    """A profiler session started and ended at once: XLA lists every live executable's module when a
    session ends (lean capture's modules of compiles outside cells). Empty when one cannot start."""
    import torch_xla

    try:
        return bytes(torch_xla._XLAC.profiler.TslProfilerSessionWrapper().stop())
    except Exception:  # another session runs (a user's trace): the next cell's window lists them
        return b""


_SESSION: Session | None = None


def get() -> Session:
    """The session of this process, created on first use (sets the runtime up)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = Session()
    return _SESSION


def current() -> Session | None:
    return _SESSION
