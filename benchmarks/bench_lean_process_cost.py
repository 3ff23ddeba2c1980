"""Where a lean process's cost on a cached loop is, beyond its ``%%xla`` cells: live IPython processes taking
turns on the capture-overhead benchmark's short loop (sized as there, ``--short-blocks``), each with one more
of what lean capture sets for the whole process, the loop timed as a plain cell unless said:

    plain       plain torch_xla
    lines       XLA_IR_DEBUG=1 and XLA_HLO_DEBUG=1 in the environment, lines switched off before the loop
                (as lean's tracking pauses them once a loop hits the cache)
    debug1      PT_XLA_DEBUG_LEVEL=1 with its file (torch_xla's analysis of compiles), 32 frames
    lean-plain  xla_lab loaded in lean capture, the loop as a plain cell (lines off)
    lean-xla    the same process kind, the loop as a ``%%xla -q`` cell (what bench_capture_overhead times)

(a4) of bench_capture_overhead.py compares a ``%%xla`` cell with a plain cell of one lean process; this
compares processes, so a cost that every cell of a lean process pays shows here and not there. Ratios to
plain per round (wall and CPU time), medians with the spread. PJRT_* settings are inherited, as there.
``--twin``: as bench_capture_overhead's twin layout, each kind's loop runs at the same time as plain's, one
core each (swapped round by round), instead of every kind taking turns on both cores.

    python benchmarks/bench_lean_process_cost.py [--short-blocks 8] [--groups 2] [--rounds 6] [--twin]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench_capture_overhead import SHORT_BLOCKS, SHORT_LOOP, SHORT_STEPS, LiveWorker, _shell, loops_setup, pin, \
    spread, turned
from pool_overhead import inherited_pjrt, pjrt_text, steady_ratios

KINDS = ("plain", "lines", "debug1", "lean-plain", "lean-xla")


def worker(kind: str, steps: int, short_blocks: int) -> None:
    if kind == "lines":
        os.environ["XLA_IR_DEBUG"] = os.environ["XLA_HLO_DEBUG"] = "1"
    if kind == "debug1":
        os.environ["PT_XLA_DEBUG_LEVEL"] = "1"
        os.environ["PT_XLA_DEBUG_FILE"] = os.path.join(tempfile.mkdtemp(), "sync.log")
        os.environ["PT_XLA_DEBUG_MAX_FRAME"] = "32"
    ip = _shell("lean" if kind.startswith("lean") else "plain")
    import torch_xla

    prefix = "%%xla -q\n" if kind == "lean-xla" else ""
    assert ip.run_cell(loops_setup(1, short_blocks)).success
    assert ip.run_cell(prefix + SHORT_LOOP.format(steps=3)).success
    print("READY", flush=True)
    for _ in sys.stdin:
        if not prefix:
            torch_xla._XLAC._set_ir_debug(False)  # (as in plain torch_xla, and as lean's tracking pauses them)
        t0, c0 = time.perf_counter(), time.process_time()
        assert ip.run_cell(prefix + SHORT_LOOP.format(steps=steps)).success
        print("TIMES " + json.dumps({"short": time.perf_counter() - t0, "short_cpu": time.process_time() - c0}),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short-blocks", type=int, default=SHORT_BLOCKS)
    parser.add_argument("--groups", type=int, default=2, help="groups of live processes, one of each kind")
    parser.add_argument("--rounds", type=int, default=6, help="timed loops per process")
    parser.add_argument("--twin", action="store_true", help="each kind beside plain, one core each")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=SHORT_STEPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.short_blocks)
        return
    turns: dict[str, list[dict]] = {k: [] for k in KINDS}
    if args.twin:
        turns.update({f"plain_{k}": [] for k in KINDS[1:]})
    for g in range(args.groups):
        workers = {k: LiveWorker(k, SHORT_STEPS, script=__file__, wait=False, core=int(k != "plain") if args.twin else None,
                                 extra=("--short-blocks", str(args.short_blocks))) for k in KINDS}
        for w in workers.values():
            w.wait_ready()
        try:
            for i in range(args.rounds):
                if not args.twin:
                    for k in turned(KINDS, i):
                        turns[k].append(workers[k].run())
                    continue
                core = (g + i) % 2
                for k in turned(KINDS[1:], i):
                    pin(workers["plain"].proc.pid, core)
                    pin(workers[k].proc.pid, 1 - core)
                    workers["plain"].start()
                    workers[k].start()
                    turns[f"plain_{k}"].append(workers["plain"].result())
                    turns[k].append(workers[k].result())
        finally:
            for w in workers.values():
                w.close()
    plain = turns["plain"] or turns["plain_lean-xla"]
    print(f"short loop ({SHORT_STEPS} steps, {args.short_blocks} blocks): plain "
          f"{statistics.median(t['short'] for t in plain) / SHORT_STEPS * 1e3:.2f} ms/step; "
          f"{args.groups} groups x {args.rounds} rounds{'; twin: each beside plain, one core each' if args.twin else ''}; "
          f"PJRT {pjrt_text(inherited_pjrt())}")
    for k in KINDS[1:]:
        wall, cpu = steady_ratios(turns, k, "short"), steady_ratios(turns, k, "short_cpu")
        print(f"  {k:10} / plain  wall {statistics.median(wall):.3f} [{spread(wall)}]  "
              f"CPU {statistics.median(cpu):.3f} [{spread(cpu)}]")


if __name__ == "__main__":
    main()
