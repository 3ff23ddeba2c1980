"""Join a profiler session's events to a cell's steps: which execution ran which step, how long each
kernel of it took, and what the host did around it. Pure: planes and step descriptions in, a
JSON-ready record out (stored as ``CellCapture.profile``).

What the CPU client records (torch_xla 2.9): torch_xla's dispatch of each execution
(``PjRtComputationClient::ExecuteComputation`` / ``ExecuteReplicated``) on its own thread, then one
event per executed thunk on XLA's threads, named after the optimized HLO instruction, with
``hlo_module`` naming the module. A thunk that runs in parallel ends later on another thread, with an
``end: <op>`` event linked by a flow id (the start's ``_p`` is the end's ``_c``): a kernel's time is
from its start to the later of the two ends. Executions run one after another on a device (the next
one waits for the buffers of the last), but a step is dispatched while the last may still run: a
module's executions are told apart by a kernel that runs once in each (``_executions``).

A kernel's *compute* time is its runs' intervals, each instant shared by its execution's runs going on
then (``_attributed``), without the runs that are not the kernel's own time (``_left_out``: a one-time
warm-up, a run beside a compile); a step's compute time is then at most its dispatch-to-ready time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .xplane import Event, Plane

DISPATCH = ("PjRtComputationClient::ExecuteComputation", "PjRtComputationClient::ExecuteReplicated")
# host activities of torch_xla shown per step (python thread): name -> key in the step's "host"
HOST = {"SyncTensorsGraphInternal": "sync_ns", "XLAGraphExecutor::Compile": "compile_ns",
        "PjRtComputationClient::TransferToDevice": "to_device_ns",
        "PjRtComputationClient::TransferFromDevice": "from_device_ns"}
# what the join reads of a profile (xplane.read_space's filter): the events above, the kernels (they
# carry hlo_module) and their "end: " events
WANTED = frozenset(DISPATCH) | frozenset(HOST) | {"StepMarker"}
WANTED_STATS = frozenset({"hlo_module"})  # (end events are read bare and paired in order)
TIMELINE_LIMIT = 20_000  # events kept for the timeline and the Chrome trace (the rest are counted)
# A kernel's first run in the cell is a one-time warm-up, left out of its time, when it took this many times
# the median of its other runs and this much longer: the first matrix multiply of a process ran 30-80 ms
# where later ones ran 20-60 us (oneDNN's gemm generates its kernels on first use; plain torch_xla, no
# profiler, does the same), and averaged in it made a tiny matmul read as 200x slower than it is.
WARM_UP_RATIO = 10.0
WARM_UP_MIN_NS = 1e6
WARM_UP_TAIL = 2.0  # the runs soon after a warm-up that take over this many times a steady run are its tail
LEFT_OUT = ("warm-up", "beside a compile")  # why a kernel's run is left out of its compute time


@dataclass
class StepInfo:
    index: int
    module: str | None  # the optimized module's name (``HloModule cell_3.175``), None when unknown
    graph_hash: str
    kernels: frozenset[str]  # kernel names of the graph (``Kernel.name``), empty when unknown
    execute_s: float | None = None  # torch_xla's ExecuteTime of the step: dispatch to outputs ready


@dataclass
class _Kernel:
    name: str
    module: str
    lane: str
    start: float
    end: float


def _lanes(planes: list[Plane]):
    for plane in planes:
        for line in plane.lines:
            yield f"{plane.name} {line.name}".strip(), line.events


def kernel_events(planes: list[Plane]) -> list[_Kernel]:
    """Each executed thunk, its start and end paired across threads, in start order. A start and its
    ``end: <op>`` event are paired by flow id when the events carry it, else in order per kernel name
    (a kernel's runs on one device follow each other; runs on several devices at once may pair
    crosswise, which leaves each kernel's total time unchanged)."""
    ends_by_flow: dict[object, float] = {}
    ends_by_name: dict[str, list[float]] = {}
    starts: list[tuple[str, Event]] = []
    for lane, events in _lanes(planes):
        for ev in events:
            name = ev.name
            if name.startswith("end: "):
                flow = ev.stats.get("_c") if ev.stats else None
                if flow is not None:
                    ends_by_flow[flow] = max(ends_by_flow.get(flow, 0.0), ev.start_ns + ev.duration_ns)
                else:
                    ends_by_name.setdefault(name[5:], []).append(ev.start_ns + ev.duration_ns)
            elif "hlo_module" in ev.stats:
                starts.append((lane, ev))
    starts.sort(key=lambda pair: pair[1].start_ns)
    for ends in ends_by_name.values():
        ends.sort()
    taken: dict[str, int] = {}
    out = []
    for lane, ev in starts:
        stats = ev.stats
        name = stats.get("hlo_op") or ev.name
        end = ev.start_ns + ev.duration_ns
        flow = stats.get("_p")
        if flow is not None and flow in ends_by_flow:
            end = max(end, ends_by_flow[flow])
        else:
            ends = ends_by_name.get(ev.name)
            if ends:
                i = taken.get(ev.name, 0)
                if i < len(ends):
                    taken[ev.name] = i + 1
                    end = max(end, ends[i])
        out.append(_Kernel(str(name), str(stats["hlo_module"]), lane, ev.start_ns, end))
    return out


def _union(intervals: list[tuple[float, float]]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _executions(kernels: list[_Kernel], dispatches: list[float], steps: list[StepInfo]) -> list[list[_Kernel]]:
    """The kernels of each execution, executions in the order they started, one module each.

    Per module, an execution starts with each run of a kernel that ran exactly once per execution of
    the module's steps (the earliest such kernel): a step is dispatched while the one before may still
    be running, so dispatch times alone can put an execution's last kernels into the next one's.
    A module no step names, or with no such kernel, is split by dispatch instead."""
    by_module: dict[str, list[_Kernel]] = {}
    for k in kernels:
        by_module.setdefault(k.module, []).append(k)
    runs: dict[str, int] = {}
    for step in steps:
        if step.module is not None:
            runs[step.module] = runs.get(step.module, 0) + 1
    groups: list[list[_Kernel]] = []
    for module, ks in by_module.items():
        counts: dict[str, int] = {}
        for k in ks:
            counts[k.name] = counts.get(k.name, 0) + 1
        n = runs.get(module, 0)
        marker = next((k.name for k in ks if counts[k.name] == n), None) if n else None
        if marker is None:
            by_dispatch: dict[int, list[_Kernel]] = {}
            for k in ks:
                by_dispatch.setdefault(bisect.bisect_right(dispatches, k.start) - 1, []).append(k)
            groups.extend(by_dispatch[i] for i in sorted(by_dispatch))
            continue
        mine: list[list[_Kernel]] = []
        for k in ks:
            if not mine or (k.name == marker and any(x.name == marker for x in mine[-1])):
                mine.append([])
            mine[-1].append(k)
        groups.extend(mine)
    groups.sort(key=lambda g: g[0].start)
    return groups


def _until_ready(group: list[_Kernel], dispatches: list[float], execute_s: float | None) -> list[_Kernel]:
    """An execution's kernels, cut so that none ends after its outputs were ready (its dispatch plus torch_xla's
    ExecuteTime, which starts with the dispatch event and ends when the runtime says the outputs are
    ready). A parallel kernel's ``end:`` event is recorded when its last piece's scope closes, which
    can be after the completion it signalled (seen: 0.2 ms on torch_xla 2.9's CPU client, up to 5 ms
    on 2.8's, where the execution's next one had already started)."""
    i = bisect.bisect_right(dispatches, group[0].start) - 1
    if execute_s is None or i < 0:
        return group
    ready = dispatches[i] + execute_s * 1e9
    for k in group:
        k.end = min(k.end, ready)
        k.start = min(k.start, k.end)
    return group


def _attributed(group: list[_Kernel]) -> dict[int, float]:
    """Each kernel run's compute time in one execution: its interval, each instant shared evenly by the
    execution's runs going on then (XLA's CPU client runs a graph's independent kernels side by side).
    The execution's runs then add up to the union of their intervals, which lies within its
    dispatch-to-ready time, however many ran at once. (Another execution's kernels running at the same
    time are its own: each step's time is its own.)"""
    edges = []
    for k in group:
        if k.end > k.start:
            edges.append((k.start, 1, id(k)))
            edges.append((k.end, -1, id(k)))
    edges.sort(key=lambda e: (e[0], e[1]))
    share: dict[int, float] = {}
    running: set[int] = set()
    last = None
    for t, kind, key in edges:
        if running and last is not None and t > last:
            part = (t - last) / len(running)
            for r in running:
                share[r] = share.get(r, 0.0) + part
        last = t
        if kind > 0:
            running.add(key)
        else:
            running.discard(key)
    return share


def _left_out(matched: list[tuple[StepInfo, list[_Kernel]]], compiles: list[tuple[float, float]]) -> dict[int, str]:
    """Kernel runs whose time is not the kernel's (``LEFT_OUT``): a first run far slower than the kernel's
    other runs (a one-time warm-up inside XLA's runtime), and runs that overlapped a compile (which
    takes the same cores)."""
    why: dict[int, str] = {}
    runs: dict[tuple[str, str], list[_Kernel]] = {}
    for step, group in matched:
        for k in group:
            runs.setdefault((step.graph_hash, k.name), []).append(k)
            if any(start < k.end and k.start < end for start, end in compiles):
                why[id(k)] = "beside a compile"
    for ks in runs.values():
        others = sorted(k.end - k.start for k in ks[1:] if id(k) not in why)
        if not others or id(ks[0]) in why:
            continue
        median = others[len(others) // 2]
        first = ks[0].end - ks[0].start
        if not (first > WARM_UP_RATIO * median and first - median > WARM_UP_MIN_NS):
            continue
        why[id(ks[0])] = "warm-up"
        # its tail: the runs after it stay slower for a while (seen: a tiny matmul's next 7 runs took
        # 12-42 µs, then 6-7 µs from the 9th on): in the first half of the cell's runs, a run taking over
        # twice what the later half's runs take is still the warm-up
        later = sorted(k.end - k.start for k in ks[len(ks) // 2:] if id(k) not in why)
        steady = later[len(later) // 2] if later else median
        for k in ks[1:len(ks) // 2]:
            if id(k) not in why and k.end - k.start > WARM_UP_TAIL * steady:
                why[id(k)] = "warm-up"
    return why


def join_profile(planes: list[Plane], steps: list[StepInfo]) -> dict:
    """The profile record of a cell: per step (device span, busy time, kernel time, compute time,
    dispatch-to-ready wall time, idle time before it, host activity), per graph (each kernel's count,
    total and longest time as recorded, and its compute time with the runs left out of it), and a
    bounded timeline. Times are nanoseconds from the first event of the session."""
    kernels = kernel_events(planes)
    dispatches = sorted(ev.start_ns for _, events in _lanes(planes) for ev in events if ev.name in DISPATCH)
    host_events = sorted(((ev.start_ns, ev.end_ns, HOST[ev.name]) for _, events in _lanes(planes)
                          for ev in events if ev.name in HOST), key=lambda t: t[0])
    everything = [ev.start_ns for _, events in _lanes(planes) for ev in events]
    t0 = min(everything) if everything else 0.0

    groups = _executions(kernels, dispatches, steps)

    # groups -> steps, in order, by module name (a group of another module is work not of this cell)
    matched: list[tuple[StepInfo, list[_Kernel]]] = []
    unmatched_ns, unmatched = 0.0, 0
    g = 0
    for step in steps:
        # the next execution of this step's module; a step with none left ran no kernel (a graph
        # that only passes data through): it gets no device time, and takes nothing from later steps
        j = g if step.module is None else next(
            (i for i in range(g, len(groups)) if groups[i][0].module == step.module), None)
        if j is None or j >= len(groups):
            continue
        for skipped in groups[g:j]:
            unmatched += 1
            unmatched_ns += sum(k.end - k.start for k in skipped)
        matched.append((step, _until_ready(groups[j], dispatches, step.execute_s)))
        g = j + 1
    for rest in groups[g:]:
        unmatched += 1
        unmatched_ns += sum(k.end - k.start for k in rest)

    compiles = [(start, end) for start, end, key in host_events if key == "compile_ns"]
    share = {key: ns for _, group in matched for key, ns in _attributed(group).items()}
    left_out = _left_out(matched, compiles)
    graphs: dict[str, dict] = {}
    step_rows = []
    previous_end = t0
    durations: dict[tuple[str, str], list[float]] = {}  # (graph, kernel) -> its counted runs' durations
    for step, group in matched:
        graph = graphs.setdefault(step.graph_hash, {"module": group[0].module, "executions": 0, "kernels": {},
                                                    "other": {}, "compute": {}})
        graph["executions"] += 1
        kernel_ns = compute_ns = left_out_ns = 0.0
        intervals = []
        for k in group:
            duration = k.end - k.start
            table = graph["kernels"] if (not step.kernels or k.name in step.kernels) else graph["other"]
            row = table.setdefault(k.name, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += duration
            row[2] = max(row[2], duration)
            if table is not graph["kernels"]:
                continue
            kernel_ns += duration
            intervals.append((k.start, k.end))
            mine = share.get(id(k), 0.0)
            c = graph["compute"].setdefault(k.name, {"runs": 0, "compute_ns": 0.0, "shared_ns": 0.0, "left_out": {}})
            reason = left_out.get(id(k))
            if reason is None:
                c["runs"] += 1
                c["compute_ns"] += mine
                c["shared_ns"] += max(0.0, duration - mine)
                compute_ns += mine
                durations.setdefault((step.graph_hash, k.name), []).append(duration)
            else:
                out = c["left_out"].setdefault(reason, [0, 0.0])
                out[0] += 1
                out[1] += duration
                left_out_ns += mine
        first = min(k.start for k in group)
        last = max(k.end for k in group)
        busy = _union(intervals)
        # the runs' shares add up to the union of their intervals; summing thirds and fifths in floats
        # can pass it by its last digit (found: 151412.00000000003 of 151412 ns), taken off here
        left_out_ns = min(left_out_ns, busy)
        compute_ns = min(compute_ns, busy - left_out_ns)
        wall = step.execute_s * 1e9 if step.execute_s is not None else None
        step_rows.append({"step": step.index, "graph_hash": step.graph_hash, "start_ns": first - t0,
                          "span_ns": last - first, "busy_ns": busy, "kernel_ns": kernel_ns,
                          "compute_ns": compute_ns, "left_out_ns": left_out_ns, "wall_ns": wall,
                          "idle_before_ns": max(0.0, first - previous_end), "host": {}})
        previous_end = max(previous_end, last)

    for (graph_hash, name), runs in durations.items():  # a run's typical duration: the mean of a few
        runs.sort()                                       # runs follows one slow run (a cold start)
        middle = len(runs) // 2
        graphs[graph_hash]["compute"][name]["median_ns"] = (runs[middle] if len(runs) % 2
                                                            else (runs[middle - 1] + runs[middle]) / 2)

    # host activity belongs to the step whose device work follows it
    starts = [t0 + row["start_ns"] for row in step_rows]
    for start, end, key in host_events:
        i = min(bisect.bisect_left(starts, start), len(step_rows) - 1) if step_rows else -1
        if i >= 0:
            host = step_rows[i]["host"]
            host[key] = host.get(key, 0.0) + (end - start)

    timeline, dropped = _timeline(planes, kernels, t0, matched)
    return {"steps": step_rows, "graphs": graphs, "unmatched_executions": unmatched,
            "unmatched_ns": unmatched_ns, "timeline": timeline, "timeline_dropped": dropped,
            "span_ns": (max((k.end for k in kernels), default=t0) - t0)}


_HOST_TIMELINE = set(HOST) | set(DISPATCH) | {"StepMarker"}


def _timeline(planes, kernels: list[_Kernel], t0: float, matched) -> tuple[list[list], int]:
    """[lane, name, start_ns, duration_ns, step index or -1]: the cell's kernels and torch_xla's
    main host activities, the first TIMELINE_LIMIT of them in time order."""
    step_of = {id(k): step.index for step, group in matched for k in group}
    rows = [[k.lane, k.name, k.start - t0, k.end - k.start, step_of.get(id(k), -1)] for k in kernels]
    for lane, events in _lanes(planes):
        rows.extend([lane, ev.name, ev.start_ns - t0, ev.duration_ns, -1]
                    for ev in events if ev.name in _HOST_TIMELINE)
    rows.sort(key=lambda r: r[2])
    dropped = max(0, len(rows) - TIMELINE_LIMIT)
    return rows[:TIMELINE_LIMIT], dropped
