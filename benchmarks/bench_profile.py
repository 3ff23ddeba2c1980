"""What measured time (%%xla --profile) costs, side by side in one run.

(a) A cached 200-step Adam loop: ``%%xla -q --profile`` (the session records the first 20 steps) vs
    ``%%xla -q``, in one live process, turn by turn (the order rotates each round); the median of the
    rounds' ratios with its spread.                                         goal ratio <= 1.25
    The same with ``--profile-steps all`` (every step recorded), for what the window saves.
(b) Unprofiled cells after profiling was used vs in a process where it never was: two live processes
    (one ran a profiled cell during set-up), the same unprofiled loop taking turns across them; the
    median ratio with its spread, wall and CPU time.                         goal ratio <= 1.01
(c) The join of a 12-layer transformer train step's profile to its capture: reading the XSpace,
    joining it to the steps and kernels, and the per-kernel / per-line breakdown the views show;
    median of 5 over the real profile of 2 steps.                           goal <= 0.5 s

    python benchmarks/bench_profile.py [--rounds 6] [--steps 200] [--layers 12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_capture_overhead import LOOP, SETUP_BERT, SETUP_MLP, LiveWorker, _env, _shell, spread  # noqa: E402

BERT_STEPS = """
for _ in range(2):
    opt.zero_grad()
    logits = head(model(tokens).mean(1))
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    opt.step()
    torch_xla.sync()
"""


def worker(kind: str, steps: int) -> None:
    """kind: "alternate" (answers plain and profiled loop times), "never" / "used" (unprofiled loops;
    "used" ran one profiled cell first)."""
    ip = _shell(True)
    assert ip.run_cell(SETUP_MLP).success
    assert ip.run_cell("%%xla -q\n" + LOOP.format(steps=3)).success
    if kind in ("alternate", "used"):
        assert ip.run_cell("%%xla -q --profile\n" + LOOP.format(steps=3)).success
        import xla_lab

        assert xla_lab.last().profile is not None
    print("READY", flush=True)
    for line in sys.stdin:
        options = {"profile": "-q --profile", "profile-all": "-q --profile --profile-steps all"}.get(line.strip(), "-q")
        t0, c0 = time.perf_counter(), time.process_time()
        assert ip.run_cell(f"%%xla {options}\n" + LOOP.format(steps=steps)).success
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        import xla_lab

        c = xla_lab.last()
        assert c.compiles == 0 and len(c.steps) == steps and (c.profile is not None) == ("profile" in options)
        print("TIMES " + json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def worker_join(layers: int) -> None:
    ip = _shell(True)
    assert ip.run_cell(SETUP_BERT.format(layers=layers)).success
    assert ip.run_cell("%%xla -q\n" + BERT_STEPS).success  # compile
    assert ip.run_cell("%%xla -q --profile\n" + BERT_STEPS).success
    import copy

    import xla_lab
    from xla_lab import session as session_mod
    from xla_lab.profile import breakdown
    from xla_lab.profile.attach import attach_profile

    capture = xla_lab.last()
    raw = session_mod.get().raw_profile(capture)
    kernels = sum(len(g["kernels"]) for g in capture.profile["graphs"].values())
    times = []
    for _ in range(5):
        again = copy.copy(capture)
        again.notes = []
        t0 = time.perf_counter()
        attach_profile(again, raw)
        rows = breakdown.kernel_times(again)
        breakdown.line_times(again, kernels=rows)
        breakdown.line_times(again, model=True, kernels=rows)
        breakdown.op_times(again, rows)
        times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({"times": times, "bytes": len(raw), "kernels": kernels,
                                  "events": len(capture.profile["timeline"]), "steps": len(capture.steps)}), flush=True)


def ratios(pairs: list[tuple[float, float]]) -> list[float]:
    return [b / a for a, b in pairs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--layers", type=int, default=12)
    args = ap.parse_args()
    if args.worker == "join":
        return worker_join(args.layers)
    if args.worker:
        return worker(args.worker, args.steps)

    print(f"(a) cached {args.steps}-step Adam loop, %%xla --profile vs %%xla, one process, {args.rounds} rounds")
    live = LiveWorker("alternate", args.steps, script=__file__)
    kinds = ("plain", "profile", "profile-all")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        order = kinds[r % 3:] + kinds[:r % 3]  # who goes first rotates, so drift hits each alike
        for what in order:  # (the worker's loop: unprofiled, the default window, every step)
            runs[what].append(live.run(what))
    live.close()
    ms = lambda k: statistics.median(x["wall"] for x in runs[k]) * 1e3 / args.steps  # noqa: E731
    print(f"    plain {ms('plain'):.2f} ms/step, profiled {ms('profile'):.2f} ms/step, "
          f"profiled every step {ms('profile-all'):.2f} ms/step")
    for kind, label, goal in (("profile", "--profile (first 20 steps)", "   goal <= 1.25"),
                              ("profile-all", "--profile-steps all       ", "")):
        wall = ratios([(a["wall"], b["wall"]) for a, b in zip(runs["plain"], runs[kind])])
        cpu = ratios([(a["cpu"], b["cpu"]) for a, b in zip(runs["plain"], runs[kind])])
        print(f"    {label} ratio (wall) {statistics.median(wall):.3f}  {spread(wall)}{goal}")
        print(f"    {' ' * len(label)} ratio (CPU)  {statistics.median(cpu):.3f}  {spread(cpu)}")

    print(f"(b) unprofiled loops after a profiled cell vs in a process that never profiled, {args.rounds} rounds")
    never, used = (LiveWorker(kind, args.steps, script=__file__) for kind in ("never", "used"))
    pairs, cpu_pairs = [], []
    for r in range(args.rounds):
        first, second = (never, used) if r % 2 == 0 else (used, never)
        a, b = first.run(), second.run()
        got_never, got_used = (a, b) if first is never else (b, a)
        pairs.append((got_never["wall"], got_used["wall"]))
        cpu_pairs.append((got_never["cpu"], got_used["cpu"]))
    never.close()
    used.close()
    wall = ratios(pairs)
    print(f"    ratio (wall) {statistics.median(wall):.3f}  {spread(wall)}   goal <= 1.01")
    print(f"    ratio (CPU)  {statistics.median(ratios(cpu_pairs)):.3f}  {spread(ratios(cpu_pairs))}")

    print(f"(c) joining a {args.layers}-layer transformer step's profile (2 steps) to its capture")
    proc = subprocess.run([sys.executable, __file__, "--worker", "join", "--layers", str(args.layers)],
                          capture_output=True, text=True, env=_env(), timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    res = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    print(f"    {res['bytes'] / 1e6:.1f} MB XSpace, {res['events']} timeline events, {res['kernels']} kernels, "
          f"{res['steps']} steps: join {statistics.median(res['times']):.3f} s (min {min(res['times']):.3f}, "
          f"max {max(res['times']):.3f})   goal <= 0.5 s")


if __name__ == "__main__":
    main()
