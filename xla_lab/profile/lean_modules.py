"""Lean capture's source of compiled modules: the ``/host:metadata`` plane of a profiler session, in place
of XLA's dump.

When a session ends, XLA serializes the ``HloProto`` (optimized module and buffer assignment) of every
executable alive then (``XlaDebugInfoManager``), one event metadata per module, named
``<module name>(<unique id>)``, its bytes in the stat "Hlo Proto". So the session that records a cell's
compiles (``compile_window.py``) also brings the modules they made, and modules compiled while it was
closed come with its next ending. Each module's unique id says whether it was seen before: a module
is new once, in the order XLA made it.
"""

from __future__ import annotations

import bisect
import re

from xla_lab.capture.dumps import CompiledModule
from xla_lab.hlo.hlo_proto import read_hlo_proto
from xla_lab.hlo.proto_frames import ProtoError

from .join import DISPATCH
from .xplane import ProfileFormatError, parse_space, read_space

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
_NAME = re.compile(r"^(?P<name>.*)\((?P<id>\d+)\)$")


def hlo_protos(data: bytes) -> list[tuple[str, int | None, bytes]]:
    """(module name, unique id, HloProto bytes) of every module in the session's metadata plane."""
    space = parse_space(data)
    out = []
    for plane in space.planes:
        if plane.name.decode("utf-8", "replace") != METADATA_PLANE:
            continue
        stat_names = {e.key: e.value.name.decode("utf-8", "replace") for e in plane.stat_metadata}
        for entry in plane.event_metadata:
            md = entry.value
            label = md.name.decode("utf-8", "replace")
            found = _NAME.match(label)
            for stat in md.stats:
                if stat_names.get(stat.metadata_id) == HLO_PROTO_STAT and stat.bytes_value:
                    out.append((found["name"] if found else label, int(found["id"]) if found else None,
                                stat.bytes_value))
    return out


# XLA's CPU runtime records, once per execution, the wait for its thunks on the thread that runs it
# (the dispatching one, or a task of the client's pool); a pool links a task to where it was handed
# over: ``Record`` there, ``StartRegion`` ... on the thread that runs it, with the same id (``_p``, ``_c``)
EXECUTION_WAIT = "ThunkExecutor::Execute (wait for completion)"
HAND_OVER = "ThreadpoolListener::Record"
TASK_START = "ThreadpoolListener::StartRegion"
CLOCK_SLACK_NS = 1_000.0
_LINK_DEPTH = 4


def executed_programs(data: bytes) -> list[int | None]:
    """The program (module unique id) of each execution a session recorded, in the order they were
    dispatched (None where the session did not see it run).

    A dispatch returns before its graph runs, so the next one may begin while the graph before still
    runs; the graph waits its turn and is handed to the pool later, by the thread that ran the one
    before. So a kernel is not the execution of the dispatch that began last before it. Executions run
    one at a time, in the order they were dispatched: each is found by its wait event (its program:
    the first kernel its thread ran in it) and given to the next dispatch, unless it began before that
    dispatch (it was dispatched before the session opened). Where the links say which dispatch handed
    an execution over (it ran inside the dispatch, or its task was handed over there, maybe through
    other tasks: one per device under SPMD), that is its dispatch. A profile without wait events
    (another runtime) falls back to the first kernel after each dispatch."""
    planes = read_space(data, frozenset(DISPATCH) | {EXECUTION_WAIT, HAND_OVER, TASK_START},
                        with_stat="program_id", stats=frozenset({"program_id", "_p", "_c"}))
    lines = [sorted(line.events, key=lambda e: e.start_ns) for plane in planes for line in plane.lines]
    dispatches = sorted(((ev.start_ns, ev.end_ns, n) for n, events in enumerate(lines) for ev in events
                         if ev.name in DISPATCH), key=lambda d: d[0])
    executions = _executions(lines, dispatches)
    if not executions:
        return _first_kernel_after([d[0] for d in dispatches], lines)
    out: list[int | None] = [None] * len(dispatches)
    nxt = 0
    for began, program, anchor in executions:
        if anchor is not None:
            nxt = anchor
        elif nxt >= len(dispatches) or dispatches[nxt][0] > began + CLOCK_SLACK_NS:
            continue  # (dispatched before the session opened, or by nobody it recorded)
        out[nxt] = program
        nxt += 1
    return out


def _executions(lines, dispatches) -> list[tuple[float, int | None, int | None]]:
    """(when it began running, its program, the dispatch that handed it over where the links say) of
    each execution, in the order they began."""
    links = _Links(lines, dispatches)
    found = []
    for n, events in enumerate(lines):
        kernel = None  # the first kernel the line ran in the execution it is running
        for e in events:
            if e.name == TASK_START:
                kernel = None
            elif isinstance(e.stats.get("program_id"), int):
                kernel = kernel or e
            elif e.name == EXECUTION_WAIT:
                found.append((kernel.start_ns if kernel is not None else e.start_ns,
                              kernel.stats["program_id"] if kernel is not None else None, links.origin(n, e.start_ns)))
                kernel = None
    return sorted(found, key=lambda f: f[0])


class _Links:
    """Which dispatch a moment of a thread's work comes from, through the tasks that handed it on."""

    def __init__(self, lines, dispatches):
        self.dispatches_on: dict[int, list[tuple[float, float, int]]] = {}  # line -> (start, end, index), by start
        for k, (start, end, on) in enumerate(dispatches):
            self.dispatches_on.setdefault(on, []).append((start, end, k))
        self.hand_overs = {e.stats["_p"]: (n, e.start_ns) for n, events in enumerate(lines) for e in events
                           if e.name == HAND_OVER and "_p" in e.stats}
        self.tasks = [[(e.start_ns, e.stats.get("_c")) for e in events if e.name == TASK_START] for events in lines]
        self.waits = [[e.start_ns for e in events if e.name == EXECUTION_WAIT] for events in lines]

    def origin(self, line: int, at: float, depth: int = 0) -> int | None:
        """The dispatch running on ``line`` at ``at``, or the one that handed over the task running
        there. A task that already waited for an execution hands on the next graph in line, which is
        not its dispatch's: None then (also past a few hand-overs, or where a link is missing)."""
        on = self.dispatches_on.get(line, [])
        j = bisect.bisect_right(on, (at, float("inf"), 0)) - 1  # (a thread's dispatches do not overlap)
        if j >= 0 and on[j][1] >= at:
            return on[j][2]
        tasks = self.tasks[line]
        i = bisect.bisect_right(tasks, (at, float("inf"))) - 1
        if i < 0 or depth >= _LINK_DEPTH:
            return None
        began, task = tasks[i]
        waits = self.waits[line]
        if bisect.bisect_left(waits, at) > bisect.bisect_left(waits, began):  # (a wait inside the task, before)
            return None
        handed = self.hand_overs.get(task)
        return self.origin(*handed, depth + 1) if handed is not None else None


def _first_kernel_after(starts: list[float], lines) -> list[int | None]:
    """A profile without thread-pool links: the first kernel that began after each dispatch, unless
    the next dispatch began before it (then it is the same graph in a loop, mostly)."""
    kernels = sorted((e.start_ns, e.stats["program_id"]) for events in lines for e in events
                     if isinstance(e.stats.get("program_id"), int))
    times = [k[0] for k in kernels]
    out: list[int | None] = []
    for n, start in enumerate(starts):
        i = bisect.bisect_left(times, start)
        following = starts[n + 1] if n + 1 < len(starts) else None
        out.append(kernels[i][1] if i < len(kernels) and (following is None or kernels[i][0] < following) else None)
    return out


class LeanModules:
    """The modules of one kernel's profiler sessions, each handed out once (``new``)."""

    def __init__(self):
        self._seen: set[int] = set()
        self.graph_of: dict[int, str] = {}  # module unique id -> graph hash, once a compile is paired with it

    def new(self, chunks: list[bytes], problems: list[str] | None = None) -> list[CompiledModule]:
        """Modules not seen in earlier sessions, oldest first. Unreadable bytes become ``problems``."""
        found: dict[int, tuple[str, bytes]] = {}
        for data in chunks:
            if not data:
                continue
            try:
                for name, module_id, raw in hlo_protos(data):
                    if module_id is not None and module_id not in self._seen:
                        found.setdefault(module_id, (name, raw))
            except ProfileFormatError as exc:
                if problems is not None:
                    problems.append(f"a profiler session's modules could not be read: {exc}")
        out = []
        for module_id in sorted(found):
            self._seen.add(module_id)
            name, raw = found[module_id]
            try:
                optimized = read_hlo_proto(raw)
            except ProtoError as exc:
                if problems is not None:
                    problems.append(f"the optimized module {name} could not be read: {exc}")
                continue
            out.append(CompiledModule(module_id, _graph_name(optimized.name), module_proto=optimized.module_proto,
                                      allocations=optimized.allocations))
        return out

    def programs(self, chunks: list[tuple[bytes, int]], first: int, count: int) -> list[int | None]:
        """The module each of a cell's ``count`` executions ran (None where no session recorded it):
        ``chunks``: (bytes, executions counted when that session opened); ``first``: the executions
        counted when the cell started."""
        out: list[int | None] = [None] * count
        for data, opened_at in chunks:
            if not data:
                continue
            try:
                programs = executed_programs(data)
            except ProfileFormatError:
                continue
            for k, program in enumerate(programs):
                at = opened_at + k - first
                if 0 <= at < count and out[at] is None:
                    out[at] = program
        return out


def _graph_name(module_name: str) -> str:
    """``cell_3.130`` -> ``cell_3`` (torch_xla names a module after its graph and an instruction id)."""
    head, dot, tail = module_name.rpartition(".")
    return head if dot and tail.isdigit() else module_name
