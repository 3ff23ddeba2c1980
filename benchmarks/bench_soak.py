"""Soak: many cell runs in one IPython shell, to check that a workbench left running all day stays
bounded (memory, artifact store, dump directory) and keeps working.

The runs cycle through what a long session does:

* a cached train-loop cell (a small MLP, 5 steps: cache hits),
* a new small graph (a new shape each time: a compile, a new graph in the store),
* every ``--big-every`` runs a new deep elementwise chain of ``--big-nodes``+ IR nodes (XLA compiles a
  chain fast) and, in between, re-runs of the last one (cache hits of a 10,000-node graph),
* failing cells (an error mid-loop, a shape error mid-trace; expected failures, checked to be the
  user's error) and plain cells that sync outside ``%%xla``,
* now and then the views of the last capture (text summary, static HTML report).

It prints the cell runs done, RSS after warm-up and at the end (after ``gc.collect`` and
``malloc_trim``, so the numbers are the heap, not the allocator's free lists), peak RSS, the artifact
store (graphs kept, bytes of text, evictions), the dump directory and xla_lab's work directory on disk,
and the failures (expected / unexpected). Goal: memory flat after warm-up, 0 unexpected failures.

    python benchmarks/bench_soak.py                       # 2,000 cell runs (about 4 minutes here)
    python benchmarks/bench_soak.py --runs 300            # a few minutes
    python benchmarks/bench_soak.py --max-graphs 50 --max-mb 64   # the store's caps (XLA_LAB_MAX_GRAPHS/_MB)
    python benchmarks/bench_soak.py --trace               # where Python memory grows after warm-up
    python benchmarks/bench_soak.py --kernel --runs 600   # in real kernels: panels shown, -q, plain torch_xla
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import io
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
import contextlib
from pathlib import Path

SETUP = """
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
xb, yb = torch.randn(32, 64).to(dev), torch.randint(0, 10, (32,)).to(dev)
seed = torch.ones(16).to(dev)
torch_xla.sync()
"""
TRAIN = """
for _ in range(5):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    torch_xla.sync()
"""
NEW_SMALL = "small = (torch.ones({d}, 8).to(dev) * 2).relu().sum(0)\nsmall_sum = float(small.sum())"
CHAIN = "chain = seed\nfor _ in range({n}):\n    chain = chain * 1.0001 + 0.5\n"  # 3 IR nodes per iteration
FAIL_LOOP = ("acc = seed * 1\nfor i in range(4):\n    acc = acc + 1\n    torch_xla.sync()\n"
             "    if i == 1:\n        raise ValueError('soak: expected failure')\n")
FAIL_TRACE = "t = model[0].weight @ xb  # (128x64) @ (32x64): a shape error while tracing\n"
PLAIN = "plain = (seed * 3).sum()\ntorch_xla.sync()"


def rss_kb(field: str = "VmRSS", path: str = "/proc/self/status") -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def anonymous_mb() -> float:
    """RSS that is not file pages (mapped libraries, touched as code paths are first used): the heap,
    mmapped buffers, XLA's compiled code."""
    return rss_kb("Anonymous", "/proc/self/smaps_rollup") / 1024


def settled_rss_mb() -> float:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_kb() / 1024


def heap_in_use_mb() -> float:
    """Bytes glibc's malloc has handed out and not had back, in all its arenas: XLA's threads
    allocate in arenas of their own, which mallinfo2 leaves out. From malloc_info's totals:
    the arenas' memory less their free chunks, plus the chunks mmapped on their own."""
    import re

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return float("nan")
    with tempfile.NamedTemporaryFile(suffix=".xml") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        if not stream:
            return float("nan")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        xml = Path(out.name).read_text()
    totals = xml[xml.rfind("</heap>"):]  # the lines after the last arena sum up all of them
    value = {f"{tag}:{kind}": int(size) for tag, kind, size in
             re.findall(r'<(total|system) type="(\w+)"(?: count="\d+")? size="(\d+)"', totals)}
    free = value.get("total:fast", 0) + value.get("total:rest", 0)
    return (value.get("system:current", 0) - free + value.get("total:mmap", 0)) / 2**20


def print_growth(middle, end, heap_middle: float, top: int = 10) -> None:
    """Where Python memory grew between two snapshots taken after warm-up (tracemalloc): caches that
    churn (the store, the history) net out, what keeps growing stays."""
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diffs = end.filter_traces(keep).compare_to(middle.filter_traces(keep), "traceback")
    grew = sum(d.size_diff for d in diffs)
    print(f"\nPython memory from the middle of the traced runs to the end: {grew / 2**20:+.2f} MiB "
          f"({sum(d.count_diff for d in diffs):+d} blocks); malloc's heap in use {heap_middle:.1f} -> "
          f"{heap_in_use_mb():.1f} MiB. Largest changes:")
    for d in diffs[:top]:
        print(f"  {d.size_diff / 2**10:+9.1f} KiB {d.count_diff:+7d} blocks")
        for frame in list(d.traceback)[-4:]:
            print(f"      {frame.filename}:{frame.lineno}")


def deep_size(obj) -> int:
    """Bytes of Python objects reachable from ``obj``, not counting graph artifacts (the store's)."""
    from xla_lab.capture.records import GraphArtifacts

    seen, stack, total = set(), [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (GraphArtifacts, type)):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
    return total


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000, help="cell runs (default 2000)")
    ap.add_argument("--big-nodes", type=int, default=10_000, help="IR nodes of the big graphs (default 10000)")
    ap.add_argument("--big-every", type=int, default=100, help="a new big graph every N runs (default 100)")
    ap.add_argument("--warmup", type=float, default=0.25,
                    help="least share of the runs counted as warm-up (0.25); it also lasts until every cache "
                         "is full (the store, its stubs, the history, torch_xla's compiled graphs)")
    ap.add_argument("--max-graphs", type=int, default=40, help="XLA_LAB_MAX_GRAPHS for this run (default 40)")
    ap.add_argument("--max-mb", type=int, default=64, help="XLA_LAB_MAX_GRAPH_MB for this run (default 64)")
    ap.add_argument("--max-history", type=int, default=200,
                    help="XLA_LAB_MAX_HISTORY for this run (default 200): captures kept")
    ap.add_argument("--xla-cache", type=int, default=64,
                    help="XLA_COMPILATION_CACHE_SIZE: torch_xla's own cache of compiled graphs, which holds "
                         "each executable and its HLO (about 20 MiB for a 10,000-node graph) up to this many "
                         "graphs whatever xla_lab does (torch_xla's default is far larger); 0 leaves it alone")
    ap.add_argument("--trace", action="store_true",
                    help="trace Python allocations from warm-up on (tracemalloc) and print where they grew from "
                         "the middle of the traced runs to the end, with glibc's heap in use (all arenas). Slow "
                         "(about 5x), and the checkpoints' RSS then includes tracemalloc's own memory")
    ap.add_argument("--baseline", action="store_true",
                    help="the same cells as plain cells with xla_lab not loaded (what IPython and torch_xla "
                         "alone grow by), to compare with")
    ap.add_argument("--baseline-debug", action="store_true",
                    help="--baseline with XLA's debug output on as xla_lab turns it on (HLO dumps, source "
                         "metadata, torch_xla's sync log; emptied every 20 runs), to tell what those cost "
                         "from what xla_lab's own code holds")
    ap.add_argument("--kernel", action="store_true",
                    help="run the cells in real Jupyter kernels instead, side by side: with panels displayed "
                         "(%%%%xla), quiet (%%%%xla -q) and plain torch_xla (benchmarks/soak_kernel.py)")
    ap.add_argument("--modes", default="panels,quiet,plain",
                    help="with --kernel: which kernels to run, of panels, quiet, plain (default all three)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --kernel: run every kernel this many times and print the spread of the slopes")
    ap.add_argument("--max-panels", type=int, default=200,
                    help="XLA_LAB_MAX_PANELS for --kernel (default 200): live panel widgets kept")
    args = ap.parse_args()
    args.baseline = args.baseline or args.baseline_debug
    if args.kernel:
        import soak_kernel

        big_n = -(-args.big_nodes // 3) + 1
        args.modes = [m for m in args.modes.split(",") if m]
        unknown = set(args.modes) - set(soak_kernel.MODES)
        if unknown:
            ap.error(f"unknown --modes {', '.join(sorted(unknown))}; use {', '.join(soak_kernel.MODES)}")
        return soak_kernel.main(args, lambda: cells(args.runs, args.big_every, big_n))

    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ["XLA_LAB_MAX_GRAPHS"] = str(args.max_graphs)
    os.environ["XLA_LAB_MAX_GRAPH_MB"] = str(args.max_mb)
    os.environ["XLA_LAB_MAX_HISTORY"] = str(args.max_history)
    if args.xla_cache:
        os.environ["XLA_COMPILATION_CACHE_SIZE"] = str(args.xla_cache)
    from IPython.testing.globalipapp import start_ipython

    if args.baseline_debug:
        args.debug_out = debug_out = Path(tempfile.mkdtemp(prefix="xla_lab_soak_"))
        os.environ.update(XLA_FLAGS=f"--xla_dump_to={debug_out / 'dump'} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto",
                          XLA_IR_DEBUG="1", XLA_HLO_DEBUG="1", PT_XLA_DEBUG_LEVEL="2",
                          PT_XLA_DEBUG_FILE=str(debug_out / "sync.log"))
    ip = start_ipython()
    if args.baseline:
        try:
            return baseline(ip, args)
        finally:
            if args.baseline_debug:
                shutil.rmtree(args.debug_out, ignore_errors=True)
    ip.run_line_magic("load_ext", "xla_lab")
    import xla_lab
    from xla_lab import session as session_mod
    from xla_lab.view.static_html import report_html
    from xla_lab.view.report import to_text

    assert ip.run_cell(SETUP).success
    session = session_mod.current()
    iterations = -(-args.big_nodes // 3) + 1
    warm_at = max(1, int(args.runs * args.warmup))
    counts = {"cache-hit loop": 0, "new small graph": 0, "new big graph": 0, "big graph hit": 0,
              "expected failure": 0, "plain cell": 0}
    unexpected: list[str] = []
    big_nodes_seen = 0
    big_n = iterations
    rss_warm = filled_at = None
    memory = MemoryLog()
    t0 = time.time()
    sink = io.StringIO()

    def cell(body: str, kind: str, expect=None, xla: bool = True):
        nonlocal big_nodes_seen
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            result = ip.run_cell(("%%xla -q\n" + body) if xla else body)
        sink.seek(0)
        sink.truncate()
        counts[kind] += 1
        err = result.error_in_exec or result.error_before_exec
        if expect is None and err is not None:
            unexpected.append(f"run {i} ({kind}): {type(err).__name__}: {err}")
        elif expect is not None and not (isinstance(err, expect[0]) and expect[1] in str(err)):
            unexpected.append(f"run {i} ({kind}): expected {expect[0].__name__}, got {err!r}")
        if xla:
            c = xla_lab.last()
            if kind.startswith(("new big", "big")) and c.steps:
                big_nodes_seen = max(big_nodes_seen, c.steps[-1].ir_nodes or 0)
            if c.error and expect is None:
                unexpected.append(f"run {i} ({kind}): capture error {c.error}")

    for i, kind, body, expect, xla in cells(args.runs, args.big_every, big_n):
        cell(body, kind, expect, xla)
        if i % 50 == 0:
            try:  # the views of a capture that may hold evicted graphs
                c = xla_lab.last()
                to_text(c)
                report_html([c])
            except Exception as exc:  # noqa: BLE001
                unexpected.append(f"run {i}: rendering failed: {type(exc).__name__}: {exc}")
        # Warm-up ends once every cache is full: the store's graphs, the history's captures and
        # torch_xla's compiled graphs (and at least --warmup of the runs).
        if filled_at is None and i + 1 >= warm_at and caches_full(session, args):
            filled_at = i + 1
            if args.trace:
                tracemalloc.start(8)
                trace_middle = (i + 1 + args.runs) // 2
        if args.trace and tracemalloc.is_tracing() and i + 1 == trace_middle:
            gc.collect()
            middle, heap_middle = tracemalloc.take_snapshot(), heap_in_use_mb()
        if (i + 1) % max(1, args.runs // 10) == 0 or i + 1 == args.runs:
            store = session.store
            rss, anon, heap = memory.take(i + 1)
            print(f"  {i + 1:>6} runs {time.time() - t0:7.0f} s  rss {rss:7.1f} MiB  "
                  f"anon {anon:7.1f}  heap {heap:7.1f} MiB  "
                  f"graphs kept {len(store.kept()):>4}  store {store.size_bytes() / 2**20:6.1f} MiB  "
                  f"dump dir {dir_bytes(session.runtime.dump_dir)} B  history {len(session.history)}", flush=True)
            if filled_at is not None and rss_warm is None:  # (checkpoints are all at the same point of
                rss_warm, warm_at = rss, i + 1  # the cells' cycle: RSS comparable)

    store = session.store
    if args.trace and tracemalloc.is_tracing():
        gc.collect()
        print_growth(middle, tracemalloc.take_snapshot(), heap_middle)
        tracemalloc.stop()  # (its own memory is in the checkpoints' RSS, not in the numbers below)
    rss_end = settled_rss_mb()
    import torch_xla

    xla_cached = torch_xla._XLAC._xla_get_num_cached_compilation_graph()
    kept, kept_bytes, stubs, history = len(store.kept()), store.size_bytes(), len(store), len(session.history)
    history_bytes = deep_size(session.history)
    # What xla_lab itself holds: the RSS released by dropping its history, then its stored graphs.
    session.history.clear()
    rss_no_history = settled_rss_mb()
    with contextlib.redirect_stdout(sink):
        ip.run_line_magic("xla", "clear")
    rss_cleared = settled_rss_mb()
    if rss_warm is None:
        rss_warm, warm_at = rss_end, args.runs + 1
    growth, anon_growth, heap_growth = memory.growth(warm_at)
    print()
    print(f"xla_lab soak: {args.runs} cell runs in {time.time() - t0:.0f} s "
          f"(caps: {store.max_graphs} graphs, {store.max_bytes >> 20} MiB of text; "
          f"XLA_COMPILATION_CACHE_SIZE={os.environ.get('XLA_COMPILATION_CACHE_SIZE', 'default')})")
    print("  cell runs done        " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"  largest graph         {big_nodes_seen} IR nodes")
    print(f"  peak RSS              {rss_kb('VmHWM') / 1024:.1f} MiB")
    print(f"  RSS after warm-up     {rss_warm:.1f} MiB (run {warm_at}, the first checkpoint after run {filled_at}, "
          "where the store, its stubs, the history and XLA's cache were full)"
          if warm_at <= args.runs else "  RSS after warm-up     (not reached: the caches never filled; run more)")
    print(f"  RSS at the end        {rss_end:.1f} MiB ({rss_end - rss_warm:+.1f} MiB; "
          f"{growth:+.2f} MiB per 1000 runs after warm-up)")
    print(f"    of which            anonymous {anon_growth:+.2f}, malloc's heap in use {heap_growth:+.2f} MiB "
          "per 1000 runs")
    print(f"  artifact store        {kept} graphs with text, {kept_bytes / 2**20:.1f} MiB of text; "
          f"{store.evictions} evicted, {stubs - kept} stubs of evicted graphs kept")
    print(f"  xla_lab's share       {rss_end - rss_cleared:.1f} MiB of RSS released at the end by dropping its "
          f"history ({rss_end - rss_no_history:.1f} MiB) and stored graphs ({rss_no_history - rss_cleared:.1f} MiB); "
          f"the rest is IPython, torch_xla, XLA's {xla_cached} cached executables, the model")
    print(f"  dump dir              {dir_bytes(session.runtime.dump_dir)} bytes "
          f"(xla_lab work dir {dir_bytes(session.runtime.workdir)} bytes)")
    print(f"  history               {history} captures, {history_bytes / 2**20:.1f} MiB of Python objects "
          f"(graph artifacts not counted: they are the store's)")
    print(f"  failures              {counts['expected failure']} expected (the user's errors), "
          f"{len(unexpected)} unexpected")
    for line in unexpected[:20]:
        print("    " + line)
    return 1 if unexpected else 0


class MemoryLog:
    """RSS (settled), anonymous RSS and malloc's heap in use at each checkpoint, and how fast each
    grew after warm-up: the same readings for the soak and its baselines."""

    def __init__(self):
        self.points: list[tuple[int, float, float, float]] = []  # (run, rss, anonymous, heap in use)

    def take(self, run: int) -> tuple[float, float, float]:
        self.points.append((run, settled_rss_mb(), anonymous_mb(), heap_in_use_mb()))
        return self.points[-1][1:]

    def growth(self, warm_at: int) -> tuple[float, float, float]:
        """MiB per 1000 runs of RSS, anonymous RSS and heap in use, from run ``warm_at`` on."""
        after = [p for p in self.points if p[0] >= warm_at]
        return tuple(slope([(p[0], p[k]) for p in after]) for k in (1, 2, 3))


def slope(points: list[tuple[int, float]]) -> float:
    """MiB per 1000 runs from the first to the last (run, RSS) point."""
    if len(points) < 2:
        return 0.0
    return (points[-1][1] - points[0][1]) / max(1, points[-1][0] - points[0][0]) * 1000


def caches_full(session, args) -> bool:
    """The store (graphs with text, and stubs of evicted ones), the history and torch_xla's cache of
    compiled graphs hold as much as their caps allow."""
    store, history_cap = session.store, session.max_history
    kept = len(store.kept())
    return ((not store.max_graphs or kept >= store.max_graphs)
            and (store.max_stubs is None or len(store) - kept >= store.max_stubs)
            and (not history_cap or len(session.history) >= history_cap) and xla_cache_full(args))


def xla_cache_full(args) -> bool:
    import torch_xla

    return not args.xla_cache or torch_xla._XLAC._xla_get_num_cached_compilation_graph() >= args.xla_cache


def cells(runs: int, big_every: int, big_n: int):
    """The soak's sequence of (kind, body, expected error or None, as %%xla?)."""
    for i in range(runs):
        slot = i % 20
        if i % big_every == 0:
            big_n += 1  # a graph XLA has not seen
            yield i, "new big graph", CHAIN.format(n=big_n), None, True
        elif i % 10 == 5:
            yield i, "big graph hit", CHAIN.format(n=big_n), None, True
        elif slot == 7:
            yield i, "expected failure", FAIL_LOOP, (ValueError, "soak: expected failure"), True
        elif slot == 13:
            yield i, "expected failure", FAIL_TRACE, (RuntimeError, "matrix-multiply"), True
        elif slot in (3, 11, 17):
            yield i, "new small graph", NEW_SMALL.format(d=16 + i), None, True
        elif slot in (9, 19):
            yield i, "plain cell", PLAIN, None, False
        else:
            yield i, "cache-hit loop", TRAIN, None, True


def baseline(ip, args) -> int:
    """Plain cells (a sync at the end, as %%xla would), no xla_lab: RSS after warm-up and at the end."""
    assert ip.run_cell(SETUP).success
    warm_at = max(1, int(args.runs * args.warmup))
    sink = io.StringIO()
    unexpected = 0
    rss_warm = filled_at = None
    memory = MemoryLog()
    t0 = time.time()
    for i, kind, body, expect, _ in cells(args.runs, args.big_every, -(-args.big_nodes // 3) + 1):
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            result = ip.run_cell(body + "\ntorch_xla.sync()" if expect is None else body)
            if expect is not None:
                ip.run_cell("torch_xla.sync()")
        sink.seek(0)
        sink.truncate()
        unexpected += (result.error_in_exec is None) != (expect is None)
        if args.baseline_debug and i % 20 == 19:  # as xla_lab empties them after every cell
            log = args.debug_out / "sync.log"
            if log.exists():
                log.write_text("")
            shutil.rmtree(args.debug_out / "dump", ignore_errors=True)
        if filled_at is None and i + 1 >= warm_at and xla_cache_full(args):
            filled_at = i + 1
        if (i + 1) % max(1, args.runs // 10) == 0 or i + 1 == args.runs:
            rss, anon, heap = memory.take(i + 1)
            print(f"  {i + 1:>6} runs {time.time() - t0:7.0f} s  rss {rss:7.1f} MiB  "
                  f"anon {anon:7.1f}  heap {heap:7.1f} MiB", flush=True)
            if filled_at is not None and rss_warm is None:
                rss_warm, warm_at = rss, i + 1
    rss_end = settled_rss_mb()
    if rss_warm is None:
        rss_warm, warm_at = rss_end, args.runs + 1
    growth, anon_growth, heap_growth = memory.growth(warm_at)
    print(f"\nbaseline (no xla_lab{', XLA debug output on' if args.baseline_debug else ''}): {args.runs} cell runs in "
          f"{time.time() - t0:.0f} s; peak RSS {rss_kb('VmHWM') / 1024:.1f} MiB; RSS after warm-up {rss_warm:.1f} MiB "
          f"(run {warm_at}), at the end {rss_end:.1f} MiB ({rss_end - rss_warm:+.1f} MiB; {growth:+.2f} MiB per "
          f"1000 runs after warm-up; of which anonymous {anon_growth:+.2f}, malloc's heap in use {heap_growth:+.2f}); "
          f"{unexpected} unexpected results")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
