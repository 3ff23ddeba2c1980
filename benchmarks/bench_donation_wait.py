"""Plain torch_xla, no xla_lab: does a sync wait on the Python thread for its own step's execution, with
source lines on (``XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1``, what any capture of source lines needs) and off?

torch_xla 2.9 hands a step's execution to XLA on its executor thread; the step's donated inputs sit in an
object both threads hold, and whichever lets go last frees them. Freeing a donated buffer waits until the
execution releases it: XLA's profiler records that as "Wait for donation holds". On the executor thread it
costs nothing; on the Python thread, inside ``SyncTensorsGraph``, the step's execution no longer overlaps
what the program does next. With source lines, every IR node carries its Python stack, and freeing the
graph at the sync's end takes the Python thread long enough to be last (README, "Benchmarks").

This records, in fresh processes taking turns (lines off, lines on), a profiler session around the bench's
encoder (``bench_capture_overhead.py``'s SETUP_BERT): its first two steps (each compiles) and a cached loop,
and counts, per sync, the "Wait for donation holds" events of the Python thread inside that sync's
``SyncTensorsGraph``. It is the measurement behind the README's finding, and a reproducer for a torch_xla
report: nothing of xla_lab runs in the measured processes (its XSpace reader reads the bytes afterwards).

    .venv/bin/python benchmarks/bench_donation_wait.py [--rounds 3] [--layers 2] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINES_ENV = {"XLA_IR_DEBUG": "1", "XLA_HLO_DEBUG": "1"}
SYNC, WAIT = "SyncTensorsGraph", "Wait for donation holds"
STEP = """
opt.zero_grad()
logits = head(model(tokens).mean(1))
loss = torch.nn.functional.cross_entropy(logits, labels)
loss.backward()
opt.step()
"""


def worker(layers: int, steps: int) -> dict:
    """In this process (source lines as its environment says): the session's bytes, read into each
    Python-thread sync's wait, plus torch_xla's ExecuteTime of each step."""
    import torch_xla
    import torch_xla.debug.metrics as met

    sys.path.insert(0, str(HERE))
    from bench_capture_overhead import SETUP_BERT

    scope: dict = {}
    exec(SETUP_BERT.format(layers=layers), scope)
    import torch_xla.core.xla_model as xm

    xm.wait_device_ops()
    session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
    for _ in range(2 + steps):
        exec(STEP, scope)
        torch_xla.sync()
    xm.wait_device_ops()
    data = bytes(session.stop())
    executes = [ns / 1e9 for _, ns in (met.metric_data("ExecuteTime") or (0, 0, ()))[2]][-(2 + steps):]
    return {"waits": sync_waits(data), "execute_s": executes}


def sync_waits(data: bytes) -> list[float]:
    """Per ``SyncTensorsGraph`` of the thread that synced, oldest first: seconds of "Wait for donation
    holds" inside it."""
    sys.path.insert(0, str(HERE.parent))
    from xla_lab.profile.xplane import read_space

    out = []
    for plane in read_space(data, frozenset({SYNC, WAIT})):
        for line in plane.lines:
            syncs = sorted((e for e in line.events if e.name == SYNC), key=lambda e: e.start_ns)
            waits = [e for e in line.events if e.name == WAIT]
            for s in syncs:
                out.append((s.start_ns, sum(w.duration_ns for w in waits
                                            if s.start_ns <= w.start_ns and w.end_ns <= s.end_ns + 1e3) / 1e9))
    return [w for _, w in sorted(out)]


def run_worker(lines: bool, layers: int, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LINES_ENV and not k.startswith("XLA_LAB")}
    env.setdefault("PJRT_DEVICE", "CPU")
    if lines:
        env.update(LINES_ENV)
    proc = subprocess.run([sys.executable, __file__, "--worker", "--layers", str(layers), "--steps", str(steps)],
                          env=env, capture_output=True, text=True, check=False)
    result = next((ln[7:] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or result is None:
        raise SystemExit(f"worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(result)


def summary(runs: list[dict], steps: int) -> str:
    """Compiling syncs (the first two of each process) and cached ones: how many waited at all (over
    0.1 ms), the median wait of those that did, and the median step execution beside it."""
    out = []
    for label, part in (("compiling syncs", slice(0, 2)), ("cached syncs", slice(2, 2 + steps))):
        waits = [w for r in runs for w in r["waits"][part]]
        executes = [e for r in runs for e in r["execute_s"][part]]
        waited = [w for w in waits if w > 1e-4]
        med = f"{statistics.median(waited) * 1e3:.1f} ms" if waited else "-"
        per_round = [sum(r["waits"][part]) for r in runs]
        out.append(f"  {label:16} waited in {len(waited):3} of {len(waits):3} (median {med}; execution median "
                   f"{statistics.median(executes) * 1e3:.1f} ms); per process {min(per_round):.3f}-"
                   f"{max(per_round):.3f} s in all")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per setting, taking turns")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="cached steps after the two compiling ones")
    ap.add_argument("--json", help="write every process's waits here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.layers, args.steps)), flush=True)
        return
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(args.rounds):
        for lines in ((False, True) if i % 2 == 0 else (True, False)):
            runs["on" if lines else "off"].append(run_worker(lines, args.layers, args.steps))
    from pool_overhead import inherited_pjrt, pjrt_text  # (the capture benchmark's way to say them)

    pjrt = inherited_pjrt()
    if pjrt:  # (PJRT_CPU_ASYNC_CLIENT=0: executions run on torch_xla's executor thread, which then frees the inputs)
        print("every process runs with " + pjrt_text(pjrt))
    print(f"plain torch_xla, {args.layers}-layer encoder, first two steps then {args.steps} cached, "
          f"{args.rounds} fresh processes per setting taking turns: the Python thread's waits for its own "
          "step's execution inside the sync ('Wait for donation holds')")
    for key, label in (("off", "source lines off"), ("on", "source lines on (XLA_IR_DEBUG, XLA_HLO_DEBUG)")):
        print(label)
        print(summary(runs[key], args.steps))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "pjrt_env": pjrt, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
