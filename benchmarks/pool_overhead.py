"""Pool several runs of ``bench_capture_overhead.py --json OUT``: each goal's per-run median (what one run
prints), whether three runs in a row meet every goal, and the median of all rounds of all runs with a 95%
interval (runs resampled, then rounds within each run: a run's own luck, its processes and the machine's
mood that hour, counts as much as its rounds do).

One run's median of a figure moves by 3-5% from run to run on this shared 2-core machine, while lean
capture's real cost is about 1%: pooled rounds say where a figure is, and how sure that is. The chance
that one more run meets each goal, and every goal, is estimated the same way (a run's parts drawn from
these runs, their rounds resampled): how often three runs in a row can be expected. Null runs
(``--null``: plain torch_xla in every place) are pooled apart: their figures are what the noise alone gives
a mode that costs nothing, so their chances are the most any capture can expect here. Runs of the two
layouts (``--layout twin``: plain and the mode side by side, one core each; ``turns``) are pooled apart too:
they measure on one core and on two.

    python benchmarks/pool_overhead.py RUN.json [RUN.json ...] [--bootstrap 4000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Figure:
    label: str
    goal: float | None  # None: printed beside the goals
    ratios: Callable[[dict], list[float] | None]  # per-round ratios of one saved run (None: not measured)
    part: str  # the part of a run that measures it ("steady", "2", "big"): a part's figures share rounds


def plain_beside(measured: dict[str, list[dict]], mode: str) -> list[dict]:
    """Plain torch_xla's rounds that ``mode``'s are compared with: in a twin run (``--layout twin``) the plain
    process that ran at the same time as ``mode``'s on the other core (``plain_<mode>``), else plain's turns."""
    return measured.get(f"plain_{mode}") or measured["plain"]


def steady_ratios(turns: dict[str, list[dict]], mode: str, key: str, base: str | None = None) -> list[float]:
    """Per-round ratios of a cached loop: ``mode``'s i-th turn over plain's i-th (``base``: plain's figure
    to divide by, when it differs from ``key``, e.g. ``--track-lines always`` over the plain loop)."""
    return [x[key] / p[base or key] for x, p in zip(turns[mode], plain_beside(turns, mode))
            if key in x and (base or key) in p]


def compile_ratios(results: dict[str, list[dict]], mode: str, key: str) -> list[float]:
    """Per-round ratios of the compile path: ``mode``'s i-th fresh process over plain's i-th."""
    return [r[key] / p[key] for r, p in zip(results[mode], plain_beside(results, mode))]


def _steady(mode: str, key: str) -> Callable[[dict], list[float] | None]:
    def ratios(run: dict) -> list[float] | None:
        turns = run.get("steady")
        return steady_ratios(turns, mode, key) if turns else None
    return ratios


def _compile(layers: str | None, mode: str, key: str) -> Callable[[dict], list[float] | None]:
    def ratios(run: dict) -> list[float] | None:
        name = layers if layers is not None else _big(run)
        results = run.get("compile", {}).get(name) if name else None
        if not results or mode not in results:
            return None
        return compile_ratios(results, mode, key)
    return ratios


def _big(run: dict) -> str | None:
    """The big model's key (``--big-layers``, 12 by default)."""
    return next((k for k in run.get("compile", {}) if k != "2"), None)


# Issue 30's goals (bench_capture_overhead.py prints them too): cached loops, (loop, mode) -> ratio to plain;
# the compile path's lean CompileTime and cell wall time
LOOP_GOALS = {("loop", "full"): 1.03, ("loop", "lean"): 1.02, ("short", "lean"): 1.02}
COMPILE_GOAL = 1.03

FIGURES = (
    Figure("Adam loop (9 ms), full", LOOP_GOALS["loop", "full"], _steady("full", "loop"), "steady"),
    Figure("Adam loop (9 ms), lean", LOOP_GOALS["loop", "lean"], _steady("lean", "loop"), "steady"),
    Figure("short loop (3 ms), lean", LOOP_GOALS["short", "lean"], _steady("lean", "short"), "steady"),
    Figure("short loop (3 ms), full", None, _steady("full", "short"), "steady"),
    Figure("2-layer first two steps, lean CompileTime", COMPILE_GOAL, _compile("2", "lean", "compile_s"), "2"),
    Figure("2-layer first two steps, lean wall", COMPILE_GOAL, _compile("2", "lean", "wall_s"), "2"),
    Figure("2-layer first two steps, full wall", None, _compile("2", "full", "wall_s"), "2"),
    Figure("big model first two steps, lean CompileTime", COMPILE_GOAL, _compile(None, "lean", "compile_s"), "big"),
    Figure("big model first two steps, lean wall", COMPILE_GOAL, _compile(None, "lean", "wall_s"), "big"),
    Figure("big model first two steps, full wall", None, _compile(None, "full", "wall_s"), "big"),
)


def pooled_interval(per_run: list[list[float]], reps: int, seed: int = 0) -> tuple[float, float]:
    """95% interval of the median of all rounds: resample runs, then rounds within each resampled run."""
    rng = random.Random(seed)
    medians = []
    for _ in range(reps):
        rounds: list[float] = []
        for run in rng.choices(per_run, k=len(per_run)):
            rounds.extend(rng.choices(run, k=len(run)))
        medians.append(statistics.median(rounds))
    medians.sort()
    return medians[int(0.025 * (reps - 1))], medians[int(0.975 * (reps - 1))]


def chance_per_run(runs: list[dict], reps: int, seed: int = 0) -> tuple[float, dict[str, float]] | None:
    """How often one more run would meet every goal, if it is like these: a simulated run is one of the
    saved runs (a part it did not measure, as a run stopped early, taken from another run that did), each
    part's rounds resampled (the part's figures from the same rounds, as in one run). Returns that share
    and each goal's own; None when no run measured a goal. Three in a row come about as often as the
    share cubed."""
    rng = random.Random(seed)
    goals = [f for f in FIGURES if f.goal is not None]
    parts = []  # (the part's figures, {index of a saved run that measured them: their per-round ratios})
    for part in dict.fromkeys(f.part for f in goals):
        figures = [f for f in goals if f.part == part]
        measured = {i: ratios for i, run in enumerate(runs) if all(ratios := [f.ratios(run) for f in figures])
                    and len({len(r) for r in ratios}) == 1}
        if measured:
            parts.append((figures, measured))
    if not parts:
        return None
    every, each = 0, {f.label: 0 for figures, _ in parts for f in figures}
    for _ in range(reps):
        run, all_met = rng.randrange(len(runs)), True
        for figures, measured in parts:
            ratios = measured.get(run) or measured[rng.choice(list(measured))]
            rounds = [rng.randrange(len(ratios[0])) for _ in ratios[0]]
            for figure, r in zip(figures, ratios):
                met = statistics.median(r[i] for i in rounds) <= figure.goal
                each[figure.label] += met
                all_met = all_met and met
        every += all_met
    return every / reps, {label: n / reps for label, n in each.items()}


def meets(run: dict) -> bool | None:
    """Whether one run meets every goal it measured (None: it measured none)."""
    results = [statistics.median(r) <= f.goal for f in FIGURES if f.goal is not None and (r := f.ratios(run))]
    return all(results) if results else None


def three_in_a_row(runs: list[dict]) -> bool:
    streak = 0
    for run in runs:
        streak = streak + 1 if meets(run) and all(f.ratios(run) for f in FIGURES if f.goal is not None) else 0
        if streak >= 3:
            return True
    return False


def is_null(run: dict) -> bool:
    """A ``--null`` run: plain torch_xla in full's and lean's places too (no capture measured)."""
    return bool(run.get("null"))


def layout(run: dict) -> str:
    """How a run set its processes side by side: ``turns`` (one after another on both cores; every run before
    ``--layout`` existed) or ``twin`` (plain and the mode compared at the same time, one core each)."""
    return run.get("layout", "turns")


def report(runs: list[dict], names: list[str], reps: int) -> str:
    kinds = [(is_null(r), layout(r)) for r in runs]
    if len(set(kinds)) > 1:  # (never pooled together: capture vs noise alone, or a different measurement)
        pick = lambda want: ([r for r, k in zip(runs, kinds) if k == want],  # noqa: E731
                             [name for name, k in zip(names, kinds) if k == want])
        return "\n\n".join(report(*pick(kind), reps) for kind in dict.fromkeys(kinds))
    null = [n for n, _ in kinds]
    lines = ["NULL RUNS, plain torch_xla in every place: each figure is this machine's noise alone, the chances "
             "what a mode that costs nothing would get"] if all(null) else []
    if layout(runs[0]) == "twin":
        lines.append("TWIN LAYOUT: plain torch_xla and the mode compared at the same time, one core each")
    lines += [f"{len(runs)} runs: " + ", ".join(f"{n} ({r.get('code') or '?'}, {r.get('started', '?')})"
                                               for n, r in zip(names, runs))]
    chance = chance_per_run(runs, reps)
    settings = {json.dumps(r.get("pjrt_env") or {}, sort_keys=True) for r in runs}
    if len(settings) > 1:  # (e.g. PJRT_CPU_ASYNC_CLIENT=0 changes who waits for an execution: not like with like)
        lines.append("  NOTE: the runs were measured under different PJRT settings: " + ", ".join(
            f"{n} {pjrt_text(r.get('pjrt_env'))}" for n, r in zip(names, runs)))
    sizes = {json.dumps(_blocks(r), sort_keys=True) for r in runs if r.get("steady")}
    if len(sizes) > 1:  # (a loop's step time sets the share of a sync's fixed cost: not like with like)
        lines.append("  NOTE: the cached loops' models differ between runs (hidden blocks): " + ", ".join(
            f"{n} Adam {b['loop']} short {b['short']}" for n, r in zip(names, runs) if r.get("steady")
            for b in (_blocks(r),)))
    for figure in FIGURES:
        per_run = [(n, r) for n, run in zip(names, runs) if (r := figure.ratios(run))]
        if not per_run:
            continue
        medians = [statistics.median(r) for _, r in per_run]
        rounds = [x for _, r in per_run for x in r]
        low, high = pooled_interval([r for _, r in per_run], reps)
        goal = f"goal <= {figure.goal}" if figure.goal is not None else "no goal"
        met = "" if figure.goal is None else f"; runs meeting it {sum(m <= figure.goal for m in medians)}/{len(medians)}"
        lines.append(f"  {figure.label} ({goal})")
        lines.append("    per run: " + ", ".join(f"{n} {m:.3f}" for (n, _), m in zip(per_run, medians)) + met)
        lines.append(f"    pooled: median {statistics.median(rounds):.3f} of {len(rounds)} rounds, 95% interval "
                     f"{low:.3f}..{high:.3f}; median of run medians {statistics.median(medians):.3f}")
        if chance and figure.label in chance[1]:
            lines.append(f"    chance that one more run meets it: {chance[1][figure.label]:.2f}")
    every = [meets(r) for r in runs]
    lines.append("  every goal per run: " + ", ".join(f"{n} {'yes' if m else 'no' if m is not None else '-'}"
                                                      for n, m in zip(names, every)))
    if chance:
        lines.append(f"  chance that one more run meets every goal (its parts drawn from these runs, rounds "
                     f"resampled): {chance[0]:.2f}; three in a row: {chance[0] ** 3:.3f}")
    lines.append(f"  three runs in a row meeting every goal: {'yes' if three_in_a_row(runs) else 'no'}")
    return "\n".join(lines)


def _blocks(run: dict) -> dict[str, int]:
    """The cached loops' hidden blocks of a saved run (runs before they were sized: the first models, 1 and 2)."""
    return run.get("blocks") or {"loop": 1, "short": 2}


def inherited_pjrt() -> dict[str, str]:
    """The PJRT settings (``PJRT_DEVICE`` aside) a benchmark's processes inherit from its environment, plain
    torch_xla's and xla_lab's alike; saved with each run as ``pjrt_env``."""
    import os

    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("PJRT_") and k != "PJRT_DEVICE"}


def pjrt_text(env: dict | None) -> str:
    """``PJRT_CPU_ASYNC_CLIENT=0``, or "defaults"."""
    return " ".join(f"{k}={v}" for k, v in sorted((env or {}).items())) or "defaults"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="files written by bench_capture_overhead.py --json, in run order")
    parser.add_argument("--bootstrap", type=int, default=4000, help="resamples for the pooled interval")
    args = parser.parse_args()
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(json.load(f))
    print(report(runs, args.runs, args.bootstrap))


if __name__ == "__main__":
    main()
