"""What capturing a launch's workers costs: ``xmp.spawn`` (fork) of a per-rank SGD-momentum MLP loop
on 4 simulated CPU devices, in fresh processes taking turns (plain torch_xla, with xla_lab, plain,
with xla_lab, ...), since this machine is shared and noisy. Measured inside each worker, medians over
the ranks:

* the cached steps of the ranks' first loop (from its sixth step: two compile), as a user's loop runs:
  on two cores the ranks drift apart, so one rank's cached steps overlap another's compiles, and what
  this times depends on how far they drifted;
* the cached steps of a second loop that every rank starts together (a barrier, once each rank's first
  loop ended): the cost of xla_lab's hook on a cached step, without the drift (the goal);
* the CPU time of each rank's own thread per step of that loop (tracing, the sync's own work and
  xla_lab's hook; the graph runs on XLA's threads): less noisy than wall time, which with four
  ranks and XLA's thread pool on two cores depends on scheduling;
* the whole launch's wall time (compiles and xla_lab reading the workers' files included) and the
  worker process's CPU time.

The goal is the single-device capture's own overhead, measured in the same run: the same loop on one
device, as a notebook runs it (an IPython shell; with xla_lab a ``%%xla -q`` cell), plain and captured,
in fresh processes taking the same turns. xla_lab's hook runs in each rank's sync, and source lines
are recorded until the ranks' loops are cached.

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
WARMUP = 5  # steps 0 and 1 compile
import threading
# the ranks are threads of one worker process on the CPU client
ALL_HERE = threading.Barrier(int(os.environ["CPU_NUM_DEVICES"]))

def loop(index):
    dev = torch_xla.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 128).to(dev), torch.randint(0, 10, (32,)).to(dev)
    phases = []
    for phase in ("drifting", "together"):
        if phase == "together":  # every rank's loop cached: the cached steps alone, side by side
            xm.wait_device_ops()
            ALL_HERE.wait()
        times, cpu = [], time.thread_time()
        for _ in range(STEPS):
            t = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            torch_xla.sync()
            times.append(time.perf_counter() - t)
        phases.append(times + [(time.thread_time() - cpu) / STEPS])  # (last: the rank thread's CPU per step)
    xm.wait_device_ops()
    with open(os.path.join(OUT, f"rank{index}.json"), "w") as f:
        json.dump(phases, f)

import resource
t = time.perf_counter()
xmp.spawn(loop, start_method="fork")
wall = time.perf_counter() - t
used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker process (ended)
ranks = [json.load(open(os.path.join(OUT, n))) for n in sorted(os.listdir(OUT)) if n.startswith("rank")]
print(json.dumps({"wall": wall,
                  "drifting": statistics.median(statistics.median(r[0][WARMUP:-1]) for r in ranks),
                  "steady": statistics.median(statistics.median(r[1][:-1]) for r in ranks),
                  "rank_cpu": statistics.median(r[1][-1] for r in ranks),
                  "cpu": used.ru_utime + used.ru_stime, "ranks": len(ranks)}))
"""


# The goal's yardstick, in the same run: the same loop on one device, as a notebook runs it (an IPython
# shell; with xla_lab, the loop is a ``%%xla -q`` cell), the first loop compiling, the second timed.
SINGLE = r"""
import json, os, statistics, sys
os.environ.setdefault("PJRT_DEVICE", "CPU")
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
lab = sys.argv[1] == "xla_lab"
if lab:
    ip.run_line_magic("load_ext", "xla_lab")
SETUP = '''
import time
import torch, torch.nn as nn
import torch_xla, torch_xla.core.xla_model as xm
dev = torch_xla.device()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(32, 128).to(dev), torch.randint(0, 10, (32,)).to(dev)
'''
LOOP = '''
times, cpu = [], time.thread_time()
for _ in range(STEPS):
    t = time.perf_counter()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    torch_xla.sync()
    times.append(time.perf_counter() - t)
xm.wait_device_ops()
cpu = (time.thread_time() - cpu) / len(times)
'''
assert ip.run_cell(SETUP).success
ip.user_ns["STEPS"] = int(sys.argv[3])
head = "%%xla -q\n" if lab else ""
for _ in range(2):  # the first compiles and warms; the second is timed
    assert ip.run_cell(head + LOOP).success
ns = ip.user_ns
print(json.dumps({"steady": statistics.median(ns["times"][:-1]), "rank_cpu": ns["cpu"]}))
"""


def run_single(mode: str, steps: int) -> dict:
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("CPU_NUM_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", SINGLE, mode, "-", str(steps)], capture_output=True, text=True,
                          env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"single-device {mode} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    figures = ("steady", "rank_cpu", "drifting", "wall", "cpu")
    ratios: dict[str, list[float]] = {k: [] for k in figures}
    single: dict[str, list[float]] = {"steady": [], "rank_cpu": []}
    plain_ms, lab_ms = [], []
    for i in range(args.pairs):
        order = ("plain", "xla_lab") if i % 2 == 0 else ("xla_lab", "plain")
        got = {mode: run(mode, args.steps) for mode in order}
        one = {mode: run_single(mode, args.steps) for mode in order}
        assert got["plain"]["ranks"] == got["xla_lab"]["ranks"] == 4, got
        for k in figures:
            ratios[k].append(got["xla_lab"][k] / got["plain"][k])
        for k in single:
            single[k].append(one["xla_lab"][k] / one["plain"][k])
        plain_ms.append(got["plain"]["steady"] * 1e3)
        lab_ms.append(got["xla_lab"]["steady"] * 1e3)
        print(f"  pair {i + 1}: cached step (together) plain {plain_ms[-1]:.2f} ms, xla_lab {lab_ms[-1]:.2f} ms; "
              f"rank thread CPU plain {got['plain']['rank_cpu'] * 1e3:.2f} ms, xla_lab {got['xla_lab']['rank_cpu'] * 1e3:.2f} ms; "
              f"drifting plain {got['plain']['drifting'] * 1e3:.2f} ms, xla_lab {got['xla_lab']['drifting'] * 1e3:.2f} ms; "
              f"launch wall plain {got['plain']['wall']:.2f} s, xla_lab {got['xla_lab']['wall']:.2f} s; "
              f"one device plain {one['plain']['steady'] * 1e3:.2f} ms, %%xla {one['xla_lab']['steady'] * 1e3:.2f} ms",
              flush=True)
    print(f"xmp.spawn, 4 ranks x 2 loops x {args.steps} steps, {args.pairs} pairs of fresh processes")
    print(f"  cached rank step, ranks together, xla_lab / plain: {spread(ratios['steady'])}   "
          f"(plain {statistics.median(plain_ms):.2f} ms/step)")
    ranks, one = statistics.median(ratios["steady"]), statistics.median(single["steady"])
    print(f"  the goal's yardstick, the same loop on one device, %%xla / plain: {spread(single['steady'])}")
    print(f"    goal, the ranks' ratio within the single-device capture's own: {ranks:.3f} vs {one:.3f}: "
          f"{'met' if ranks <= one else 'not met'}")
    print(f"  a rank thread's own CPU time per cached step, ranks together, xla_lab / plain: {spread(ratios['rank_cpu'])}"
          f"; one device: {spread(single['rank_cpu'])}")
    print(f"  cached rank step, first loop (ranks drifting), xla_lab / plain: {spread(ratios['drifting'])}")
    print(f"  whole launch wall, xla_lab / plain: {spread(ratios['wall'])}")
    print(f"  the worker's CPU time, xla_lab / plain: {spread(ratios['cpu'])}")

if __name__ == "__main__":
    main()
