"""Will it fit? How many compiles %xla fit needs per answer, and how good its line is.

For each zoo model (ResNet-18, GPT-2, the decoder-only model; tests/kernel/zoo), in a process of its
own (a fresh XLA cache, so every size compiles): set the model up, run its marked train step once,
then ``xla_lab.fit`` the batch against a budget. Prints per model: compiles used (goal <= 4 per
answer), the answer and its peak, the line's prediction error at the confirmed size, and the time
the fit took.

Usage: python benchmarks/bench_fit.py [--models resnet18,gpt2,decoder_only] [--repeat N] (with N > 1 it
prints each model's spread: the project's goals are met when met in three runs in a row)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ONE = r'''
import json, os, sys, time
sys.path[:0] = [{root!r}, {root!r} + "/tests"]
os.environ.setdefault("PJRT_DEVICE", "CPU")
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "xla_lab")
from tests.kernel.test_fit import STEPS
setup, dims, budget = STEPS[{name!r}]
assert ip.run_cell("import xla_lab\n" + setup).success
import xla_lab
start = time.time()
r = xla_lab.fit(ip.user_ns["fit_step"], dims, budget)
d = r.to_dict()
d["bench_s"] = time.time() - start
print("RESULT " + json.dumps(d))
'''


def run(name: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", ONE.format(root=ROOT, name=name)], capture_output=True,
                          text=True, timeout=1800, env=dict(os.environ, PJRT_DEVICE="CPU"))
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet18,gpt2,decoder_only")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{'model':<14} {'compiles':>8} {'answer':>7} {'peak':>10} {'budget':>10} {'line error':>10} "
          f"{'time':>8}")
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeat):  # (rounds over the models: a run-to-run drift hits every model alike)
        for name in args.models.split(","):
            t0 = time.time()
            d = run(name)
            runs.setdefault(name, []).append(d)
            a = d["answer"] or {}
            err = d["prediction_error"]
            print(f"{name:<14} {d['compiles']:>8} {a.get('size', '-'):>7} "
                  f"{(a.get('peak') or 0) / 2**20:>8.2f}Mi {d['budget']['bytes'] / 2**20:>8.2f}Mi "
                  f"{'-' if err is None else f'{100 * err:+.2f}%':>10} {d['bench_s']:>7.1f}s"
                  f"  ({time.time() - t0:.0f} s with start-up; state {d['state']})"
                  + (f"\n  error: {d['error']}" if d.get("error") else ""), flush=True)
            print(f"  sizes: " + ", ".join(f"{p['size']} {p['role']}" for p in d["points"]), flush=True)
    if args.repeat > 1:
        print(f"\nspread over {args.repeat} runs:")
        for name, ds in runs.items():
            c = [d["compiles"] for d in ds]
            e = [100 * d["prediction_error"] for d in ds if d["prediction_error"] is not None]
            t = [d["bench_s"] for d in ds]
            print(f"{name:<14} compiles {min(c)}-{max(c)}  answers {sorted({(d['answer'] or {}).get('size') for d in ds})}"
                  + (f"  line error {min(e):+.2f}% .. {max(e):+.2f}%" if e else "")
                  + f"  time {min(t):.1f}-{max(t):.1f} s")
    print("goal: at most 4 compiles per answer")


if __name__ == "__main__":
    main()
