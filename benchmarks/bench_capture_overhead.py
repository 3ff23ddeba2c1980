"""What capture costs, measured side by side in one run (this machine is shared and noisy).

(a) Steady state: a 200-step cached train loop under ``%%xla`` vs the same loop in plain torch_xla.
    Two comparisons:
      a1. separate processes: plain torch_xla with no xla_lab at all vs a kernel with xla_lab loaded
          running the loop under ``%%xla`` (the whole cost of the workbench: debug metadata, sync log,
          IR log, per-cell bookkeeping)          -- goal ratio <= 1.03
      a2. the same with ``%%xla --track-lines always`` (source lines recorded on every traced op,
          instead of pausing once the loop hits the cache: what the default saves)
(b) Compile path: the first two train steps (two compiles) of a small BERT-like model (2 x
    ``TransformerEncoderLayer``) in a fresh process, with capture vs without: XLA's CompileTime and
    the wall time of the cell including xla_lab reading the dumps    -- goal ratio <= 1.05
    A third process runs plain torch_xla with only XLA's dump flags, to show what the dump itself costs.

Runs are interleaved (plain, lab, plain, lab, ...) and medians are compared.

    python benchmarks/bench_capture_overhead.py [--rounds 3] [--steps 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETUP_MLP = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
torch.manual_seed(0)
dev = torch_xla.device()
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
    torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
xb = torch.randn(64, 256).to(dev)
yb = torch.randint(0, 10, (64,)).to(dev)
"""

LOOP = """
for _ in range({steps}):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""

SETUP_BERT = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
torch.manual_seed(0)
dev = torch_xla.device()
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2)).to(dev)
head = torch.nn.Linear(256, 2).to(dev)
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
tokens = torch.randn(8, 128, 256).to(dev)
labels = torch.randint(0, 2, (8,)).to(dev)
"""

BERT_STEPS = """
for _ in range(2):
    opt.zero_grad()
    logits = head(model(tokens).mean(1))
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""


# --- workers (run in child processes) ------------------------------------------------------------
def _compile_total_s() -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return (data[1] if data else 0.0) / 1e9


def worker_plain_loop(rounds: int, steps: int) -> dict:
    ns: dict = {}
    exec(SETUP_MLP, ns)
    exec(LOOP.format(steps=3), ns)  # compile the two graphs
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        exec(LOOP.format(steps=steps), ns)
        times.append(time.perf_counter() - t0)
    return {"times": times}


def _ipython_with_xla_lab():
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    return ip


def worker_lab_loop(rounds: int, steps: int) -> dict:
    ip = _ipython_with_xla_lab()
    assert ip.run_cell(SETUP_MLP).success
    assert ip.run_cell("%%xla -q\n" + LOOP.format(steps=3)).success
    magic, always = [], []
    import xla_lab

    for _ in range(rounds):
        t0 = time.perf_counter()
        assert ip.run_cell("%%xla -q\n" + LOOP.format(steps=steps)).success
        magic.append(time.perf_counter() - t0)
        c = xla_lab.last()
        assert len(c.steps) == steps and c.compiles == 0, "the timed loop was not all cache hits"
        t0 = time.perf_counter()
        assert ip.run_cell("%%xla -q --track-lines always\n" + LOOP.format(steps=steps)).success
        always.append(time.perf_counter() - t0)
    return {"times": magic, "always_times": always}


def worker_compile(lab: bool, dump_only: bool = False) -> dict:
    if dump_only:  # plain torch_xla with only XLA's dump on, as xla_lab sets it: what XLA itself costs
        import tempfile

        os.environ["XLA_FLAGS"] = (f"--xla_dump_to={tempfile.mkdtemp()} --xla_dump_hlo_as_text "
                                   "--xla_dump_hlo_as_proto")
    if lab:
        ip = _ipython_with_xla_lab()
        assert ip.run_cell(SETUP_BERT).success
        before = _compile_total_s()
        t0 = time.perf_counter()
        assert ip.run_cell("%%xla -q\n" + BERT_STEPS).success
        wall = time.perf_counter() - t0
        import xla_lab

        c = xla_lab.last()
        assert c.compiles == 2 and all(s.hlo_after for s in c.steps)
    else:
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        ns: dict = {}
        exec(SETUP_BERT, ns)
        before = _compile_total_s()
        t0 = time.perf_counter()
        exec(BERT_STEPS, ns)
        wall = time.perf_counter() - t0
    return {"compile_s": _compile_total_s() - before, "wall_s": wall}


# --- driver --------------------------------------------------------------------------------------
def run_worker(*args: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XLA_", "PT_XLA_"))}  # a clean process, no inherited capture set-up
    env.setdefault("PJRT_DEVICE", "CPU")
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed loops per process")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="process pairs per comparison")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        kind = args.worker[0]
        if kind == "plain-loop":
            result = worker_plain_loop(args.rounds, args.steps)
        elif kind == "lab-loop":
            result = worker_lab_loop(args.rounds, args.steps)
        else:
            result = worker_compile(lab=(kind == "lab-compile"), dump_only=(kind == "dump-compile"))
        print("RESULT " + json.dumps(result))
        return

    print(f"(a) steady state: {args.steps}-step cached Adam train loop, {args.repeats} process pairs x "
          f"{args.rounds} rounds, interleaved")
    plain, lab, always = [], [], []
    for _ in range(args.repeats):
        plain += run_worker("plain-loop", "--rounds", str(args.rounds), "--steps", str(args.steps))["times"]
        r = run_worker("lab-loop", "--rounds", str(args.rounds), "--steps", str(args.steps))
        lab += r["times"]
        always += r["always_times"]
    mp, ml, ma = statistics.median(plain), statistics.median(lab), statistics.median(always)
    print(f"    plain torch_xla (no xla_lab)             median {mp:.3f} s  ({mp / args.steps * 1e3:.2f} ms/step)")
    print(f"    %%xla (default: lines paused when steady) median {ml:.3f} s  ({ml / args.steps * 1e3:.2f} ms/step)")
    print(f"    %%xla --track-lines always               median {ma:.3f} s  ({ma / args.steps * 1e3:.2f} ms/step)")
    print(f"    a1 ratio %%xla / plain torch_xla         {ml / mp:.3f}   (goal <= 1.03)")
    print(f"    a2 ratio --track-lines always / plain    {ma / mp:.3f}")

    print(f"(b) compile path: first two train steps of a 2-layer TransformerEncoder (d=256, seq 128, "
          f"batch 8), {args.repeats} fresh process pairs, interleaved")
    pc, lc, dc = [], [], []
    for _ in range(args.repeats):
        pc.append(run_worker("plain-compile"))
        lc.append(run_worker("lab-compile"))
        dc.append(run_worker("dump-compile"))
    cp = statistics.median(r["compile_s"] for r in pc)
    cl = statistics.median(r["compile_s"] for r in lc)
    cd = statistics.median(r["compile_s"] for r in dc)
    wp = statistics.median(r["wall_s"] for r in pc)
    wl = statistics.median(r["wall_s"] for r in lc)
    print(f"    XLA CompileTime  without capture {cp:.3f} s   with capture {cl:.3f} s   ratio {cl / cp:.3f}  (goal <= 1.05)")
    print(f"    cell wall time   without capture {wp:.3f} s   with capture {wl:.3f} s   ratio {wl / wp:.3f}")
    print(f"    of which XLA's dump alone (plain torch_xla, dump flags only): CompileTime {cd:.3f} s, "
          f"ratio {cd / cp:.3f} (XLA 2.9's CPU compiler also writes LLVM IR, MLIR and object files when "
          "dumping, with no flag to stop it)")


if __name__ == "__main__":
    main()
