"""Joining what was recorded during a cell into its steps: pure functions of torch_xla's parsed sync
log, its metric samples and the sync hook's records (``instrument.py``), so they are tested on
recorded fixtures (``tests/fixtures/cells``) as well as live.

* ``pair_executions``: each execution of the sync log, with whether it compiled (a miss), which of
  the compile's dumps is its HLO, and the explicit sync (if any) that ran it;
* ``sync_cause``: why the step synced (``torch_xla.sync()``, a value read, the end of the cell) and
  the cell line that did it;
* ``explain_recompiles``: what each miss is compared with, and the reason in words;
* ``assign_timings`` / ``assign_fallbacks``: each step's share of the cell's metric samples and
  CPU fallbacks. A step's host-side window runs from the end of the previous step to the end of its
  own sync (the hook's return for explicit syncs; the end of the value's transfer for implicit ones).
  ``trace_s`` is the host time of that window not spent compiling, transferring or (for implicit
  syncs) waiting for the execution, which the transfer waited for too (counted once);
  ``count_execution_wait`` takes out what an explicit sync then waited for its own execution, once a
  profiler session has measured it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .frames import frame_code, model_frame
from .metrics import Sample
from .recompile import explain, op_counts, op_similarity
from .records import TIMING_KEYS, CellCapture, StepRecord
from .source_ref import cell_ref, ref_text
from .xla_logs import Frame, SyncEvent

HOOK_FUNCTION = "_xla_lab_step_marker"  # the sync hook's name, as it shows in the sync log's frames
# Metric samples and the hook's records read the same clock (ns); this only absorbs float rounding
CLOCK_SLACK_S = 1e-6


@dataclass
class ExplicitSync:
    """One call of ``torch_xla.sync()`` / ``xm.mark_step()`` seen by the sync hook."""

    enter: float
    exit: float = 0.0
    executed: bool = False  # the sync ran a graph (it wrote to the sync log)
    final: bool = False  # xla_lab's own end-of-cell sync
    held_s: float = 0.0  # time xla_lab's listeners took inside the hook after the sync (not the user's)
    fallbacks: dict[str, int] | None = None  # cumulative CPU-fallback counts when it was called
    frames: list[Frame] | None = None  # lean capture: the caller's frames up to the cell (the hook walks them)
    # lean capture: not a sync but torch.compile's openxla backend running a graph it traced
    # (``_run_cached_graph``), whose hash it passes
    graph_hash: str | None = None
    # lean capture: not a sync of all pending work but ``_xla_sync_multi`` (some tensors' graph)
    tensors: bool = False


@dataclass
class Paired:
    """One execution of the sync log and what else is known about it."""

    event: SyncEvent
    miss: bool  # it compiled its graph first
    module: int | None  # for a miss: index of its compile's dump among the cell's dumps
    explicit: ExplicitSync | None  # the explicit sync that ran it


def pair_executions(events: list[SyncEvent], modules: int, explicit: list[ExplicitSync]) -> list[Paired]:
    """``modules``: how many compiles left a dump, in compile order; ``explicit``: the hook's records."""
    compiles = [e for e in events if e.kind == "compile"]
    # A compile XLA rejected is logged but never executed, and it may have left a dump: if every
    # compile left one, pair them in order, so the next compile does not take the rejected one's.
    by_order = modules == len(compiles) and len(compiles) > sum(
        1 for a, b in zip(events, events[1:]) if a.kind == "compile" and b.kind == "execute"
        and a.graph_hash == b.graph_hash)
    executed = iter([r for r in explicit if r.executed])
    explicit_frames: dict[int, bool] = {}  # id(frames) -> synced by the hook (copies of a block share frames)
    next_module = 0
    pending: SyncEvent | None = None
    compiled_module: int | None = None
    out = []
    for ev in events:
        if ev.kind == "compile":
            pending = ev
            if by_order:
                compiled_module = next_module if next_module < modules else None
                next_module += 1
            continue
        miss = pending is not None and pending.graph_hash == ev.graph_hash
        pending = None
        module = None
        if miss:
            if by_order:
                module = compiled_module
            elif next_module < modules:
                module, next_module = next_module, next_module + 1
        is_explicit = explicit_frames.get(id(ev.frames))
        if is_explicit is None:
            is_explicit = explicit_frames[id(ev.frames)] = any(f.function == HOOK_FUNCTION for f in ev.frames)
        record = next(executed, None) if is_explicit else None
        out.append(Paired(ev, miss, module, record))
    return out


def pair_lean(compiles: list[SyncEvent], explicit: list[ExplicitSync], executions: list[Sample],
              compile_samples: list[Sample], known: dict[tuple, str] | None = None,
              graph_name: str | None = None, programs: list[int | None] | None = None,
              graph_of: dict[int, str] | None = None) -> list[Paired]:
    """Lean capture's executions, without torch_xla's per-execution analysis: one per ExecuteTime
    sample, in time order. An execution that began after a compile ended (CompileTime samples, in
    order) is that compile's miss and takes the next compile block of the sync log (graph hash, name,
    frames). Which record of the sync hook handed each execution over (an explicit sync, a graph
    torch.compile ran, a sync of some tensors) is worked out in order (``_owners``); the others are
    implicit syncs (a value read).

    Which graph a cache hit ran is not logged in lean mode. ``programs`` (the module each execution ran,
    from the profiler session while it was open: ``profile/lean_modules.py``) and ``graph_of`` (module
    -> graph hash, learnt here from the misses too) name it; else it is the graph last run from the
    same place: the sync's line for an explicit sync, the position after the last explicit sync for an
    implicit one (a loop repeats itself), the cell's earlier runs' places in ``known``; else
    ``"unknown"``. An implicit hit has no frames of its own: it takes those of the step that last synced
    at its place."""
    synced = sorted((r for r in explicit if r.executed), key=lambda r: r.enter)
    compiles_left = list(compiles)
    ends = [c.end for c in compile_samples]
    programs = programs if programs is not None else [None] * len(executions)
    graph_of = graph_of if graph_of is not None else {}
    owners = _owners(synced, executions)
    site_graph = dict(known or {})
    site_frames: dict[tuple, list[Frame]] = {}
    interned: dict[tuple, list[Frame]] = {}
    since_explicit = 0
    out = []
    for ex, program, (how, owner) in zip(executions, programs, owners):
        miss = bool(ends) and ends[0] <= ex.start + 1e-3
        if miss:
            ends.pop(0)
        record = owner if how == "sync" else None
        ran = owner if how == "ran" else None  # torch.compile ran a graph it names: not a sync
        frames = (owner.frames or []) if owner is not None else []
        if frames:  # one list per place: the steps of a loop share it, and their cause is worked out once
            frames = interned.setdefault(tuple((f.function, f.file, f.line) for f in frames), frames)
        if record is None:  # (by its place in the loop's iteration: the first one starts with the cell)
            site = ("after", since_explicit)
            since_explicit += 1
        else:
            site = _site(record, frames)
        compiled = miss and bool(compiles_left)
        if compiled:
            event = compiles_left.pop(0)
            if ran is not None:  # (torch.compile traced and compiled it before running it: say what ran it)
                event = SyncEvent("compile", event.xla_cause, event.graph_name, event.graph_hash, frames=frames)
            elif not event.frames:
                event = SyncEvent("compile", event.xla_cause, event.graph_name, event.graph_hash, frames=frames)
            if program is not None:
                graph_of[program] = event.graph_hash
        else:
            if ran is not None:
                graph = ran.graph_hash
            elif program is not None:  # (a module this kernel never paired with a graph: not the place's)
                graph = graph_of.get(program, "unknown")
            else:
                graph = site_graph.get(site, "unknown")
            if owner is None:
                frames = site_frames.get(site, [])
            event = SyncEvent("execute", "", graph_name, graph, frames=frames)
        site_graph[site] = event.graph_hash
        site_frames[site] = event.frames
        if record is not None:
            since_explicit = 0
        out.append(Paired(event, compiled, None, record))
    return out


def _owners(records: list[ExplicitSync], executions: list[Sample]) -> list[tuple[str | None, ExplicitSync | None]]:
    """Whose each execution is. torch_xla runs a device's graphs one at a time, in the order they were
    handed over, and each record here handed over exactly one. A graph handed over before a record was
    entered began before it (an implicit sync reads a value: it waits for its graph); the record's own
    begins after it was entered, maybe long after (execution is asynchronous: a fast loop runs ahead
    of its device, and torch.compile's run returns before its graph starts). So, in order: the next
    record owns the next execution that began after it was entered. Kinds: ``"sync"`` (an explicit
    sync), ``"ran"`` (the graph torch.compile ran through ``_run_cached_graph``, which names it),
    ``"tensors"`` (``_xla_sync_multi``: torch.compile syncing the inputs of the graph it is about to
    run, or code syncing some tensors); ``(None, None)``: an implicit sync's."""
    owners: list[tuple[str | None, ExplicitSync | None]] = [(None, None)] * len(executions)
    k = 0
    for i, ex in enumerate(executions):
        if k < len(records) and ex.start >= records[k].enter - CLOCK_SLACK_S:
            r = records[k]
            owners[i] = ("ran" if r.graph_hash is not None else "tensors" if r.tensors else "sync", r)
            k += 1
    return owners


def _site(record: ExplicitSync, frames: list[Frame]) -> tuple:
    """Where an explicit sync happened, as lean capture tells hits apart: the end-of-cell sync, or the
    innermost frame of the user's code (the sync log's frames start inside xla_lab's hook, the hook's own
    inside torch_xla)."""
    if record.final:
        return ("final",)
    first = model_frame(frames)
    return ("explicit", (first.file, first.line) if first is not None else None)


def lean_sites(steps: list[StepRecord], paired: list[Paired]) -> dict[tuple, str]:
    """Explicit sync place -> graph hash of a run's steps, for the cell's next run (``pair_lean``'s
    ``known``; an implicit sync's place is relative to the run's explicit syncs)."""
    return {_site(p.explicit, p.explicit.frames or []): s.graph_hash for s, p in zip(steps, paired)
            if s.graph_hash != "unknown" and p.explicit is not None}


def steps_of(paired: list[Paired], cell_file: str | None, source_lines: list[str],
             cell_files: dict[str, int | None] | None = None) -> list[StepRecord]:
    """The steps of the paired executions: graph, cache state (a hit may later turn out to be
    ``precompiled``), cause and cell line; no artifacts yet (the recorder attaches the stored ones)."""
    steps = []
    seen: dict[tuple, tuple] = {}  # the steps of a cached loop share their frames (parse_debug_log)
    for p in paired:
        final = p.explicit is not None and p.explicit.final
        key = (id(p.event.frames), p.explicit is not None, final)
        where = seen.get(key)
        if where is None:
            line = cell_line(p.event.frames, cell_file)
            code = source_lines[line - 1].strip() if line is not None and 1 <= line <= len(source_lines) else None
            where = seen[key] = (line, code, sync_cause(p.event, p.explicit, line, code, cell_file, cell_files))
        line, code, cause = where
        steps.append(StepRecord(index=len(steps), graph_name=p.event.graph_name, graph_hash=p.event.graph_hash,
                                cache="miss" if p.miss else "hit", sync_cause=cause,
                                sync_line=None if final else line, sync_code=None if final else code))
    return steps


def cell_line(frames: list[Frame], cell_file: str | None) -> int | None:
    if cell_file is None:
        return None
    return next((f.line for f in frames if f.file == cell_file), None)


def sync_cause(event: SyncEvent, explicit: ExplicitSync | None, line: int | None, code: str | None,
               cell_file: str | None = None, cell_files: dict[str, int | None] | None = None) -> str:
    """Why the step synced: ``line``/``code``: the cell line in its frames, if any (``cell_file``:
    the running cell's file, to tell its frames from those of the model's code it called;
    ``cell_files``: the notebook's cell files and their execution counts, to name other cells)."""
    if explicit is not None and explicit.final:
        return "end of cell"
    functions = [(f.function, os.path.basename(f.file)) for f in event.frames]
    if ("optimized_mod", "dynamo_bridge.py") in functions:
        which = "backward" if ("_backward_impl", "runtime_wrappers.py") in functions else "forward"
        caller = model_frame(event.frames, stop_at=cell_file) if cell_file is not None else None
        called = f", called {_where(caller, cell_files)}" if caller is not None else ""
        return f"torch.compile(backend=\"openxla\") ran its compiled {which} graph{called}"
    if ("_clear_pending_ops_before_compile", "torch_xla.py") in functions:
        return "torch_xla.compile(): work pending before the compiled function, run first"
    if ("sync", "torch_xla.py") in functions and ("_compile", "torch_xla.py") in functions:
        return "torch_xla.compile(): the end of the compiled function"
    if explicit is not None or any(f.function == HOOK_FUNCTION for f in event.frames):
        if ("next", "parallel_loader.py") in functions:
            return "torch_xla.sync() by the device loader (MpDeviceLoader)"
        if ("mark_step", "xla_model.py") in functions:
            return "xm.mark_step()"
        if ("optimizer_step", "xla_model.py") in functions:
            return "xm.optimizer_step(barrier=True)"
        return "torch_xla.sync()"
    return implicit_cause(event.frames, code, cell_file, cell_files)


_VALUE_READS = (
    (".item(", ".item()"),
    (".tolist(", ".tolist()"),
    (".numpy(", ".numpy()"),
    (".cpu(", ".cpu()"),
    ("'cpu'", ".to('cpu')"),
    ('"cpu"', '.to("cpu")'),
)


_BRANCHES = ("if ", "elif ", "while ", "assert ")
# torch_xla calls that sync to coordinate the ranks, not to compute (innermost match wins in order)
_COORDINATION = (
    ("mesh_reduce", "xm.mesh_reduce() gathers a value from every rank and reads it on the host, to coordinate "
                    "the ranks (logging, metrics, early stopping), not to compute"),
    ("rendezvous", "xm.rendezvous() makes the ranks wait for each other; it syncs the pending graph first"),
    ("all_gather", "xm.all_gather() result read on the host, to coordinate the ranks"),
)


def _where(frame: Frame, cell_files: dict[str, int | None] | None) -> str:
    """``at [3]:7`` for a frame in a notebook cell, ``in modeling_bert.py:413`` for a file."""
    if cell_files and frame.file in cell_files:
        return "at " + ref_text({"cell": cell_files[frame.file], "line": frame.line})
    return "in " + ref_text({"cell": None, "file": frame.file, "line": frame.line})


def _short_code(code: str | None, limit: int = 80) -> str | None:
    return code if code is None or len(code) <= limit else code[:limit - 3] + "..."


def implicit_cause(frames: list[Frame], code: str | None, cell_file: str | None = None,
                   cell_files: dict[str, int | None] | None = None) -> str:
    """Name the Python action that made torch_xla run the graph before a sync was asked for. When it
    happened inside the model's code the cell called (a module, a library such as transformers), the
    cause names that line (``frames``: innermost first)."""
    names = [(f.function, os.path.basename(f.file)) for f in frames]
    inner = model_frame(frames, stop_at=cell_file) if cell_file is not None else None
    inner_code = frame_code(inner) if inner is not None else None
    at = f" {_where(inner, cell_files)} ({_short_code(inner_code) or inner.function})" if inner else ""
    for function, label in _COORDINATION:
        if (function, "xla_model.py") in names:
            return f"implicit: {label}{at}"
    if any(file == "_tensor_str.py" or (fn in ("__repr__", "__str__", "__format__") and file == "_tensor.py")
           for fn, file in names):
        return f"implicit: tensor printed (print/repr/format needs its value){at}"
    for text in (inner_code, code):
        for needle, label in _VALUE_READS if text else ():
            if needle in text:
                return f"implicit: {label} reads the value{at}"
    if ("__contains__", "_tensor.py") in names:
        return f"implicit: `in` on a tensor reads its values{at}"
    if any(fn in ("__bool__", "__index__", "__int__", "__float__") for fn, _ in names) or \
            (inner_code or "").startswith(_BRANCHES):
        return f"implicit: tensor used as a Python number/bool{at}"
    return f"implicit: Python read a tensor's value (data-dependent code or a CPU fallback){at}"


# --- recompiles ------------------------------------------------------------------------------------
def previous_runs(capture: CellCapture, earlier: list[CellCapture], named: bool) -> list[CellCapture]:
    """Earlier runs of this cell, newest first (for a cell run for the first time under a name
    another cell used, ``%%xla -n predict`` in two cells, that name's runs: it continues that graph)."""
    runs = [c for c in reversed(earlier) if c.cell_id == capture.cell_id]
    if not runs and named:
        runs = [c for c in reversed(earlier) if c.graph_name == capture.graph_name]
    return runs


def baseline(step: StepRecord, steps: list[StepRecord], runs: list[CellCapture]) -> StepRecord | None:
    """The nearest earlier graph of the cell: an earlier step of this run synced at the same place,
    else the same step of the cell's previous runs; one with as many inputs is preferred (then the
    difference is in what those inputs are)."""
    site = (step.sync_line, step.sync_cause)
    candidates = [other for other in reversed(steps[:step.index]) if (other.sync_line, other.sync_cause) == site]
    for run in runs:
        candidates += [s for s in run.steps if s.index == step.index]
        candidates += [s for s in run.steps if (s.sync_line, s.sync_cause) == site]
    candidates = [c for c in candidates if c.graph_hash != step.graph_hash]
    return next((c for c in candidates if _same_arity(c, step)), candidates[0] if candidates else None)


NEAREST_MIN_SIMILARITY = 0.5  # share of traced ops two graphs must share to be compared
NEAREST_MAX_GRAPHS = 64  # earlier graphs of other cells looked at, newest first


def nearest_elsewhere(step: StepRecord, others: list[CellCapture]) -> tuple[StepRecord, CellCapture] | None:
    """For a miss with no earlier graph of its own cell: the most similar earlier graph in the whole
    kernel (most traced ops in common; the same number of inputs first), e.g. the graph of another
    cell that called the same function with another shape."""
    new = step.artifacts.signature if step.artifacts else None
    if not new:
        return None
    best, best_key, seen = None, (False, 0.0), set()
    counts = op_counts(new)
    for capture in reversed(others):
        for other in capture.steps:
            sig = other.artifacts.signature if other.artifacts else None
            if not sig or other.graph_hash in seen or other.graph_hash == step.graph_hash:
                continue
            seen.add(other.graph_hash)
            score = op_similarity(new, sig, counts, _counts_of(other.graph_hash, sig))
            key = (len(sig["params"]) == len(new["params"]), score)
            if score >= NEAREST_MIN_SIMILARITY and key > best_key:
                best, best_key = (other, capture), key
        if len(seen) >= NEAREST_MAX_GRAPHS:
            break
    return best


_COUNTS: dict[str, object] = {}  # graph hash -> op_counts of its signature (graphs do not change)


def _counts_of(graph_hash: str, signature: dict):
    if graph_hash not in _COUNTS:
        if len(_COUNTS) >= 4 * NEAREST_MAX_GRAPHS:
            _COUNTS.pop(next(iter(_COUNTS)))
        _COUNTS[graph_hash] = op_counts(signature)
    return _COUNTS[graph_hash]


def _label(step: StepRecord, capture: CellCapture) -> str:
    cell = f"cell [{capture.execution_count}]" if capture.execution_count is not None else "an earlier cell"
    named = f" \"{capture.graph_name}\"" if capture.graph_name and not capture.graph_name.startswith("cell_") else ""
    return f"{cell}{named} step {step.index}'s graph"


def explain_recompiles(steps: list[StepRecord], runs: list[CellCapture], others: list[CellCapture] = (),
                       execution_count: int | None = None) -> None:
    """Set ``recompile_reason`` on every miss (``runs``: ``previous_runs``; ``others``: every earlier
    capture of the kernel, searched for the nearest graph when the cell has none of its own;
    ``execution_count``: the prompt of the run the steps belong to, for the lines named)."""
    for step in steps:
        if step.cache != "miss":
            continue
        base = baseline(step, steps, runs)
        compared_with = None
        if base is None and others:
            own = {id(r) for r in runs}  # (by identity: comparing captures by value walks all of them)
            found = nearest_elsewhere(step, [c for c in others if id(c) not in own])
            if found is not None:
                base, compared_with = found[0], _label(*found)
        new = step.artifacts.signature if step.artifacts else None
        old = base.artifacts.signature if base is not None and base.artifacts else None
        split = None
        if step.sync_cause.startswith("implicit"):
            where = f" at {ref_text(cell_ref(execution_count, step.sync_line))}" if step.sync_line else ""
            split = f"the step was cut mid-way{where} ({step.sync_cause.removeprefix('implicit: ')}): " \
                    "the graph ends there and the rest of the step is another graph"
        if new is None:
            step.recompile_reason = split or "no HLO was captured for this compile, so it cannot be compared"
        elif base is not None and old is None:
            evicted = base.artifacts is not None and base.artifacts.evicted
            step.recompile_reason = split or (
                "the earlier graph of this cell was evicted to bound memory (XLA_LAB_MAX_GRAPHS), so it "
                "cannot be compared" if evicted else "the earlier graph of this cell has no captured HLO to compare with")
        else:
            # (the cell compiled other graphs already, e.g. the first half of a step cut by .item())
            first_at = None
            if old is None and any(s.cache == "miss" for s in steps[:step.index]):
                first_at = f"at {ref_text(cell_ref(execution_count, step.sync_line))}" if step.sync_line else (
                    "at the end of the cell" if step.sync_cause == "end of cell" else "here")
            step.recompile_reason = explain(new, old, split_by=split, compared_with=compared_with, first_at=first_at)


def _same_arity(a: StepRecord, b: StepRecord) -> bool:
    sa = a.artifacts.signature if a.artifacts else None
    sb = b.artifacts.signature if b.artifacts else None
    return bool(sa and sb) and len(sa["params"]) == len(sb["params"])


# --- without a sync log ----------------------------------------------------------------------------
def steps_from_metrics(samples: dict[str, list[Sample]], graph_name: str | None) -> list[StepRecord]:
    """Degraded mode (no sync log): one step per execution sample; a compile that ended before an
    execution started is that execution's miss."""
    compiles = list(samples["compile"])
    steps = []
    for sample in samples["execute"]:
        miss = bool(compiles) and compiles[0].end <= sample.start + 1e-3
        if miss:
            compiles.pop(0)
        steps.append(StepRecord(index=len(steps), graph_name=graph_name, graph_hash="unknown",
                                cache="miss" if miss else "hit", sync_cause="unknown (sync log unavailable)"))
    return steps


# --- timings and fallbacks --------------------------------------------------------------------------
def align(samples: list[Sample], n: int) -> list[Sample | None]:
    """The last ``n`` samples line up with the last ``n`` steps (older ones may have been dropped)."""
    samples = samples[-n:] if n else []
    return [None] * (n - len(samples)) + list(samples)


def assign_timings(steps: list[StepRecord], explicit: list[ExplicitSync | None],
                   samples: dict[str, list[Sample]], t0: float) -> dict[str, float]:
    """Set each step's ``timings`` from the cell's samples; returns the transfers that happened after
    the last step (``CellCapture.outside_steps``). ``explicit``: the explicit sync of each step or None;
    ``t0``: when the cell started."""
    executes = align(samples["execute"], len(steps))
    misses = [s for s in steps if s.cache == "miss"]
    compiles = dict(zip(map(id, misses), align(samples["compile"], len(misses))))
    from_device = list(samples["from_device"])
    ends: list[float | None] = []  # end of each step's host-side window
    for record, ex in zip(explicit, executes):
        if record is not None:
            ends.append(record.exit)
        elif ex is not None:
            # the value's transfer waits for the execution: the first transfer still running when the
            # execution began. Its end is when the user's code went on (the execution's own sample, stamped
            # on another thread, often ends a few ms later)
            later = [s.end for s in from_device if s.end >= ex.start]
            ends.append(min(later) if later else ex.end)
        else:
            ends.append(None)
    owned: dict[str, list[list[Sample]]] = {k: [[] for _ in steps] for k in ("to_device", "from_device")}
    outside = {"to_device_s": 0.0, "from_device_s": 0.0}
    # A step's window ends when its sync returned. The next step's first upload can end 20-100 us
    # later, so the only slack allowed is the float rounding of a unix time (about 0.2 us).
    for kind in ("to_device", "from_device"):
        for sample in samples[kind]:
            idx = next((i for i, e in enumerate(ends) if e is not None and sample.end <= e + 1e-6), None)
            if idx is None:
                outside[f"{kind}_s"] += sample.seconds
            else:
                owned[kind][idx].append(sample)
    previous_end = t0
    for i, step in enumerate(steps):
        ex = executes[i]
        comp = compiles.get(id(step))
        t = dict.fromkeys(TIMING_KEYS)
        t["execute_s"] = ex.seconds if ex else None
        t["compile_s"] = (comp.seconds if comp else None) if step.cache == "miss" else 0.0
        t["to_device_s"] = sum(x.seconds for x in owned["to_device"][i])
        t["from_device_s"] = sum(x.seconds for x in owned["from_device"][i])
        if ends[i] is not None:
            window = ends[i] - previous_end - (explicit[i].held_s if explicit[i] is not None else 0.0)
            blocking = (t["compile_s"] or 0.0) + t["to_device_s"] + t["from_device_s"]
            if explicit[i] is None:  # (it waited for the execution too, while its transfer waited for it)
                blocking += _covered_s(([ex] if ex else []) + owned["from_device"][i], ends[i]) - t["from_device_s"]
            t["trace_s"] = max(0.0, window - blocking)
            previous_end = ends[i]
        step.timings = t
    return {k: v for k, v in outside.items() if v}


def _covered_s(samples: list[Sample], until: float) -> float:
    """Seconds up to ``until`` covered by the samples' intervals, overlaps counted once."""
    total, reach = 0.0, float("-inf")
    for x in sorted(samples, key=lambda x: x.start):
        end = min(x.end, until)
        total += max(0.0, end - max(x.start, reach))
        reach = max(reach, end)
    return total


def count_execution_wait(step: StepRecord, seconds: float | None) -> None:
    """An explicit sync that waited for the step's own execution (torch_xla freed the step's donated
    inputs on the syncing thread; measured by a profiler session: the compile profile's
    ``execution_wait_ns`` for a compile, ``profile/attach.count_hit_waits`` for a cache hit): that time
    is its own timing, ``execution_wait_s``, and no longer part of ``trace_s``, whose window (up to the
    sync's return) held it. Never below zero, and only once."""
    if seconds is None or step.timings.get("execution_wait_s") is not None:
        return
    step.timings["execution_wait_s"] = seconds
    trace = step.timings.get("trace_s")
    if trace is not None:
        step.timings["trace_s"] = max(0.0, trace - seconds)


def assign_fallbacks(steps: list[StepRecord], explicit: list[ExplicitSync | None],
                     at_start: dict[str, int], at_end: dict[str, int]) -> None:
    """Fallbacks that ran since the previous explicit sync go to the next explicit step (implicit
    syncs have no hook to count at); what ran after the last one goes to the last step."""
    previous = at_start
    for step, record in zip(steps, explicit):
        if record is not None and record.fallbacks is not None:
            step.fallback_ops = _diff(record.fallbacks, previous)
            previous = record.fallbacks
    rest = _diff(at_end, previous)
    if rest and steps:
        for op, n in rest.items():
            steps[-1].fallback_ops[op] = steps[-1].fallback_ops.get(op, 0) + n


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}

