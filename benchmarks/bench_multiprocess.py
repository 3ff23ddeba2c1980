"""What capturing a launch's workers costs: ``xmp.spawn`` (fork) of a per-rank SGD-momentum MLP loop
on 4 simulated CPU devices, in fresh processes taking turns (plain torch_xla, with xla_lab, plain,
with xla_lab, ...), since this machine is shared and noisy. Measured inside each worker: the ranks'
cached steps (after the first five: two compile), median over the ranks; the whole launch's wall
time (compiles and xla_lab reading the workers' files included) and the worker process's CPU time.
Four ranks on two cores take turns at the CPU and at Python's GIL, so a rank's step time varies by
tens of percent from one process to the next: many pairs are needed.

The goal is the single-device capture's own overhead (a cached step within 3% of plain torch_xla):
xla_lab's hook runs in each rank's sync, and source lines are recorded until every rank's loop is
cached.

    python benchmarks/bench_multiprocess.py [--pairs 8] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, statistics, sys, time
os.environ.setdefault("PJRT_DEVICE", "CPU")
if sys.argv[1] == "xla_lab":
    from xla_lab import session
    session.get()  # what %load_ext xla_lab sets up: the runtime's settings, the launch wrapper
import torch, torch.nn as nn
import torch_xla, torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

OUT, STEPS = sys.argv[2], int(sys.argv[3])

def loop(index):
    dev = torch_xla.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 128).to(dev), torch.randint(0, 10, (32,)).to(dev)
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        torch_xla.sync()
        times.append(time.perf_counter() - t)
    xm.wait_device_ops()
    with open(os.path.join(OUT, f"rank{index}.json"), "w") as f:
        json.dump(times, f)

import resource
t = time.perf_counter()
xmp.spawn(loop, start_method="fork")
wall = time.perf_counter() - t
used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker process (ended)
ranks = [json.load(open(os.path.join(OUT, n))) for n in sorted(os.listdir(OUT)) if n.startswith("rank")]
print(json.dumps({"wall": wall, "steady": statistics.median(statistics.median(r[5:]) for r in ranks),
                  "cpu": used.ru_utime + used.ru_stime, "ranks": len(ranks)}))
"""


def run(mode: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, CPU_NUM_DEVICES="4", PJRT_DEVICE="CPU")
        done = subprocess.run([sys.executable, "-c", CHILD, mode, out, str(steps)], capture_output=True, text=True,
                              env=env, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    steady, wall, cpu = [], [], []
    plain_ms, lab_ms = [], []
    for i in range(args.pairs):
        order = ("plain", "xla_lab") if i % 2 == 0 else ("xla_lab", "plain")
        got = {mode: run(mode, args.steps) for mode in order}
        assert got["plain"]["ranks"] == got["xla_lab"]["ranks"] == 4, got
        steady.append(got["xla_lab"]["steady"] / got["plain"]["steady"])
        wall.append(got["xla_lab"]["wall"] / got["plain"]["wall"])
        cpu.append(got["xla_lab"]["cpu"] / got["plain"]["cpu"])
        plain_ms.append(got["plain"]["steady"] * 1e3)
        lab_ms.append(got["xla_lab"]["steady"] * 1e3)
        print(f"  pair {i + 1}: cached step plain {plain_ms[-1]:.2f} ms, xla_lab {lab_ms[-1]:.2f} ms; "
              f"launch wall plain {got['plain']['wall']:.2f} s, xla_lab {got['xla_lab']['wall']:.2f} s", flush=True)
    print(f"xmp.spawn, 4 ranks x {args.steps} steps, {args.pairs} pairs of fresh processes")
    print(f"  cached rank step, xla_lab / plain: {spread(steady)}   (plain {statistics.median(plain_ms):.2f} ms/step)")
    print(f"  whole launch wall, xla_lab / plain: {spread(wall)}")
    print(f"  the worker's CPU time, xla_lab / plain: {spread(cpu)}")


if __name__ == "__main__":
    main()
