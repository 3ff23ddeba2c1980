"""The ranks of a cell's multi-process launches, side by side: one row per rank (device, steps,
compiles, time in its steps, how it ended), then what needs attention first: ranks that ran
different graphs at the same step, ranks that failed, stragglers. Every renderer (text, HTML, rich,
the panel) reads these rows and lines."""

from __future__ import annotations

from dataclasses import dataclass

from xla_lab.capture.ranks import divergences, rank_total_s, stragglers
from xla_lab.capture.records import CellCapture
from xla_lab.capture.source_ref import ref_text


@dataclass
class RankRow:
    launch: int
    rank: int
    device: str
    steps: int
    compiled: int
    compile_s: float
    step_s: float  # time in the rank's steps (its own, without waits for other ranks' syncs)
    mean_step_s: float | None
    status: str  # ok | raised | killed
    line: str  # where its steps synced (the first sync's line)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def rank_rows(c: CellCapture) -> list[RankRow]:
    rows = []
    for r in c.ranks:
        compiled = [s for s in r.steps if s.cache == "miss"]
        total = rank_total_s(r)
        first = next((ln for ln in r.lines if ln), None)
        rows.append(RankRow(r.launch, r.rank, r.device or "?", len(r.steps), len(compiled),
                            sum(s.timings.get("compile_s") or 0.0 for s in compiled), total,
                            total / len(r.steps) if r.steps else None, r.status,
                            ref_text(first) if first else ""))
    return rows


def failures(c: CellCapture) -> list[str]:
    out = []
    for r in c.ranks:
        if r.status != "ok":
            what = "raised" if r.status == "raised" else "did not end"
            out.append(f"rank {r.rank} (process {r.process}) {what}: {r.error or '?'}; "
                       f"{len(r.steps)} step{'s' if len(r.steps) != 1 else ''} of it were recorded")
    return out


def attention(c: CellCapture) -> list[str]:
    """Different graphs at the same step, failed ranks, stragglers: in that order."""
    if not c.ranks:
        return []
    return divergences(c.ranks) + failures(c) + stragglers(c.ranks)


def headline_part(c: CellCapture) -> str | None:
    if not c.ranks:
        return None
    launches = len(c.launches) or 1
    processes = sum(l.get("processes", 0) for l in c.launches)
    steps = sum(len(r.steps) for r in c.ranks)
    return (f"{len(c.ranks)} rank{'s' if len(c.ranks) != 1 else ''} in {processes} worker "
            f"process{'es' if processes != 1 else ''} ({launches} launch{'es' if launches != 1 else ''}): "
            f"{steps} rank steps")


def rank_lines(c: CellCapture) -> list[str]:
    """The ranks as text lines (the terminal summary, the HTML report), without what needs attention
    (``attention``: the report's warnings list it)."""
    if not c.ranks:
        return []
    out = []
    for launch in c.launches:
        out.append(f"launch {launch['launch']}: {launch['function']} ({launch['start_method']}), "
                   f"{launch['processes']} worker process{'es' if launch['processes'] != 1 else ''}"
                   + (f", raised {launch['error']}" if launch.get("error") else ""))
    out.append(f"  {'rank':<6}{'device':<8}{'steps':>6}{'compiled':>9}{'compile':>10}{'in steps':>10}"
               f"{'mean':>10}  {'status':<8}line")
    for row in rank_rows(c):
        mean = "-" if row.mean_step_s is None else f"{row.mean_step_s:.3f} s"
        out.append(f"  {row.rank:<6}{row.device:<8}{row.steps:>6}{row.compiled:>9}{row.compile_s:>8.3f} s"
                   f"{row.step_s:>8.3f} s{mean:>10}  {row.status:<8}{row.line}")
    return out  # (what needs attention is in the report's warnings: ``attention``)

