"""The ranks of a multi-process launch, from what its workers wrote (``capture/worker.py``): each
rank's explicit syncs become steps like a single-device cell's (cause and line, compile or cache hit,
the graph's HLO, fusion map and memory), and the ranks are compared: which rank was slow, and which
ranks ran different graphs at the same step (with collectives, that is the job that hangs).

A compiled step's graph is named by torch_xla's graph hash from the worker's sync log (a process with
local rank 0 writes one; each compile block names its rank), and its HLO is the dump's module of that
compile (each op's recorded Python stack in the binary dump passes through a function named after
its rank). Without the log (the other
processes of a multi-process host), a compiled graph is named by a hash of its HLO before
optimization (``hlo-...``). torch_xla logs no cached execution at the level workers run (it would
cost more than a short step), so a cache hit is taken to run the graph some rank compiled at the same
line and step, else the graph compiled last at that line (a loop's steady state); where ranks compiled
different graphs at that step, a hit's graph is left unknown.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from pathlib import Path

from xla_lab.hlo.proto_frames import ProtoError, instruction_stacks

from .analysis import CellFiles, analyze
from .dumps import CompiledModule, DumpDirectory
from .source_ref import ref_text
from .records import TIMING_KEYS, RankRecord, StepRecord
from .recompile import explain
from .steps import ExplicitSync, Paired, steps_of
from .store import ArtifactStore
from .worker import RANK_CALL, rank_of_block
from .xla_logs import Frame, SyncEvent, parse_debug_log

KILLED = ("the worker process ended before this rank did, without a word from it (killed: SIGKILL, "
          "the out-of-memory killer, or a crash in XLA)")
STRAGGLER_RATIO = 1.5  # a rank whose cached steps are this much slower than the median rank's is named
STRAGGLER_MIN_S = 0.005
STRAGGLER_MIN_STEPS = 3


def read_launch(directory: Path, launch: int, *, store: ArtifactStore, cells: CellFiles, cell_file: str | None,
                source_lines: list[str], execution_count: int | None) -> tuple[list[RankRecord], int, list[str]]:
    """(ranks, worker processes, notes) of one launch's directory."""
    ranks: list[RankRecord] = []
    notes: list[str] = []
    processes = sorted(directory.glob("p*.jsonl"), key=lambda p: p.name)
    for path in processes:
        records = _read_lines(path)
        pid = int(path.stem[1:])
        modules = DumpDirectory(directory / path.stem / "dump").collect()
        try:
            log = (directory / path.stem / "sync.log").read_bytes()
        except OSError:
            log = b""
        got, more = _process_ranks(records, pid, launch, modules, log, store=store, cells=cells, cell_file=cell_file,
                                   source_lines=source_lines, execution_count=execution_count)
        ranks += got
        notes += more
    ranks.sort(key=lambda r: (r.launch, r.rank))
    return ranks, len(processes), notes


def _read_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # the last line of a killed worker may be cut
            continue
    return out


def graph_id(module: CompiledModule) -> str:
    """A name for a worker's graph: the hash of its HLO before optimization, without the module's
    name (which carries the rank) and instruction ids."""
    text = module.hlo_before or ""
    body = text.split("\n", 1)[1] if text.startswith("HloModule") else text
    return "hlo-" + hashlib.sha1(re.sub(r"\.\d+\b", "", body).encode()).hexdigest()[:24]


def logged_compiles(log: bytes) -> list[tuple[int | None, str]]:
    """(rank, graph hash) of each compile in the worker's sync log, in order; the rank is read from
    the block's one frame (the rank's trampoline, worker.py), None for a compile outside an explicit
    sync (a value read)."""
    return [(rank_of_block(e), e.graph_hash) for e in parse_debug_log(log.decode("utf-8", "replace"))
            if e.kind == "compile"]


def module_rank(module: CompiledModule) -> int | None:
    """The rank whose ops are in the module: their recorded stacks pass through its rank call."""
    if not module.proto_before:
        return None
    try:
        stacks = instruction_stacks(module.proto_before)
    except ProtoError:
        return None
    for stack in stacks.values():
        for frame in stack:
            if frame.function.startswith(RANK_CALL):
                tail = frame.function[len(RANK_CALL):]
                return int(tail) if tail.isdigit() else None
    return None


def modules_of_compiles(compiles: list[tuple[int | None, str]], modules: list[CompiledModule]) -> dict[int, CompiledModule]:
    """Each logged compile's module: the next module of its rank, by the ops' stacks; the rest
    (graphs traced without stacks, compiles outside explicit syncs) in the order XLA numbered them."""
    by_rank: dict[int, list[int]] = {}
    unknown: list[int] = []
    for j, module in enumerate(modules):
        rank = module_rank(module)
        (by_rank.setdefault(rank, []) if rank is not None else unknown).append(j)
    out: dict[int, CompiledModule] = {}
    for i, (rank, _) in enumerate(compiles):
        if rank is not None and by_rank.get(rank):
            out[i] = modules[by_rank[rank].pop(0)]
    rest = [i for i in range(len(compiles)) if i not in out]
    left = sorted(unknown + [j for js in by_rank.values() for j in js])
    for i, j in zip(rest, left):
        out[i] = modules[j]
    return out


def _process_ranks(records: list[dict], pid: int, launch: int, modules: list[CompiledModule], log: bytes, *,
                   store: ArtifactStore, cells: CellFiles, cell_file: str | None, source_lines: list[str],
                   execution_count: int | None) -> tuple[list[RankRecord], list[str]]:
    notes: list[str] = []
    process = next((r for r in records if r.get("kind") == "process"), {})
    base = process.get("graph_name") or ""
    done = next((r for r in records if r.get("kind") == "done"), None)
    stacks = {r["id"]: [Frame(f[0], f[1], int(f[2])) for f in r["frames"]] for r in records if r.get("kind") == "stack"}
    syncs = sorted((r for r in records if r.get("kind") == "sync"), key=lambda r: r["enter"])
    compiles = logged_compiles(log)
    module_of = modules_of_compiles(compiles, modules)
    by_rank: dict[int, list[int]] = {}
    outside = 0
    for i, (rank, _) in enumerate(compiles):
        if rank is None:
            outside += 1
        else:
            by_rank.setdefault(rank, []).append(i)
    if outside:
        notes.append(f"worker {pid} compiled {outside} graph{'s' if outside != 1 else ''} outside explicit syncs "
                     "(a value read such as .item() or print): they are not among the ranks' steps")
    if not compiles and modules:  # no sync log in this process (not local rank 0): the compiles in order
        compiles = [(s["rank"], "") for s in syncs if s["compiled"]][:len(modules)]
        by_rank = {}
        for i, (rank, _) in enumerate(compiles):
            by_rank.setdefault(rank, []).append(i)
        module_of = dict(enumerate(modules[:len(compiles)]))
    graph_of_sync: dict[int, str] = {}
    compiled_syncs: set[int] = set()
    compiled_at: dict[tuple[int, int], list[tuple[float, str]]] = {}  # (stack, ordinal) -> compiles
    latest_at: dict[int, list[tuple[float, str]]] = {}  # stack -> compiles
    ordinal_of: dict[int, tuple[int, int]] = {}
    for rank in {s["rank"] for s in syncs}:
        mine = [i for i, s in enumerate(syncs) if s["rank"] == rank]
        blocks = iter(by_rank.get(rank, []))  # the rank's compiles in the log, in order
        seen_at: dict[int, int] = {}  # stack -> the rank's syncs there so far
        for i in mine:
            s = syncs[i]
            key = (s["stack"], seen_at.get(s["stack"], 0))
            seen_at[s["stack"]] = key[1] + 1
            ordinal_of[i] = key
            if not s["compiled"]:
                continue
            module = None
            for _ in range(s["compiled"]):  # (the sync's last compile is the graph it ran)
                block = next(blocks, None)
                module = module_of.get(block) if block is not None else None
            logged = s.get("hashes") or []
            gid = (logged[-1] if logged else "") or (graph_id(module) if module is not None else "")
            if not gid:
                continue
            if module is not None:
                art = store.get_or_create(gid, module.graph_name)
                if art.hlo_before is None:
                    store.attach_module(art, module, execution_count)
                    notes.extend(analyze(art, module.proto_before, cells))
            graph_of_sync[i] = gid
            compiled_syncs.add(i)
            compiled_at.setdefault(key, []).append((s["exit"], gid))
            latest_at.setdefault(s["stack"], []).append((s["exit"], gid))
    last_of_rank: dict[tuple[int, int], str] = {}  # (rank, stack) -> the graph its last sync there ran
    for i, s in enumerate(syncs):  # (in the order they started)
        if i not in graph_of_sync:
            # (no time order here: a hit can return before the sync of the rank that compiled it)
            same_step = {g for _, g in compiled_at.get(ordinal_of[i], [])}
            if len(same_step) == 1:  # the graph some rank compiled at this step
                graph_of_sync[i] = same_step.pop()
            elif not same_step:  # a loop's later step: the graph the rank ran there last, else compiled last
                mine = last_of_rank.get((s["rank"], s["stack"]))
                earlier = [g for t, g in latest_at.get(s["stack"], []) if t <= s["enter"]]
                if mine or earlier:
                    graph_of_sync[i] = mine or earlier[-1]
            # (several graphs compiled at this step by different ranks: which one this rank ran is not known)
        if graph_of_sync.get(i):
            last_of_rank[(s["rank"], s["stack"])] = graph_of_sync[i]
    out = []
    for start in (r for r in records if r.get("kind") == "rank"):
        rank = start["rank"]
        end = next((r for r in records if r.get("kind") == "end" and r["rank"] == rank), None)
        mine = [(i, s) for i, s in enumerate(syncs) if s["rank"] == rank]
        record = RankRecord(rank=rank, launch=launch, process=pid, device=start.get("device"),
                            started_at=start.get("started"), status="ok")
        if end is not None:
            record.ended_at = end["ended"]
            record.status = end["status"]
            record.error = end.get("error")
        else:
            record.status = "killed"
            record.error = KILLED if done is None else "the rank never ended"
            returned = {s["enter"] for _, s in mine}
            hung = [e for e in records if e.get("kind") == "enter" and e["rank"] == rank and e["enter"] not in returned]
            if hung:
                where = cells.model_line(stacks.get(hung[-1]["stack"], []))
                record.error += (f"; it was in a sync{' at ' + ref_text(where) if where else ''} that never returned "
                                 "(in a collective, waiting for the other ranks?)")
        paired = []
        frames_of: dict[int, list[Frame]] = {}
        for i, s in mine:
            frames = frames_of.setdefault(s["stack"], stacks.get(s["stack"], []))
            gid = graph_of_sync.get(i, "")
            event = SyncEvent(kind="execute", graph_name=f"{base}_r{rank}", graph_hash=gid, frames=frames)
            explicit = ExplicitSync(enter=s["enter"], exit=s["exit"], executed=bool(s.get("ok")))
            paired.append(Paired(event, i in compiled_syncs, None, explicit))
        record.steps = steps_of(paired, cell_file, source_lines, cells.files)
        previous = record.started_at or (mine[0][1]["enter"] if mine else 0.0)
        for step, (i, s) in zip(record.steps, mine):
            step.artifacts = store.get(step.graph_hash) if step.graph_hash else None
            wall = max(0.0, s["exit"] - previous)
            previous = s["exit"]
            compile_s = s["compile_s"] if i in compiled_syncs else 0.0
            step.timings = {**dict.fromkeys(TIMING_KEYS), "trace_s": max(0.0, wall - compile_s), "compile_s": compile_s}
            record.step_s.append(wall)
            record.lines.append(cells.model_line(stacks.get(s["stack"], [])))
        out.append(record)
    if done is not None and done.get("note"):
        notes.append(f"worker {pid}: {done['note']}")
    if done is not None:
        metrics = done.get("metrics") or {}
        execute = metrics.get("execute", [0, 0.0])
        notes.append(f"worker {pid} ran {execute[0]} graph executions ({execute[1]:.3f} s of device time, all its "
                     "ranks together: XLA's execution times are not kept per rank)")
    return out, notes


# --- comparing the ranks -----------------------------------------------------------------------------
def rank_total_s(rank: RankRecord) -> float:
    return sum(rank.step_s)


def steady_step_s(rank: RankRecord) -> float | None:
    """The median of the rank's cache-hit steps (a compile, or waiting out another rank's at the start,
    says nothing about the rank's own speed), None with fewer than STRAGGLER_MIN_STEPS."""
    hits = [t for t, s in zip(rank.step_s, rank.steps) if s.cache != "miss"]
    return statistics.median(hits) if len(hits) >= STRAGGLER_MIN_STEPS else None


def stragglers(ranks: list[RankRecord]) -> list[str]:
    """Ranks whose cached steps are much slower than the median rank's of their launch."""
    out = []
    for launch in sorted({r.launch for r in ranks}):
        steady = {r.rank: steady_step_s(r) for r in ranks if r.launch == launch}
        known = [t for t in steady.values() if t is not None]
        if len(known) < 2:
            continue
        median = statistics.median(known)
        for rank, t in steady.items():
            if t is not None and t > median * STRAGGLER_RATIO and t - median > STRAGGLER_MIN_S:
                out.append(f"rank {rank} is a straggler: its cached steps take {t * 1e3:.1f} ms (median), "
                           f"{t / median:.2f}x the median rank's {median * 1e3:.1f} ms")
    return out


def divergences(ranks: list[RankRecord], limit: int = 3) -> list[str]:
    """Steps at which ranks of one launch ran different graphs (or a different number of steps),
    with the first difference between the graphs. In a job with collectives this is what hangs: the
    ranks wait for each other in collectives that do not match."""
    out = []
    for launch in sorted({r.launch for r in ranks}):
        group = sorted((r for r in ranks if r.launch == launch), key=lambda r: r.rank)
        if len(group) < 2:
            continue
        counts = {len(r.steps) for r in group if r.status == "ok"}
        if len(counts) > 1:
            listed = ", ".join(f"rank {r.rank}: {len(r.steps)}" for r in group)
            out.append(f"the ranks synced a different number of times ({listed})")
        longest = max(len(r.steps) for r in group)
        for k in range(longest):
            present = [(r, r.steps[k]) for r in group if k < len(r.steps) and r.steps[k].graph_hash]
            graphs: dict[str, list] = {}
            for r, step in present:
                graphs.setdefault(step.graph_hash, []).append((r, step))
            if len(graphs) < 2:
                continue
            # the graph most ranks ran is the reference (a tie: the one of the lowest rank)
            ordered = sorted(graphs.values(), key=lambda g: (-len(g), g[0][0].rank))
            ref_rank, ref_step = ordered[0][0]
            unknown = [r.rank for r in group if k < len(r.steps) and not r.steps[k].graph_hash]
            for other in ordered[1:]:
                ranks_ = [r.rank for r, _ in other]
                first, step = other[0]
                why = _difference(step, ref_step, ref_rank.rank)
                where = f" at {ref_text(first.lines[k])}" if k < len(first.lines) and first.lines[k] else ""
                refs = [r.rank for r, _ in ordered[0]]
                out.append(f"step {k}{where}: rank{'s' if len(ranks_) > 1 else ''} {', '.join(map(str, ranks_))} "
                           f"ran a different graph from rank{'s' if len(refs) > 1 else ''} "
                           f"{', '.join(map(str, refs))}'s" + (f": {why}" if why else "")
                           + (f" (rank{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} hit the cache "
                              "there: which of these graphs it ran is not known)" if unknown else ""))
                if len(out) >= limit:
                    return out
    return out


def _difference(step: StepRecord, ref: StepRecord, ref_rank: int) -> str | None:
    new = step.artifacts.signature if step.artifacts else None
    old = ref.artifacts.signature if ref.artifacts else None
    if not new or not old:
        return None
    return explain(new, old, compared_with=f"rank {ref_rank}'s graph")
