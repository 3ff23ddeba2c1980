"""Where a lean process's cost on a cached loop is, beyond its ``%%xla`` cells: live IPython processes taking
turns on the capture-overhead benchmark's short loop (sized as there, ``--short-blocks``), each with one more
of what lean capture sets for the whole process, the loop timed as a plain cell unless said:

    plain       plain torch_xla
    lines       XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 in the environment, lines switched off before the loop
                (as lean's tracking pauses them once a loop hits the cache)
    debug1      PT_XLA_DEBUG_LEVEL=1 with its file (torch_xla's analysis of compiles), 32 frames
    lean-plain  xla_lab loaded in lean capture, the loop as a plain cell (lines off)
    lean-xla    the same process kind, the loop as a ``%%xla -q`` cell (what bench_capture_overhead times)
  and, named with ``--kinds``, full capture's:
    debug2      PT_XLA_DEBUG_LEVEL=2 with its file (torch_xla's analysis of every execution), 32 frames
    full-plain  xla_lab loaded in full capture, the loop as a plain cell (lines off)
    full-xla    the same process kind, the loop as a ``%%xla -q`` cell

(a4) of bench_capture_overhead.py compares a ``%%xla`` cell with a plain cell of one lean process; this
compares processes, so a cost that every cell of a lean process pays shows here and not there. Ratios to
plain per round (wall and CPU time), medians with the spread. PJRT_* settings are inherited, as there.
``--twin``: as bench_capture_overhead's twin layout, each kind's loop runs at the same time as plain's, one
core each (swapped round by round), instead of every kind taking turns on both cores.

``--loop adam`` times the benchmark's 200-step Adam loop (``--loop-blocks``) instead of the short loop.

    python benchmarks/bench_lean_process_cost.py [--short-blocks 8] [--groups 2] [--rounds 6] [--twin]
                                                 [--loop short|adam] [--loop-blocks 1] [--kinds plain,debug2,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench_capture_overhead import LOOP, LOOP_BLOCKS, LOOP_STEPS, SHORT_BLOCKS, SHORT_LOOP, SHORT_STEPS, LiveWorker, \
    _shell, live_workers, loops_setup, side_by_side, spread, turned
from pool_overhead import inherited_pjrt, pjrt_text, steady_ratios

KINDS = ("plain", "lines", "debug1", "lean-plain", "lean-xla")  # (the default)
MORE_KINDS = ("debug2", "full-plain", "full-xla")
LOOPS = {"short": (SHORT_LOOP, SHORT_STEPS), "adam": (LOOP, LOOP_STEPS)}  # (bench_capture_overhead's loops)


def worker(kind: str, loop: str, blocks: tuple[int, int]) -> None:
    if kind == "lines":
        os.environ["XLA_IR_DEBUG"] = os.environ["XLA_HLO_DEBUG"] = "1"
    if kind in ("debug1", "debug2"):
        os.environ["PT_XLA_DEBUG_LEVEL"] = kind[-1]
        os.environ["PT_XLA_DEBUG_FILE"] = os.path.join(tempfile.mkdtemp(), "sync.log")
        os.environ["PT_XLA_DEBUG_MAX_FRAME"] = "32"
    ip = _shell(kind.split("-")[0] if kind.startswith(("lean-", "full-")) else "plain")
    import torch_xla

    cell, steps = LOOPS[loop]
    prefix = "%%xla -q\n" if kind.endswith("-xla") else ""
    assert ip.run_cell(loops_setup(*blocks)).success
    assert ip.run_cell(prefix + cell.format(steps=3)).success
    print("READY", flush=True)
    for _ in sys.stdin:
        if not prefix:
            torch_xla._XLAC._set_ir_debug(False)  # (as in plain torch_xla, and as lean's tracking pauses them)
        t0, c0 = time.perf_counter(), time.process_time()
        assert ip.run_cell(prefix + cell.format(steps=steps)).success
        print("TIMES " + json.dumps({loop: time.perf_counter() - t0, loop + "_cpu": time.process_time() - c0}),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-blocks", type=int, default=SHORT_BLOCKS)
    parser.add_argument("--loop-blocks", type=int, default=LOOP_BLOCKS, help="the Adam loop's hidden blocks")
    parser.add_argument("--loop", choices=tuple(LOOPS), default="short", help="which of the benchmark's loops")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS + MORE_KINDS)} "
                        "(plain is always there)")
    parser.add_argument("--groups", type=int, default=2, help="groups of live processes, one of each kind")
    parser.add_argument("--rounds", type=int, default=6, help="timed loops per process")
    parser.add_argument("--twin", action="store_true", help="each kind beside plain, one core each")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    blocks = (args.loop_blocks, args.short_blocks)
    if args.worker:
        worker(args.worker, args.loop, blocks)
        return
    kinds = ("plain",) + tuple(k for k in dict.fromkeys(args.kinds.split(",")) if k and k != "plain")
    unknown = [k for k in kinds if k not in KINDS + MORE_KINDS]
    if unknown:
        parser.error(f"unknown kinds: {', '.join(unknown)}")
    key, (_, steps) = args.loop, LOOPS[args.loop]
    turns: dict[str, list[dict]] = {k: [] for k in kinds}
    if args.twin:
        turns.update({f"plain_{k}": [] for k in kinds[1:]})
    extra = ("--loop", args.loop, "--loop-blocks", str(args.loop_blocks), "--short-blocks", str(args.short_blocks))
    for g in range(args.groups):
        with live_workers({k: LiveWorker(k, steps, script=__file__, wait=False, extra=extra,
                                         core=int(k != "plain") if args.twin else None) for k in kinds}) as workers:
            for i in range(args.rounds):
                if not args.twin:
                    for k in turned(kinds, i):
                        turns[k].append(workers[k].run())
                    continue
                core = (g + i) % 2
                for k in turned(kinds[1:], i):
                    plain, other = side_by_side(workers["plain"], workers[k], core)
                    turns[f"plain_{k}"].append(plain)
                    turns[k].append(other)
    plain = turns["plain"] or turns[f"plain_{kinds[-1]}"]
    print(f"{args.loop} loop ({steps} steps, {blocks[args.loop == 'short']} blocks): plain "
          f"{statistics.median(t[key] for t in plain) / steps * 1e3:.2f} ms/step; "
          f"{args.groups} groups x {args.rounds} rounds{'; twin: each beside plain, one core each' if args.twin else ''}; "
          f"PJRT {pjrt_text(inherited_pjrt())}")
    for k in kinds[1:]:
        wall, cpu = steady_ratios(turns, k, key), steady_ratios(turns, k, key + "_cpu")
        print(f"  {k:10} / plain  wall {statistics.median(wall):.3f} [{spread(wall)}]  "
              f"CPU {statistics.median(cpu):.3f} [{spread(cpu)}]")


if __name__ == "__main__":
    main()
