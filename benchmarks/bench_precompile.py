"""Does the precompile queue hide recompilation latency in an interactive session?

Replays one fine-tuning session in a real Jupyter kernel twice, in one run: with the queue working
and with it paused. A small transformer train step: the first step, an epoch whose last batch is
short, a new sequence length, an eval pass, with think time between cells (the client sleeps, as a
person reading and typing would; the kernel is idle). Prints:

* the compile time the user waited for in each session (compiles of cache misses, plus any time a
  cell waited for a job in flight), and the share the queue hid (goal >= 90% of what it can see
  coming: everything after the very first step, which nothing can predict);
* the foreground step time with the queue on vs off: the same cached train steps timed in both
  kernels in alternating rounds after the replay (goal <= 1.05);
* the peak memory taken by shadow copies.

Usage: python benchmarks/bench_precompile.py [--think SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

SETUP = r"""
%load_ext xla_lab
import torch, torch_xla, xla_lab
from torch.utils.data import DataLoader, TensorDataset
dev = torch_xla.device()
torch.manual_seed(0)
VOCAB, D, B = 512, 64, 8

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        layer = torch.nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.1, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(D, VOCAB)
    def forward(self, x):
        return self.head(self.enc(self.emb(x)))

model = Tiny().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

def tokens(n, seq):
    x = torch.randint(0, VOCAB, (n, seq))
    return TensorDataset(x, torch.roll(x, -1, 1))

train64 = DataLoader(tokens(44, 64), batch_size=B)       # 5 full batches and one of 4
train128 = DataLoader(tokens(24, 128), batch_size=B)     # 3 full batches
eval128 = DataLoader(tokens(16, 128), batch_size=B)

@xla_lab.step(buckets=[64, 128], bucket_dims={"x": 1, "y": 1})
def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    return loss

@xla_lab.step(mode="eval")
def eval_step(model, x):
    with torch.no_grad():
        return model(x).argmax(-1)
"""

CELLS = [
    ("first step", """%%xla -q -n first
x, y = next(iter(train64))
loss = train_step(model, opt, x.to(dev), y.to(dev))
"""),
    ("epoch, short last batch", """%%xla -q -n epoch
for x, y in train64:
    loss = train_step(model, opt, x.to(dev), y.to(dev))
    torch_xla.sync()
"""),
    ("sequence length 128", """%%xla -q -n seq128
for x, y in train128:
    loss = train_step(model, opt, x.to(dev), y.to(dev))
    torch_xla.sync()
"""),
    ("eval pass", """%%xla -q -n eval
model.eval()
for x, _ in eval128:
    pred = eval_step(model, x.to(dev))
    torch_xla.sync()
model.train()
"""),
]

REPORT = r"""
import json as _json
_q = xla_lab.queue()
print("XLA_LAB_RESULT" + _json.dumps({
    "cells": [{"name": c.graph_name, "wall_s": c.wall_s, "notes": c.notes,
               "steps": [{"cache": s.cache, "compile_s": s.timings.get("compile_s"),
                          "trace_s": s.timings.get("trace_s"), "execute_s": s.timings.get("execute_s"),
                          "saved_s": s.saved_s} for s in c.steps]} for c in xla_lab.history()],
    "shadow_peak": _q.shadow_bytes_peak, "saved_s": _q.saved_s, "counts": _q.counts(),
    "jobs": [(j.label, j.state, j.compile_s, j.used, j.error) for j in _q.jobs],
}))
"""


TIMED_STEPS = """
import time as _time, json as _json
import torch_xla.core.xla_model as _xm
_times = []
for _x, _y in train128:
    _x, _y = _x.to(dev), _y.to(dev)
    _t = _time.perf_counter()
    loss = train_step(model, opt, _x, _y)
    torch_xla.sync()
    _xm.wait_device_ops()
    _times.append(_time.perf_counter() - _t)
print("XLA_LAB_RESULT" + _json.dumps(_times))
"""


class Session:
    """One kernel replaying the session (queue on or paused)."""

    def __init__(self, queue_on: bool):
        from jupyter_client.manager import start_new_kernel

        self.queue_on = queue_on
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=dict(os.environ, PJRT_DEVICE="CPU"))
        self.out: list[str] = []

    def run(self, code: str) -> float:
        start = time.time()
        reply = self.kc.execute_interactive(code, timeout=900, output_hook=lambda msg: _collect(msg, self.out))
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {reply['content'].get('evalue')}\n{''.join(self.out)[-3000:]}")
        return time.time() - start

    def result(self, code: str):
        self.out.clear()
        self.run(code)
        text = "".join(self.out)
        return json.loads(text[text.index("XLA_LAB_RESULT") + len("XLA_LAB_RESULT"):].splitlines()[0])

    def replay(self, think: float) -> dict:
        self.run(SETUP + ("\n%xla queue pause\n" if not self.queue_on else ""))
        walls = []
        for name, code in CELLS:
            time.sleep(think)  # the user reads the last output and types the next cell
            walls.append(self.run(code))
            print(f"  [{'queue on ' if self.queue_on else 'queue off'}] {name}: {walls[-1]:.1f} s", flush=True)
        result = self.result(REPORT)
        result["walls"] = walls
        return result

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _collect(msg, out: list[str]) -> None:
    if msg["msg_type"] == "stream":
        out.append(msg["content"]["text"])


def visible_compile(result: dict, skip_first: bool) -> float:
    cells = result["cells"][1:] if skip_first else result["cells"]
    compile_s = sum(s["compile_s"] or 0.0 for c in cells for s in c["steps"] if s["cache"] == "miss")
    waited = 0.0
    for c in cells:
        for n in c["notes"]:
            if "waited" in n and "precompile job" in n:
                waited += float(n.split("waited ")[1].split(" s")[0])
    return compile_s + waited


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--think", type=float, default=15.0, help="seconds between cells (default 15)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of timed steps (default 5)")
    args = parser.parse_args()
    print(f"replaying {len(CELLS)} cells with {args.think:.0f} s of think time, queue off then on")
    off_kernel, on_kernel = Session(False), Session(True)
    try:
        off = off_kernel.replay(args.think)
        on = on_kernel.replay(args.think)
        # Foreground step time, side by side: the same cached train steps in both kernels, in
        # alternating rounds so the machine's load drifts over both alike.
        step_off, step_on = [], []
        for _ in range(args.rounds):
            step_off += off_kernel.result(TIMED_STEPS)
            step_on += on_kernel.result(TIMED_STEPS)
    finally:
        off_kernel.close()
        on_kernel.close()
    if os.environ.get("XLA_LAB_BENCH_JSON"):
        with open(os.environ["XLA_LAB_BENCH_JSON"], "w") as f:
            json.dump({"off": off, "on": on, "step_off": step_off, "step_on": step_on}, f, indent=1)
    off_all, on_all = visible_compile(off, False), visible_compile(on, False)
    off_later, on_later = visible_compile(off, True), visible_compile(on, True)
    hidden_later = 1 - on_later / off_later if off_later else 0.0
    hidden_all = 1 - on_all / off_all if off_all else 0.0
    t_off, t_on = statistics.median(step_off), statistics.median(step_on)
    print()
    print(f"{'':38}{'queue off':>12}{'queue on':>12}")
    for i, (name, _) in enumerate(CELLS):
        def cell_compile(r):
            return sum(s["compile_s"] or 0.0 for s in r["cells"][i]["steps"] if s["cache"] == "miss")
        print(f"  compile waited in '{name}'".ljust(38) + f"{cell_compile(off):>10.2f} s{cell_compile(on):>10.2f} s")
    print(f"  {'user-visible compile, all cells':36}{off_all:>10.2f} s{on_all:>10.2f} s")
    print(f"  {'... after the first step':36}{off_later:>10.2f} s{on_later:>10.2f} s")
    print()
    print(f"share hidden after the first step: {hidden_later:.1%} (goal >= 90%)"
          f" -> {'OK' if hidden_later >= 0.9 else 'NOT MET'}")
    print(f"share hidden including the unpredictable first step: {hidden_all:.1%}")
    print(f"foreground step time ({len(step_on)} cached train steps each, alternating rounds): off {t_off * 1e3:.1f} ms, "
          f"on {t_on * 1e3:.1f} ms, ratio {t_on / t_off:.3f} (goal <= 1.05)"
          f" -> {'OK' if t_on / t_off <= 1.05 else 'NOT MET'}")
    print(f"peak shadow memory: {on['shadow_peak'] / 2**20:.1f} MiB; time saved by used jobs: {on['saved_s']:.2f} s")
    print(f"jobs: {on['counts']}")
    for label, state, compile_s, used, error in on["jobs"]:
        print(f"  {state:<9} used={used} compile {compile_s:6.2f} s  {label}" + (f"  {error}" if error else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
