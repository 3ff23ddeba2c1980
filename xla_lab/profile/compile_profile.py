"""Where a compile's seconds went, read from the events XLA records of its own compile (a profiler
session open around it, ``compile_window.py``). Pure: planes in, one JSON-ready profile per compile out.

What XLA records (torch_xla 2.9, ``design.md`` "Compile-time facts"): on the thread that compiles,
nested, ``XLAGraphExecutor::Compile`` (torch_xla lowers its IR to HLO, then asks the client) >
``PjRtComputationClient::Compile`` (what torch_xla's ``CompileTime`` metric times) > the client's
compile > the HLO pass pipelines (every pass an event of its own name, from XLA's ``HloPassPipeline``,
the same code on every device) and the backend (``CpuCompiler::RunBackend`` on the CPU client), in
which kernels are emitted (``ThunkEmitter::EmitEntryComputation`` on the compiling thread, one
``FusionCompiler::Compile`` per kernel on the ``xla-cpu-codegen`` threads, in parallel) and then
turned into machine code (``Codegen`` > ``JitCompiler::Compile``, also spread over those threads, in
parts that are not named per kernel).

The compile's time on its thread is cut into phases that add up to ``CompileTime``: each instant
belongs to the innermost event that names a phase, and an instant no such event covers is named by
the event around it ("untraced"). Kernel emission also counts the compiling thread's wait for the
codegen threads to finish. Time on the codegen threads is thread time: with N threads busy it can be
N times the wall time it overlaps, and it is reported beside the phases, never summed into them.
"""

from __future__ import annotations

from collections import defaultdict

from .xplane import Event, Plane, session_start_ns

CLIENT_COMPILE = "PjRtComputationClient::Compile"  # torch_xla's CompileTime
GRAPH_COMPILE = "XLAGraphExecutor::Compile"  # lowering to HLO, then the client's compile
SYNC = "SyncTensorsGraph"  # torch_xla's sync: the lowering, the compile, handing the execution over
DONATION_WAIT = "Wait for donation holds"  # freeing a buffer donated to an execution still running
KERNEL_COMPILE = "FusionCompiler::Compile"  # one per emitted kernel, stat "module", "op_count"
CODEGEN = "Codegen"
TASKS = "TaskDispatcher::dispatch"  # machine-code generation of one LLVM module, on a codegen thread
OTHER_THREADS = frozenset({KERNEL_COMPILE, TASKS})  # what is read of threads that did not compile
EMIT = "ThunkEmitter::EmitEntryComputation"
VERIFIER = "RunInvariantCheckers"  # XLA's HLO verifier, run after passes
# events that only contain others: their own (untraced) time is named after them
CONTAINERS = {
    CLIENT_COMPILE: "client: outside the compiler",
    "PjRtCpuClient::Compile": "client: before the HLO passes",
    "CpuCompiler::RunBackend": "backend: untraced",
    "CpuCompiler::CompileCpuExecutable": "backend: untraced",
}
BACKENDS = ("CpuCompiler::RunBackend", "GpuCompiler::RunBackend", "TpuCompiler::RunBackend")
# named steps of the backend: event name -> phase
BACKEND_STEPS = {EMIT: "kernel emission", CODEGEN: "LLVM codegen", "JitCompiler::Compile": "LLVM codegen",
                 "SplitModule": "LLVM codegen", "CpuCompiler::CloneAsThreadSafeModule": "LLVM codegen"}
# host events that may land inside a compile without being part of it
NOT_PASSES = {"ThreadpoolListener::Record", "ThreadpoolListener::StartRegion", "ThreadpoolListener::StopRegion"}
PASSES = "HLO passes"
EMISSION = "kernel emission"
CODEGEN_PHASE = "LLVM codegen"
SETUP = "HLO module setup"
SCHEDULE = "scheduling and buffer assignment"
TEARDOWN = "backend teardown"
WRAP_UP = "executable wrap-up"
OTHER = "other (untraced)"
TRACED = (PASSES, EMISSION, CODEGEN_PHASE)
PHASE_ORDER = (SETUP, PASSES, SCHEDULE, EMISSION, CODEGEN_PHASE, TEARDOWN, WRAP_UP, OTHER)
KERNEL_SUFFIXES = ("_kernel_module", ".clone_kernel_module")


def _tree(events: list[Event]) -> dict[int, list[Event]]:
    """Children of each event (by id) on one thread: events nest by time."""
    ordered = sorted(events, key=lambda e: (e.start_ns, -e.duration_ns))
    children: dict[int, list[Event]] = defaultdict(list)
    stack: list[Event] = []
    for ev in ordered:
        while stack and ev.start_ns >= stack[-1].end_ns - 1e-3:
            stack.pop()
        if stack:
            children[id(stack[-1])].append(ev)
        stack.append(ev)
    return children


def kernel_name(module: str) -> str:
    """``add_fusion.3_kernel_module`` -> ``add_fusion.3`` (the kernel's name in the optimized module)."""
    for suffix in KERNEL_SUFFIXES:
        if module.endswith(suffix):
            return module[: -len(suffix)]
    return module


def compile_profiles(planes: list[Plane]) -> list[dict]:
    """One profile per client compile the planes hold, in the order they started."""
    out = []
    for plane in planes:
        lines = [(line.name, line.events) for line in plane.lines]
        for name, events in lines:
            roots = [e for e in events if e.name == CLIENT_COMPILE]
            if not roots:
                continue
            children = _tree(events)
            graphs = [e for e in events if e.name == GRAPH_COMPILE]
            syncs = [e for e in events if e.name == SYNC]
            waits = [e for e in events if e.name == DONATION_WAIT]
            for root in roots:
                outer = _around(graphs, root)
                others = [(n, evs) for n, evs in lines if n != name]
                profile = _profile(root, outer, children, others, name)
                profile["execution_wait_ns"] = execution_wait(outer or root, syncs, waits)
                out.append(profile)
    out.sort(key=lambda p: p["started_ns"])
    return out


def execution_wait(compiled: Event, syncs: list[Event], waits: list[Event]) -> float | None:
    """How long the sync that compiled waited, after the compile, for the step's own execution (None: no
    sync event around the compile, e.g. ``torch.compile``'s runs). torch_xla 2.9 hands the execution to
    XLA on its executor thread; the step's inputs, donated to it, are freed by whichever thread lets go of
    them last, and freeing a donated buffer waits until the execution releases it. With source lines on
    (``XLA_IR_DEBUG``), the syncing thread is mostly last: the step's execution then no longer overlaps
    what the program does next (README, "Benchmarks")."""
    sync = _around(syncs, compiled)
    if sync is None:
        return None
    return float(sum(w.duration_ns for w in waits if w.start_ns >= compiled.end_ns and w.end_ns <= sync.end_ns + 1e3))


def sync_waits(planes: list[Plane]) -> list[tuple[float, float, float]]:
    """Every sync of a thread that compiled (``SyncTensorsGraph``): its start and end (unix ns) and how
    long it waited inside for a donated buffer (a cache hit's wait for the step's own execution, as
    ``execution_wait`` is a compiling sync's). Empty when the profile does not say when it started."""
    base = session_start_ns(planes)
    if base is None:
        return []
    out = []
    for plane in planes:
        for line in plane.lines:
            syncs = [e for e in line.events if e.name == SYNC]
            waits = [e for e in line.events if e.name == DONATION_WAIT]
            for s in syncs:
                out.append((base + s.start_ns, base + s.end_ns, float(sum(
                    w.duration_ns for w in waits if s.start_ns <= w.start_ns and w.end_ns <= s.end_ns + 1e3))))
    return out


def _around(candidates: list[Event], inner: Event) -> Event | None:
    """The first of ``candidates`` (events of the same thread) whose interval holds ``inner``'s."""
    return next((e for e in candidates if e.start_ns <= inner.start_ns and inner.end_ns <= e.end_ns), None)


def _segments(root: Event, children) -> list[tuple[float, float, str, Event]]:
    """The root's interval cut into (start, end, phase, event) pieces by the innermost event naming
    a phase."""
    out: list[tuple[float, float, str, Event]] = []

    def walk(ev: Event, phase: str | None, in_passes: bool, in_step: bool = False) -> None:
        own = phase
        if ev.name in CONTAINERS and not in_passes:
            own = CONTAINERS[ev.name]
        elif _client_compile(ev) and not in_passes and ev is not root:
            own = "client: before the HLO passes"  # another client's compile (GPU, TPU plugins)
        elif ev.name in BACKEND_STEPS and not in_passes:
            own = BACKEND_STEPS[ev.name]
        elif ev.name in BACKENDS:
            own = "backend: untraced"
        elif "::" in ev.name and not in_passes and ev is not root and ev.name not in NOT_PASSES:
            own, in_step = ev.name, True  # a compiler step of another backend: named after its event
        elif not in_passes and not in_step and ev is not root and ev.name not in NOT_PASSES:
            own, in_passes = PASSES, True  # a pass pipeline (or a pass the backend runs itself): HLO
            # pass names never hold "::", C++ steps do
        cursor = ev.start_ns
        for child in children.get(id(ev), ()):
            if child.start_ns > cursor:
                out.append((cursor, child.start_ns, own, ev))
            walk(child, own, in_passes or own == PASSES, in_step)
            cursor = max(cursor, child.end_ns)
        if ev.end_ns > cursor:
            out.append((cursor, ev.end_ns, own, ev))

    walk(root, None, False)
    return out


def _profile(root: Event, outer: Event | None, children, other_lines, thread: str) -> dict:
    segments = _segments(root, children)
    # kernels emitted on other threads while this compile ran
    kernels, kernel_lanes, parts = [], set(), []
    for lane, events in other_lines:
        for ev in events:
            if not (root.start_ns <= ev.start_ns and ev.end_ns <= root.end_ns + 1e6):
                continue
            if ev.name == KERNEL_COMPILE:
                module = str(ev.stats.get("module") or "")
                kernels.append({"name": kernel_name(module), "ns": ev.duration_ns,
                                "op_count": ev.stats.get("op_count"), "start_ns": ev.start_ns})
                kernel_lanes.add(lane)
            elif ev.name == TASKS:
                parts.append((lane, ev))
    emission_end = max((k["start_ns"] + k["ns"] for k in kernels), default=None)
    # untraced backend time while kernels were still being emitted on other threads is the compiling
    # thread waiting for them: kernel emission
    phased = []
    for start, end, phase, ev in segments:
        if phase == "backend: untraced" and emission_end is not None and kernels:
            first = min(k["start_ns"] for k in kernels)
            if start < emission_end and end > first:
                lo, hi = max(start, first), min(end, emission_end)
                if lo > start:
                    phased.append((start, lo, phase, ev))
                phased.append((lo, hi, EMISSION, ev))
                if end > hi:
                    phased.append((hi, end, phase, ev))
                continue
        phased.append((start, end, phase, ev))
    phased = _placed(phased, root, children)
    totals: dict[str, float] = defaultdict(float)
    for start, end, phase, _ in phased:
        totals[phase] += end - start
    total = root.duration_ns
    phases = [{"name": name, "ns": ns, "share": ns / total if total else 0.0,
               "traced": name in TRACED or "::" in name}
              for name, ns in sorted(totals.items(), key=lambda kv: _order(kv[0]))]
    unknown = sum(ns for name, ns in totals.items() if name == OTHER)
    traced = sum(ns for name, ns in totals.items() if name in TRACED or "::" in name)
    passes = _passes(root, children)
    codegen = _first(root, children, CODEGEN)
    backend = _first(root, children, *BACKENDS)
    kernels.sort(key=lambda k: -k["ns"])
    for k in kernels:
        k.pop("start_ns")
    return {
        "started_ns": root.start_ns,
        "thread": thread,
        "module": (backend.stats.get("name") if backend is not None else None),
        "compile_ns": total,
        "lowering_ns": (outer.duration_ns - total) if outer is not None else None,
        "phases": phases,
        "explained": 1.0 - unknown / total if total else 0.0,
        "traced": traced / total if total else 0.0,
        "pipelines": passes["pipelines"],
        "passes": passes["passes"],
        "kernels": kernels,
        # whether XLA recorded an emission event per kernel at all (torch_xla 2.9's XLA does; 2.8's emits
        # every kernel into one LLVM module, compiled in parts, and records none)
        "kernel_events": bool(kernels),
        "kernel_threads": len(kernel_lanes),
        "kernel_thread_ns": sum(k["ns"] for k in kernels),
        "codegen": {
            "ns": codegen.duration_ns if codegen is not None else None,
            "functions": (codegen.stats.get("num_compiled_functions") if codegen is not None else None),
            "parts": (codegen.stats.get("num_default_parts") if codegen is not None else None),
            "thread_ns": sum(ev.duration_ns for _, ev in parts),
            "threads": len({lane for lane, _ in parts}),
        },
    }


def _placed(segments, root: Event, children) -> list:
    """Name the compiling thread's untraced time by where it falls, as XLA's source orders the CPU
    compile (pjrt/cpu/cpu_client.cc, service/cpu/cpu_compiler.cc, torch_xla's
    pjrt_computation_client.cpp): before the first pass the client builds the HLO module from its
    proto; in the backend before kernel emission it schedules the module and assigns buffers; between
    emission and ``Codegen`` it verifies and splits the LLVM modules (LLVM codegen); after ``Codegen``
    the compile state is torn down; after the backend the client wraps the executable up (cost
    analysis, fingerprint, memory stats, the optimized module's proto). Anything else is ``OTHER``."""
    emit = _first(root, children, EMIT)
    codegen = _first(root, children, CODEGEN)
    backend = _first(root, children, *BACKENDS)
    pass_spans = [(s, e) for s, e, phase, _ in segments if phase == PASSES]
    first_pass = min((s for s, _ in pass_spans), default=None)
    last_pass = max((e for _, e in pass_spans), default=None)
    out = []
    for start, end, phase, ev in segments:
        if phase.startswith("client:"):
            if backend is not None and start >= backend.end_ns - 1e-3:
                phase = WRAP_UP
            elif first_pass is not None and end <= first_pass + 1e-3:
                phase = SETUP
            elif first_pass is not None and last_pass is not None and start >= first_pass and end <= last_pass + 1e-3:
                phase = PASSES
            elif phase == "client: outside the compiler" and start < (first_pass or root.end_ns):
                phase = SETUP
            else:
                phase = OTHER
        elif phase == "backend: untraced":
            if emit is not None and end <= emit.start_ns + 1e-3:
                phase = SCHEDULE
            elif codegen is not None and start >= codegen.end_ns - 1e-3:
                phase = TEARDOWN
            elif codegen is not None and end <= codegen.start_ns + 1e-3:
                phase = CODEGEN_PHASE
            else:
                phase = OTHER
        out.append((start, end, phase, ev))
    return out


def _client_compile(ev: Event) -> bool:
    """A PjRt client's own compile (``PjRtCpuClient::Compile``, ``PjRtStreamExecutorClient::CompileInternal``):
    it runs the HLO pass pipelines, then the backend."""
    return ev.name.startswith("PjRt") and "::Compile" in ev.name and ev.name != CLIENT_COMPILE


def _order(name: str) -> tuple:
    return (PHASE_ORDER.index(name) if name in PHASE_ORDER else len(PHASE_ORDER), name)


def _first(root: Event, children, *names: str) -> Event | None:
    todo = [root]
    while todo:
        ev = todo.pop()
        if ev.name in names:
            return ev
        todo.extend(children.get(id(ev), ()))
    return None


def _passes(root: Event, children) -> dict:
    """The pipelines the client ran (top-level pass events) and every pass by its own time (its
    time less its sub-passes'), the HLO verifier counted once under its own name."""
    pipelines: list[dict] = []
    own: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])

    def visit(ev: Event) -> None:
        inner = children.get(id(ev), ())
        self_ns = ev.duration_ns - sum(c.duration_ns for c in inner)
        entry = own[ev.name]
        entry[0] += self_ns
        entry[1] += 1
        for child in inner:
            visit(child)

    def find(ev: Event) -> None:
        for child in children.get(id(ev), ()):
            if child.name in BACKENDS or child.name in BACKEND_STEPS or child.name in NOT_PASSES:
                continue
            if child.name in CONTAINERS or _client_compile(child):  # the client's compile holds the pipelines
                find(child)
                continue
            if "::" in child.name:  # another C++ step of the backend: not a pass
                continue
            pipelines.append({"name": child.name, "ns": child.duration_ns})
            visit(child)

    find(root)
    merged: dict[str, float] = defaultdict(float)
    for p in pipelines:
        merged[p["name"]] += p["ns"]
    passes = [{"name": name, "ns": ns, "count": int(count)} for name, (ns, count) in own.items()]
    passes.sort(key=lambda p: -p["ns"])
    return {"pipelines": [{"name": n, "ns": ns} for n, ns in merged.items()], "passes": passes}
