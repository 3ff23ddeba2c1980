"""``bench_soak.py --kernel``: the soak's cells in real Jupyter kernels (ipykernel, driven with
jupyter_client), as a notebook runs them, side by side in one run:

* ``panels``: ``%%xla`` cells, each displaying its panel (an anywidget with an open comm: what a
  notebook user gets);
* ``quiet``: the same cells as ``%%xla -q`` (nothing displayed);
* ``plain``: the same work without xla_lab (plain cells, a sync at the end).

Each kernel's memory is read inside it at checkpoints (after ``gc.collect`` and ``malloc_trim``),
with the soak's own readers. Warm-up lasts until every cache is full (the store, its stubs, the
history, torch_xla's compiled graphs and, with panels, the live panels kept). At the end the
``%%xla`` kernels run ``%xla clear`` and say how much memory that released. Goal: RSS flat after
warm-up in all three, the panels' and quiet kernels' slopes within the noise of the plain one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

from kernels import Kernel  # noqa: E402  (tests/kernels.py: a real kernel, its messages kept per cell)

MODES = ("panels", "quiet", "plain")

HELPERS = f"""
import sys as _sys
_sys.path.insert(0, {str(BENCH)!r})
import bench_soak as _soak
from types import SimpleNamespace as _NS

def _soak_reading():
    return [_soak.settled_rss_mb(), _soak.anonymous_mb(), _soak.heap_in_use_mb()]

def _soak_full(xla_cache, max_panels):
    import torch_xla
    args = _NS(xla_cache=xla_cache)
    try:
        from xla_lab import session
    except ImportError:
        return _soak.xla_cache_full(args)
    s = session.current()
    if s is None:
        return _soak.xla_cache_full(args)
    return _soak.caches_full(s, args) and (max_panels is None or len(s.panels) >= max_panels)
"""


def run_mode(mode: str, args, cells) -> dict:
    env = {"XLA_LAB_MAX_GRAPHS": str(args.max_graphs), "XLA_LAB_MAX_GRAPH_MB": str(args.max_mb),
           "XLA_LAB_MAX_HISTORY": str(args.max_history), "XLA_LAB_MAX_PANELS": str(args.max_panels)}
    if args.xla_cache:
        env["XLA_COMPILATION_CACHE_SIZE"] = str(args.xla_cache)
    xla = mode != "plain"
    result = {"mode": mode, "points": [], "unexpected": [], "warm_at": None, "cleared": None}
    t0 = time.time()
    with Kernel(env=env, keep=False) as k:
        if xla:
            k.run("%load_ext xla_lab")
        k.run(HELPERS)
        from bench_soak import SETUP

        k.run(SETUP)
        warm_at = max(1, int(args.runs * args.warmup))
        filled_at = None
        panels_cap = args.max_panels if mode == "panels" else None
        for i, kind, body, expect, is_xla in cells:
            if not xla:
                code = body + "\ntorch_xla.sync()" if expect is None else body
            elif is_xla:
                code = ("%%xla\n" if mode == "panels" else "%%xla -q\n") + body
            else:
                code = body
            ex = k.run(code, timeout=600, ok=False)
            if not xla and expect is not None:
                k.run("torch_xla.sync()", ok=False)
            failed = ex.status != "ok"
            if expect is None and failed:
                result["unexpected"].append(f"run {i} ({kind}): {ex.ename}: {ex.evalue[:200]}")
            elif expect is not None and not (ex.ename == expect[0].__name__ and expect[1] in ex.evalue):
                result["unexpected"].append(f"run {i} ({kind}): expected {expect[0].__name__}, got {ex.ename}")
            if xla and i % 50 == 0:  # the views of a capture that may hold evicted graphs
                # (assigned, not a cell's value: IPython would keep each page in Out)
                view = k.run("import xla_lab as _x\nfrom xla_lab.view.report import to_text as _t\n"
                             "from xla_lab.view.static_html import report_html as _r\n"
                             "_v = (_t(_x.last()), _r([_x.last()]))\ndel _v", ok=False)
                if view.status != "ok":
                    result["unexpected"].append(f"run {i}: rendering failed: {view.ename}: {view.evalue[:200]}")
            if filled_at is None and i + 1 >= warm_at and k.value(f"_soak_full({args.xla_cache}, {panels_cap})"):
                filled_at = i + 1
            if (i + 1) % max(1, args.runs // 10) == 0 or i + 1 == args.runs:
                rss, anon, heap = k.value("_soak_reading()")
                result["points"].append((i + 1, rss, anon, heap))
                print(f"  [{mode:>6}] {i + 1:>6} runs {time.time() - t0:7.0f} s  rss {rss:7.1f} MiB  anon {anon:7.1f}  "
                      f"heap {heap:7.1f} MiB", flush=True)
                if filled_at is not None and result["warm_at"] is None:
                    result["warm_at"] = i + 1
        result["peak"] = k.rss_kb("VmHWM") / 1024
        result["end"] = k.value("_soak_reading()")[0]
        if xla:
            k.run("%xla clear")
            result["cleared"] = k.value("_soak_reading()")[0]
            if mode == "panels":
                result["panels"] = k.value("len(__import__('xla_lab.session', fromlist=['x']).current().panels)")
    result["seconds"] = time.time() - t0
    return result


def growth(result: dict) -> float:
    """MiB per 1000 runs from the first checkpoint after warm-up to the last."""
    warm = result["warm_at"]
    after = [p for p in result["points"] if warm is not None and p[0] >= warm]
    if len(after) < 2:
        return float("nan")
    return (after[-1][1] - after[0][1]) / max(1, after[-1][0] - after[0][0]) * 1000


def main(args, cells_factory) -> int:
    rounds = []
    for r in range(args.repeat):
        results = []
        for mode in args.modes:
            print(f"\n{mode}: {args.runs} cell runs in a real kernel (round {r + 1} of {args.repeat})", flush=True)
            results.append(run_mode(mode, args, cells_factory()))
        report(args, results)
        rounds.append(results)
    if len(rounds) > 1:
        print(f"\nRSS slope after warm-up, MiB per 1000 runs, over {len(rounds)} rounds (goal: flat, the xla_lab "
              "kernels within the plain kernel's noise):")
        for i, mode in enumerate(args.modes):
            slopes = [growth(results[i]) for results in rounds]
            cleared = [results[i]["cleared"] - results[i]["end"] for results in rounds if results[i]["cleared"] is not None]
            extra = (f"; %xla clear released {min(-c for c in cleared):.1f} to {max(-c for c in cleared):.1f} MiB"
                     if cleared else "")
            print(f"  {mode:<8} " + "  ".join(f"{s:+.2f}" for s in slopes) +
                  f"   (spread {min(slopes):+.2f} .. {max(slopes):+.2f}){extra}")
    return 1 if any(r["unexpected"] for results in rounds for r in results) else 0


def report(args, results) -> None:
    print(f"\nxla_lab soak in real kernels: {args.runs} cell runs each (caps: {args.max_graphs} graphs, "
          f"{args.max_mb} MiB of text, {args.max_history} captures, {args.max_panels} live panels; "
          f"XLA_COMPILATION_CACHE_SIZE={args.xla_cache or 'default'})")
    print(f"  {'kernel':<8} {'seconds':>8} {'peak RSS':>9} {'after warm-up':>14} {'end':>9} "
          f"{'MiB / 1000 runs':>16} {'after %xla clear':>17}  unexpected")
    for r in results:
        warm = next((p for p in r["points"] if r["warm_at"] is not None and p[0] == r["warm_at"]), None)
        warm_text = f"{warm[1]:.1f} (run {warm[0]})" if warm else "not reached"
        cleared = "-" if r["cleared"] is None else f"{r['cleared']:.1f} ({r['cleared'] - r['end']:+.1f})"
        print(f"  {r['mode']:<8} {r['seconds']:>8.0f} {r['peak']:>9.1f} {warm_text:>14} {r['end']:>9.1f} "
              f"{growth(r):>+16.2f} {cleared:>17}  {len(r['unexpected'])}")
        for line in r["unexpected"][:10]:
            print("    " + line)
    for r in results:
        if r["mode"] == "panels":
            print(f"  live panel widgets at the end: {r.get('panels')} (XLA_LAB_MAX_PANELS={args.max_panels})")
