"""The ranks of a multi-process launch, from what its workers wrote (``capture/worker.py``): each
rank's explicit syncs become steps like a single-device cell's (cause and line, compile or cache hit,
the graph's HLO, fusion map and memory), and the ranks are compared: which rank was slow, and which
ranks ran different graphs at the same step (with collectives, that is the job that hangs).

A step's graph is named by torch_xla's graph hash where the worker's sync log has it (a process with
local rank 0 writes one); its HLO is the module its rank's sync left in the worker's dump. Without
the log (the other processes of a multi-process host), a compiled graph is named by a hash of its
HLO before optimization (``hlo-...``), and a cache hit is taken to run the graph compiled last,
before it, at the same Python stack in its process (the ranks of a process share one cache).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from pathlib import Path

from .analysis import CellFiles, analyze
from .dumps import CompiledModule, DumpDirectory
from .frames import fmt_line
from .records import RankRecord, StepRecord
from .recompile import explain
from .steps import ExplicitSync, Paired, steps_of
from .store import ArtifactStore
from .xla_logs import Frame, SyncEvent, parse_debug_log

KILLED = ("the worker process ended before this rank did, without a word from it (killed: SIGKILL, "
          "the out-of-memory killer, or a crash in XLA)")
STRAGGLER_RATIO = 1.25  # a rank this much slower than the median rank is named
STRAGGLER_MIN_S = 0.05


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


def logged_hashes(log: bytes, start: int, end: int) -> tuple[str | None, list[str]]:
    """(the hash of the graph the sync executed, the hashes it compiled) from its part of the log."""
    events = parse_debug_log(log[start:end].decode("utf-8", "replace"))
    executed = [e.graph_hash for e in events if e.kind == "execute" and e.graph_hash]
    return (executed[-1] if executed else None), [e.graph_hash for e in events if e.kind == "compile"]


def _process_ranks(records: list[dict], pid: int, launch: int, modules: list[CompiledModule], log: bytes, *,
                   store: ArtifactStore, cells: CellFiles, cell_file: str | None, source_lines: list[str],
                   execution_count: int | None) -> tuple[list[RankRecord], list[str]]:
    notes: list[str] = []
    process = next((r for r in records if r.get("kind") == "process"), {})
    base = process.get("graph_name") or ""
    done = next((r for r in records if r.get("kind") == "done"), None)
    stacks = {r["id"]: [Frame(f[0], f[1], int(f[2])) for f in r["frames"]] for r in records if r.get("kind") == "stack"}
    by_rank_modules: dict[int, list[CompiledModule]] = {}
    outside = 0
    for m in modules:
        tag = m.graph_name[len(base) + 2:] if m.graph_name.startswith(base + "_r") else ""
        if tag.isdigit():
            by_rank_modules.setdefault(int(tag), []).append(m)
        else:
            outside += 1
    if outside:
        notes.append(f"worker {pid} compiled {outside} graph{'s' if outside != 1 else ''} outside explicit syncs "
                     "(a value read such as .item() or print): the rank that did is not known, so they are not "
                     "among the ranks' steps")
    syncs = sorted((r for r in records if r.get("kind") == "sync"), key=lambda r: r["enter"])
    # a hit runs the graph compiled last, before it ran, at the same stack (one cache per process)
    compiled_at: dict[int, list[tuple[float, str]]] = {}
    graph_of_sync: dict[int, str] = {}
    for i, s in enumerate(syncs):
        logged = logged_hashes(log, *s["log"])[0] if log and s.get("log") else None
        if logged:
            graph_of_sync[i] = logged
        if s["compiled"]:
            queue = by_rank_modules.get(s["rank"], [])
            taken = [queue.pop(0) for _ in range(min(s["compiled"], len(queue)))]
            if taken:
                module = taken[-1]
                gid = logged or graph_id(module)
                art = store.get_or_create(gid, module.graph_name)
                if art.hlo_before is None:
                    store.attach_module(art, module, execution_count)
                    notes.extend(analyze(art, module.proto_before, cells))
                graph_of_sync[i] = gid
                compiled_at.setdefault(s["stack"], []).append((s["exit"], gid))
    for i, s in enumerate(syncs):
        if i not in graph_of_sync and not s["compiled"]:
            got_lock = s["enter"] + s["waited"]  # a process's syncs run one at a time
            earlier = [g for t, g in compiled_at.get(s["stack"], []) if t <= got_lock]
            if earlier:
                graph_of_sync[i] = earlier[-1]
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
        paired = []
        frames_of: dict[int, list[Frame]] = {}
        for i, s in mine:
            frames = frames_of.setdefault(s["stack"], stacks.get(s["stack"], []))
            gid = graph_of_sync.get(i, "")
            event = SyncEvent(kind="execute", graph_name=f"{base}_r{rank}", graph_hash=gid, frames=frames)
            explicit = ExplicitSync(enter=s["enter"], exit=s["exit"], executed=bool(s.get("ok")))
            paired.append(Paired(event, bool(s["compiled"]), None, explicit))
        record.steps = steps_of(paired, cell_file, source_lines, cells.files)
        previous = record.started_at or (mine[0][1]["enter"] if mine else 0.0)
        for step, (i, s) in zip(record.steps, mine):
            step.artifacts = store.get(step.graph_hash) if step.graph_hash else None
            wall = max(0.0, s["exit"] - previous - s["waited"])
            previous = s["exit"]
            compile_s = s["compile_s"] if s["compiled"] else 0.0
            step.timings = {"trace_s": max(0.0, wall - compile_s), "compile_s": compile_s, "execute_s": None,
                            "to_device_s": None, "from_device_s": None}
            record.step_s.append(wall)
            record.waited_s += s["waited"]
            record.lines.append(cells.model_line(stacks.get(s["stack"], [])))
        out.append(record)
    if done is not None and done.get("note"):
        notes.append(f"worker {pid}: {done['note']}")
    if done is not None:
        metrics = done.get("metrics") or {}
        execute = metrics.get("ExecuteTime", [0, 0.0])
        notes.append(f"worker {pid} ran {execute[0]} graph executions ({execute[1]:.3f} s of device time, all its "
                     "ranks together: XLA's execution times are not kept per rank)")
    return out, notes


# --- comparing the ranks -----------------------------------------------------------------------------
def rank_total_s(rank: RankRecord) -> float:
    return sum(rank.step_s)


def stragglers(ranks: list[RankRecord]) -> list[str]:
    """Ranks much slower than the median rank of their launch (time in their steps)."""
    out = []
    for launch in sorted({r.launch for r in ranks}):
        group = [r for r in ranks if r.launch == launch and r.steps]
        if len(group) < 2:
            continue
        median = statistics.median(rank_total_s(r) for r in group)
        for r in group:
            total = rank_total_s(r)
            if total > median * STRAGGLER_RATIO and total - median > STRAGGLER_MIN_S:
                out.append(f"rank {r.rank} is a straggler: {total:.3f} s in its {len(r.steps)} steps, "
                           f"{total / median:.2f}x the median rank's {median:.3f} s")
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
            if len({s.graph_hash for _, s in present}) < 2:
                continue
            (ref, ref_step), (other, step) = present[0], next(p for p in present if p[1].graph_hash != present[0][1].graph_hash)
            differing = sorted({r.rank for r, s in present if s.graph_hash != ref_step.graph_hash})
            why = _difference(step, ref_step, ref.rank)
            where = f" at {fmt_line(other.lines[k])}" if k < len(other.lines) and other.lines[k] else ""
            out.append(f"step {k}{where}: rank{'s' if len(differing) > 1 else ''} "
                       f"{', '.join(map(str, differing))} ran a different graph from rank {ref.rank}'s"
                       + (f": {why}" if why else ""))
            if len(out) >= limit:
                return out
    return out


def _difference(step: StepRecord, ref: StepRecord, ref_rank: int) -> str | None:
    new = step.artifacts.signature if step.artifacts else None
    old = ref.artifacts.signature if ref.artifacts else None
    if not new or not old:
        return None
    return explain(new, old, compared_with=f"rank {ref_rank}'s graph")
