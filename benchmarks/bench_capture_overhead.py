"""What capture costs, measured side by side in one run (this machine is shared and noisy), in both
capture modes (README: "Capture modes").

(a) Steady state: cached loops under ``%%xla`` in full capture and in lean capture vs the same loops in
    plain torch_xla (no xla_lab at all), each in an IPython shell as a notebook runs them. A group of
    three live processes (plain, full, lean), set up and warmed once, runs them loop by loop: in the twin layout
    (below) plain's beside full's and then beside lean's; taking turns (``--layout turns``), each loop
    runs in the three processes one after another (in the six orders in turn), so a ``%%xla``
    loop is compared with a plain one at most one turn away (this machine's speed drifts: two runs of
    one loop in one process differ by about 7-10% when 2 s apart, 8-14% when 6 s apart); five groups,
    so one process's luck (its layout in memory) does not decide. Each ratio is the median of the
    adjacent loops' ratios, printed with their middle half and spread, and the same in CPU time (which
    the machine's other tenants do not take). Two loops: a 200-step Adam loop at about 9 ms a step
    (goal: full <= 1.03, lean <= 1.02) and a 600-step SGD-momentum loop at about 3 ms a step (goal:
    lean <= 1.02; full printed beside it). Their MLPs get as many hidden blocks as make those step
    times in plain torch_xla on this machine (measured first, at two sizes; ``--loop-ms``,
    ``--short-ms``), so a faster machine does not double the share of a sync's fixed cost
    (``--loop-blocks``, ``--short-blocks`` fix them; 1 and 2 are the models of the runs before
    2026-12-04).
      a2. full capture with ``--track-lines always`` (source lines recorded on every traced op instead
          of pausing once the loop hits the cache: what the default saves)
      a3. the fixed cost per sync: a one-op graph synced 1000 times a turn, the same way
      a4. xla_lab's own cost without process-to-process luck: in one full and one lean process, the short
          loop as a ``%%xla`` cell and as a plain cell of the same kernel taking turns, the capture's
          analysis after the cell counted in its turn (``--own-rounds 0`` skips it)
Layout (``--layout``): ``twin`` (the default) runs each comparison side by side: plain torch_xla's process and
    the mode's, each held to one of the machine's two cores (set before torch_xla starts, so XLA sizes its
    thread pools for one core), run their loop, or start their compiling cell, at the same moment, and swap
    cores round by round; in (a) the third process of a group waits meanwhile, and in (b) lean is paired
    with plain in every round, full (and ``--explain``'s kinds) in the first ``--twin-others``. Taking turns
    on both cores (``--layout turns``, every run up to AT) compares loops a few seconds apart, and this
    shared host's speed moves by 7-13% in that time; side by side both meet the same moment. Each process
    has one core, so steps and compiles are slower, and the loops are sized on one core.
(b) Compile path: the first two train steps (two compiles) of a 2-layer TransformerEncoder in fresh
    processes, interleaved (who goes first turns round): plain torch_xla, ``%%xla`` in full and in lean
    capture (``--explain`` adds plain torch_xla with only XLA's dump flags, with only the source-line
    metadata xla_lab turns on, or under a profiler session open over the cell as lean's compile window
    is, to show where the cost is; ``--explain-big`` the same for the 12-layer model). XLA's
    CompileTime, the wall time of the (quiet) cell and its CPU time (which the machine's other tenants
    do not take), medians with the spread of the per-round ratios (goal: lean <= 1.03); then the time
    the capture's analysis took after the cell (``Session.defer``: the next execution or view waits for
    it). The same for a 12-layer model's compile (plain, full and lean; ``--big-layers 0`` skips it).
``--null`` measures the noise alone: plain torch_xla in every place (the processes in full's and lean's
places are plain too; (a4) and ``--explain`` skipped), the same rounds in the same order, so each ratio
is what this machine gives a mode that costs nothing; ``pool_overhead.py`` pools such runs apart and
says how often they meet each goal.

    python benchmarks/bench_capture_overhead.py [--pairs 5] [--rounds 6] [--always-rounds 2] [--steps 200]
                                                [--loop-ms 9] [--short-ms 3] [--loop-blocks N] [--short-blocks N]
                                                [--repeats 6] [--big-layers 12] [--big-repeats 3]
                                                [--own-rounds 8] [--skip-steady] [--explain] [--explain-big]
                                                [--null] [--layout twin|turns] [--twin-others 2] [--json OUT]

``--json OUT`` also saves every round's raw times, so runs can be pooled (``pool_overhead.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

from pool_overhead import (COMPILE_GOAL, LOOP_GOALS, compile_ratios, inherited_pjrt, pjrt_text,  # (one place)
                           plain_beside, steady_ratios)

# The cached loops' models, sized by their hidden blocks: the issue's goals are for steps of about 9 ms (the
# Adam loop) and 3 ms (the short loop), where a sync's fixed cost is a given share of the step. With the
# blocks of the first measurements (LOOP_BLOCKS, SHORT_BLOCKS) the steps took that long on the machine of
# 2026-12-01..03 and half as long on a faster one; the driver sizes them to the step times asked for
# (``--loop-ms``, ``--short-ms``) unless told the blocks. More blocks trace and run more ops alike, so the
# step keeps the make-up of tracing and execution it had.
LOOP_BLOCKS, SHORT_BLOCKS = 1, 2
MLP_TEMPLATE = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
torch.manual_seed(0)
dev = torch_xla.device()
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
    *[m for _ in range({blocks}) for m in (torch.nn.Linear(512, 512), torch.nn.GELU())],
    torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
xb = torch.randn(64, 256).to(dev)
yb = torch.randint(0, 10, (64,)).to(dev)
tiny = torch.zeros(4, device=dev)
"""
SETUP_MLP = MLP_TEMPLATE.format(blocks=LOOP_BLOCKS)  # (as first measured; bench_profile.py times it too)

LOOP = """
for _ in range({steps}):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""

SHORT_TEMPLATE = """
short_model = torch.nn.Sequential(
    torch.nn.Linear(128, 256), torch.nn.ReLU(),
    *[m for _ in range({blocks}) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())],
    torch.nn.Linear(256, 10)).to(dev)
short_opt = torch.optim.SGD(short_model.parameters(), lr=1e-2, momentum=0.9)
short_x = torch.randn(32, 128).to(dev)
short_y = torch.randint(0, 10, (32,)).to(dev)
"""


def loops_setup(loop_blocks: int, short_blocks: int) -> str:
    """The set-up cell of the cached loops' models (both, as every loop worker runs them)."""
    return MLP_TEMPLATE.format(blocks=loop_blocks) + SHORT_TEMPLATE.format(blocks=short_blocks)

SHORT_LOOP = """
for _ in range({steps}):
    short_opt.zero_grad()
    torch.nn.functional.cross_entropy(short_model(short_x), short_y).backward()
    short_opt.step()
    torch_xla.sync()
xm.wait_device_ops()
"""

TINY_LOOP = """
for _ in range({steps}):
    tiny = tiny + 1
    torch_xla.sync()
xm.wait_device_ops()
"""

SETUP_BERT = """
import torch, torch_xla
import torch_xla.core.xla_model as xm
torch.manual_seed(0)
dev = torch_xla.device()
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers={layers})).to(dev)
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
TINY_SYNCS = 1000
LOOP_STEPS = 200  # the Adam loop's steps a turn (``--steps``)
SHORT_STEPS = 600  # (about 3 ms a step here: as long a turn as the 200-step loop's)


# --- workers (run in child processes) ------------------------------------------------------------
def _compile_total_s() -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return (data[1] if data else 0.0) / 1e9


def _shell(mode: str):
    """An IPython shell: plain torch_xla (``plain``), or xla_lab in ``full`` or ``lean`` capture."""
    from IPython.testing.globalipapp import start_ipython

    if mode == "lean":
        os.environ["XLA_LAB_CAPTURE"] = "lean"
    ip = start_ipython()
    if mode != "plain":
        ip.run_line_magic("load_ext", "xla_lab")
    return ip


def worker_loop(mode: str, steps: int, blocks: tuple[int, int]) -> None:
    """Set up and warm up, then run the timed loop named by each line read from stdin (``loop``,
    ``short``, ``always``: the Adam loop with ``--track-lines always``, ``tiny``), answering its wall and
    CPU times (CPU time does not count what the machine's other tenants take)."""
    lab = mode != "plain"
    ip = _shell(mode)
    prefix = "%%xla -q\n" if lab else ""
    assert ip.run_cell(loops_setup(*blocks)).success
    cells = {"loop": (LOOP, steps), "short": (SHORT_LOOP, SHORT_STEPS), "always": (LOOP, steps),
             "tiny": (TINY_LOOP, TINY_SYNCS)}
    for key in ("loop", "short", "tiny"):  # ("always" is the Adam loop's cell again)
        cell, n = cells[key]
        assert ip.run_cell(prefix + cell.format(steps=3)).success  # (compiles)
        # once untimed as it will be timed: the timed turns are then re-runs of a cell whose last run
        # compiled nothing, which start lean's compile window closed, as a notebook's re-run does (the
        # run after a compile opens it until the loop is steady: a profiler session, tens of ms to end)
        assert ip.run_cell(prefix + cell.format(steps=n)).success
    print("READY", flush=True)
    for line in sys.stdin:
        key, _, label = line.strip().partition(":")  # (``loop:always``: the Adam loop, answered as "always")
        cell, n = cells[key]
        head = "%%xla -q --track-lines always\n" if key == "always" and lab else prefix
        t0, c0 = time.perf_counter(), time.process_time()
        assert ip.run_cell(head + cell.format(steps=n)).success
        label = label or key
        times = {label: time.perf_counter() - t0, label + "_cpu": time.process_time() - c0}
        if lab:
            import xla_lab

            c = xla_lab.last()  # (waits for the capture's analysis, outside the timed loop)
            assert len(c.steps) == n and c.compiles == 0, "the timed loop was not all cache hits"
        print("TIMES " + json.dumps(times), flush=True)


def worker_own_cost(mode: str, rounds: int, blocks: tuple[int, int]) -> dict:
    """xla_lab's own cost on a cached loop, in one process (no process-to-process luck): the short loop
    as a ``%%xla -q`` cell and as a plain cell of the same kernel, taking turns (who goes first turns
    round). The plain cell runs as in plain torch_xla: source lines off (xla_lab keeps them on outside
    its cells), and the capture's switches only act on compiles (XLA_HLO_DEBUG on lowering, the
    analysis level 1 on compiles), which a cached loop does not do. The capture's analysis after each
    ``%%xla`` cell (``Session.defer``) is counted in the cell's turn here."""
    import torch_xla

    import xla_lab

    ip = _shell(mode)
    assert ip.run_cell(loops_setup(*blocks)).success
    for steps in (3, SHORT_STEPS):  # (compiles, then once untimed, as in worker_loop)
        assert ip.run_cell("%%xla -q\n" + SHORT_LOOP.format(steps=steps)).success
        assert ip.run_cell(SHORT_LOOP.format(steps=steps)).success
    ratios, plain_s = [], []
    for i in range(rounds):
        times = {}
        for lab in ((True, False) if i % 2 == 0 else (False, True)):
            torch_xla._XLAC._set_ir_debug(False)
            t0 = time.perf_counter()
            assert ip.run_cell(("%%xla -q\n" if lab else "") + SHORT_LOOP.format(steps=SHORT_STEPS)).success
            if lab:
                c = xla_lab.last()  # (waits for the capture's analysis)
                assert len(c.steps) == SHORT_STEPS and c.compiles == 0, "the timed loop was not all cache hits"
            times[lab] = time.perf_counter() - t0
        ratios.append(times[True] / times[False])
        plain_s.append(times[False])
    return {"ratios": ratios, "plain_ms": statistics.median(plain_s) / SHORT_STEPS * 1e3}


def own_cost(rounds: int, blocks: tuple[int, int]) -> dict[str, dict]:
    print(f"(a4) xla_lab's own cost, in one process: the short loop as a %%xla cell and as a plain cell of the "
          f"same kernel taking turns, {rounds} rounds, the capture's analysis after the cell included")
    outs = {}
    for mode in ("full", "lean"):
        out = outs[mode] = run_worker(f"{mode}-own", "--rounds", str(rounds), *blocks_args(blocks))
        r = out["ratios"]
        print(f"    {mode:4} %%xla / plain cell  median {statistics.median(r):.3f} (middle half {quartiles(r)}, "
              f"all {spread(r)}; plain {out['plain_ms']:.2f} ms/step)")
    return outs


PROBE_MORE = 4  # blocks added to the first measurements' models for the second point of the sizing line


def worker_sizes() -> dict:
    """Plain torch_xla's ms per step of both cached loops with the first measurements' blocks and with
    ``PROBE_MORE`` more (best of three turns each): the two points of the line the driver sizes them by."""
    ip = _shell("plain")
    out = {"loop": {}, "short": {}}
    for more in (0, PROBE_MORE):
        blocks = (LOOP_BLOCKS + more, SHORT_BLOCKS + more)
        assert ip.run_cell(loops_setup(*blocks)).success
        for key, cell, n, b in (("loop", LOOP, 100, blocks[0]), ("short", SHORT_LOOP, 300, blocks[1])):
            assert ip.run_cell(cell.format(steps=3)).success  # (compiles)
            turns = []
            for _ in range(3):
                t0 = time.perf_counter()
                assert ip.run_cell(cell.format(steps=n)).success
                turns.append(time.perf_counter() - t0)
            out[key][b] = min(turns) / n * 1e3
    return out


def blocks_for(ms: dict, target_ms: float) -> int:
    """The blocks whose step takes about ``target_ms``, on the line through the two measured points
    (``ms``: blocks -> ms per step); the first measurements' blocks where the points do not make a line."""
    (b0, t0), (b1, t1) = sorted((int(b), t) for b, t in ms.items())
    if t1 <= t0:  # (noise swamped the probe)
        return b0
    return max(0, min(40, round(b0 + (target_ms - t0) * (b1 - b0) / (t1 - t0))))  # (0: no hidden block)


def size_loops(loop_ms: float, short_ms: float, core: int | None = None) -> tuple[int, int]:
    """``core``: sized on that one core (a twin run's loops run on one core each)."""
    sizes = run_worker("sizes", core=core)
    blocks = blocks_for(sizes["loop"], loop_ms), blocks_for(sizes["short"], short_ms)
    print(f"sizing the cached loops on this machine (plain torch_xla{', on one core' if core is not None else ''}, "
          "best of three turns): Adam loop "
          + ", ".join(f"{b} blocks {t:.2f} ms/step" for b, t in sizes["loop"].items())
          + "; short loop " + ", ".join(f"{b} blocks {t:.2f} ms/step" for b, t in sizes["short"].items())
          + f" -> {blocks[0]} and {blocks[1]} blocks for about {loop_ms:g} and {short_ms:g} ms a step")
    return blocks


def worker_compile(kind: str, layers: int, wait_go: bool = False) -> dict:
    """``kind``: plain | full | lean (xla_lab's capture modes) | dump | metadata | session (plain torch_xla
    with one of what xla_lab turns on: XLA's dump flags, the source-line metadata, or a profiler session
    opened before the cell and ended after it, as lean's compile window is open over a compiling cell).
    ``wait_go``: after the set-up, say READY and start the timed cell on a line from stdin (a twin run starts
    plain torch_xla's process and the other together)."""
    import tempfile

    if kind == "dump":  # plain torch_xla with only XLA's dump on, as xla_lab sets it: what XLA itself costs
        os.environ["XLA_FLAGS"] = (f"--xla_dump_to={tempfile.mkdtemp()} --xla_dump_hlo_as_text "
                                   "--xla_dump_hlo_as_proto")
    if kind == "metadata":  # plain torch_xla with only the source-line metadata xla_lab turns on
        os.environ["XLA_IR_DEBUG"] = os.environ["XLA_HLO_DEBUG"] = "1"
    lab = kind in ("full", "lean")
    ip = _shell(kind if lab else "plain")
    assert ip.run_cell(SETUP_BERT.format(layers=layers)).success
    if wait_go:
        print("READY", flush=True)
        sys.stdin.readline()
    session = None
    if kind == "session":  # (ended after the timing, as lean ends its window in the analysis after the cell)
        import torch_xla

        session = torch_xla._XLAC.profiler.TslProfilerSessionWrapper()
    before = _compile_total_s()
    t0, c0 = time.perf_counter(), time.process_time()
    assert ip.run_cell(("%%xla -q\n" if lab else "") + BERT_STEPS).success
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"compile_s": _compile_total_s() - before, "wall_s": wall, "cpu_s": cpu}
    if session is not None:
        session.stop()
    if lab:
        import xla_lab

        t0 = time.perf_counter()
        c = xla_lab.last()  # (waits for the capture's analysis, which the cell's end does not)
        out["analysis_s"] = time.perf_counter() - t0
        assert c.compiles == 2 and all(s.hlo_after and s.fusions for s in c.steps), c.notes
        assert all(s.artifacts.lean == (kind == "lean") for s in c.steps)
    return out


# --- driver --------------------------------------------------------------------------------------
EXPLAIN_KINDS = ("dump", "metadata", "session")  # (b) with --explain: plain torch_xla with one of xla_lab's switches
KIND_NAMES = {"full": "%%xla full", "lean": "%%xla lean", "dump": "dump flags only", "metadata": "line metadata only",
              "session": "profiler session only"}


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XLA_", "PT_XLA_"))}  # a clean process, no inherited capture set-up
    env.setdefault("PJRT_DEVICE", "CPU")
    return env


def on_core(core: int | None):
    """A child's start-up hook that keeps it on one core (None: all), set before torch_xla starts, so XLA
    sizes its thread pools for the core it has."""
    return None if core is None else (lambda: os.sched_setaffinity(0, {core}))


def pin(pid: int, core: int) -> None:
    """Every thread of process ``pid`` onto ``core``; threads it starts later inherit it."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except (ProcessLookupError, FileNotFoundError):  # (a thread that ended meanwhile)
            pass


def run_worker(*args: str, core: int | None = None) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
                          env=_env(), timeout=1800, preexec_fn=on_core(core))
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def blocks_args(blocks: tuple[int, int]) -> list[str]:
    return ["--loop-blocks", str(blocks[0]), "--short-blocks", str(blocks[1])]


class LiveWorker:
    """A worker process that stays up between timed loops (its graphs compiled once). ``script``: the
    benchmark whose ``--worker KIND`` it runs (this one by default); ``extra``: more of its arguments;
    ``core``: the one core it starts on (``pin`` moves it)."""

    def __init__(self, kind: str, steps: int, script: str = __file__, wait: bool = True, extra: tuple = (),
                 core: int | None = None):
        import tempfile

        self.stderr = tempfile.TemporaryFile(mode="w+")  # (a pipe nobody reads until the end could fill and stall it)
        self.proc = subprocess.Popen([sys.executable, script, "--worker", kind, "--steps", str(steps), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=_env(), preexec_fn=on_core(core))
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        self._expect("READY")

    def _expect(self, word: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(word):
                return line[len(word):].strip()
        self.proc.wait(timeout=60)
        self.stderr.seek(0)
        raise RuntimeError(f"worker died:\n{self.stderr.read()[-4000:]}")

    def run(self, what: str = "go") -> dict:
        """One timed turn; ``what`` is the line the worker reads (which loop to time, where it matters)."""
        self.start(what)
        return self.result()

    def start(self, what: str = "go") -> None:
        """Start a timed turn without waiting for it (``result`` reads it): a twin run starts two at once."""
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        return json.loads(self._expect("TIMES"))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.stderr.close()


@contextlib.contextmanager
def live_workers(workers: dict[str, LiveWorker]):
    """A group of live workers, started together (they warm up together): waits until each is set up, and
    closes them all however the block ends."""
    try:
        for w in workers.values():
            w.wait_ready()
        yield workers
    finally:
        for w in workers.values():
            w.close()


def side_by_side(plain: LiveWorker, other: LiveWorker, core: int, plain_what: str = "go",
                 other_what: str = "go") -> tuple[dict, dict]:
    """One twin turn: plain torch_xla's worker onto ``core`` and the other onto the other core, both turns
    started together; (plain's times, the other's)."""
    pin(plain.proc.pid, core)
    pin(other.proc.pid, 1 - core)
    plain.start(plain_what)
    other.start(other_what)
    return plain.result(), other.result()


def turned(items: tuple, i: int) -> tuple:
    """``items`` in the order of round ``i``: who goes first turns round."""
    return items[i % len(items):] + items[:i % len(items)]


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}..{max(values):.3f}"


def quartiles(values: list[float]) -> str:
    if len(values) < 2:  # (statistics.quantiles needs two; --rounds 1)
        return spread(values)
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.3f}..{q[2]:.3f}"


def worker_mode(mode: str, null: bool) -> str:
    """The capture a place's process runs: its own, or plain torch_xla in every place (``--null``)."""
    return "plain" if null else mode


def steady_state(rounds: int, steps: int, pairs: int, always_rounds: int,
                 blocks: tuple[int, int], null: bool = False, twin: bool = False) -> dict[str, list[dict]]:
    """Prints the ratios; returns each mode's timed turns, round by round (plain's i-th beside the others';
    in a twin run ``plain_full`` and ``plain_lean``, the plain turns run beside each). ``null``: plain
    torch_xla in full's and lean's places too."""
    modes = ("plain torch_xla in full's and in lean's places" if null  # (a null run measures no capture)
             else "%%xla in full and in lean capture")
    how = (f"plain torch_xla beside {modes}, at the same time on the other core (twin layout)" if twin else
           f"in live IPython processes taking turns, plain torch_xla and {modes}")
    print(f"(a) steady state: cached loops {how}: {pairs} groups of processes x {rounds} rounds (--track-lines always "
          f"in the first {always_rounds} of each): the Adam loop ({steps} steps a turn, MLP 256-512{'-512' * blocks[0]}"
          f"-10, batch 64), the short SGD-momentum loop ({SHORT_STEPS} steps, MLP 128-256{'-256' * blocks[1]}-10, "
          f"batch 32), a one-op graph synced {TINY_SYNCS}x")
    runs = (steady_twin if twin else steady_turns)(rounds, steps, pairs, always_rounds, blocks, null)
    print_steady(runs, rounds * pairs, steps, null)
    return runs


def steady_turns(rounds: int, steps: int, pairs: int, always_rounds: int,
                 blocks: tuple[int, int], null: bool) -> dict[str, list[dict]]:
    """Three live processes per group take turns, loop by loop, in the six orders in turn."""
    modes = ("plain", "full", "lean")
    orders = list(itertools.permutations(modes))  # (who goes first, and who follows whom, turn round)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(pairs):  # (a process's own layout in memory can make it a few % faster or slower)
        with live_workers({m: LiveWorker(f"{worker_mode(m, null)}-loop", steps, wait=False,
                                          extra=blocks_args(blocks)) for m in modes}) as workers:
            for i in range(rounds):
                turn: dict[str, dict] = {m: {} for m in modes}
                for key in ("loop", "always", "short", "tiny"):  # (a loop's turns follow each other)
                    for m in orders[i % len(orders)]:
                        if key != "always" or (m == "full" and i < always_rounds):
                            turn[m].update(workers[m].run(key))
                for m in modes:
                    runs[m].append(turn[m])
    return runs


def steady_twin(rounds: int, steps: int, pairs: int, always_rounds: int,
                blocks: tuple[int, int], null: bool) -> dict[str, list[dict]]:
    """Three live processes per group, each started on one core; a turn runs plain's loop and full's (or
    lean's) at the same time, one on each core, so both meet the same moment of this machine (run to run it
    drifts by 7-10% within seconds, which taking turns cannot avoid). Who sits on which core swaps every
    round; full's and lean's turns alternate who goes first. While a pair runs, the third process waits on
    its stdin, taking no CPU."""
    runs: dict[str, list[dict]] = {m: [] for m in ("plain_full", "plain_lean", "full", "lean")}
    for g in range(pairs):
        with live_workers({m: LiveWorker(f"{worker_mode(m, null)}-loop", steps, wait=False, extra=blocks_args(blocks),
                                          core=0 if m == "plain" else 1) for m in ("plain", "full", "lean")}) as workers:
            for i in range(rounds):
                turn: dict[str, dict] = {m: {} for m in runs}
                core = (g + i) % 2  # (plain's core this round)
                for mode in turned(("full", "lean"), g + i):
                    for key in ("loop", "always", "short", "tiny"):
                        if key == "always" and not (mode == "full" and i < always_rounds):
                            continue
                        plain, other = side_by_side(workers["plain"], workers[mode], core,
                                                    "loop:always" if key == "always" else key, key)
                        turn[f"plain_{mode}"].update(plain)
                        turn[mode].update(other)
                for m in runs:
                    runs[m].append(turn[m])
    return runs


def print_steady(runs: dict[str, list[dict]], rounds: int, steps: int, null: bool) -> None:
    twin = "plain_lean" in runs
    p = plain_beside(runs, "lean")
    ms = lambda xs, n: statistics.median(xs) / n * 1e3  # noqa: E731

    for key, n, label in (("loop", steps, "Adam loop"), ("short", SHORT_STEPS, "short loop")):
        print(f"    {label}: plain {ms([x[key] for x in p], n):.2f} ms/step, full {ms([x[key] for x in runs['full']], n):.2f}, "
              f"lean {ms([x[key] for x in runs['lean']], n):.2f}")
        for mode in ("full", "lean"):
            r, c = steady_ratios(runs, mode, key), steady_ratios(runs, mode, key + "_cpu")
            goal = LOOP_GOALS.get((key, mode))
            place = f"plain in {mode}'s place" if null else mode
            print(f"      {place:4} / plain  median {statistics.median(r):.3f} (middle half {quartiles(r)}, all {spread(r)} "
                  f"over {rounds} rounds; {f'goal <= {goal}' if goal else 'no goal, printed beside lean'})"
                  f"  CPU time {statistics.median(c):.3f}")
    a = steady_ratios(runs, "full", "always", "always" if twin else "loop")
    print(f"    full --track-lines always / plain (Adam loop)  median {statistics.median(a):.3f} (spread {spread(a)})")
    for mode in ("full", "lean"):
        per_sync = [(x["tiny"] - y["tiny"]) / TINY_SYNCS * 1e6 for x, y in zip(runs[mode], plain_beside(runs, mode))]
        print(f"    one-op graph: plain {ms([x['tiny'] for x in p], TINY_SYNCS) * 1e3:.0f} us/sync, {mode} "
              f"{ms([x['tiny'] for x in runs[mode]], TINY_SYNCS) * 1e3:.0f}: fixed cost {statistics.median(per_sync):.0f} "
              f"us per sync (spread {min(per_sync):.0f}..{max(per_sync):.0f})")


def compile_path(layers: int, repeats: int, kinds: tuple[str, ...], null: bool = False,
                 twin_others: int | None = None) -> dict[str, list[dict]]:
    """Prints the ratios; returns each kind's fresh processes, round by round. ``null``: plain torch_xla in
    every kind's place. ``twin_others``: a twin run (plain torch_xla's process and another at the same time,
    one core each, started together once both are set up; lean in every round, the other kinds in this many
    rounds first), whose plain processes are returned as ``plain_<kind>``."""
    twin = twin_others is not None
    print(f"(b) compile path: first two train steps of a {layers}-layer TransformerEncoder (d=256, seq 128, "
          f"batch 8), {repeats} rounds of fresh processes, " + (
              f"each beside plain torch_xla's at the same time on the other core (twin layout; lean in every round, "
              f"the other kinds in the first {min(twin_others, repeats)})" if twin else "interleaved"))
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for i in range(repeats):
        if not twin:
            for k in turned(kinds, i):
                results[k].append(run_worker(f"{worker_mode(k, null)}-compile", "--layers", str(layers)))
            continue
        for k in turned(tuple(k for k in kinds[1:] if k == "lean" or i < twin_others), i):
            plain, other = compile_twin(k, layers, core=i % 2, null=null)
            results.setdefault(f"plain_{k}", []).append(plain)
            results[k].append(other)
    if twin:
        results = {k: v for k, v in results.items() if v}  # (a kind in no round: not measured)
        kinds = ("plain",) + tuple(k for k in kinds[1:] if k in results)
    base = plain_beside(results, "lean")  # (plain's median printed: in a twin run, the processes beside lean's)
    for what, label in (("compile_s", "XLA CompileTime"), ("wall_s", "cell wall time "), ("cpu_s", "cell CPU time  ")):
        b = statistics.median(r[what] for r in base)
        print(f"    {label}  plain {b:.3f} s")
        for k in kinds[1:]:
            ratios = compile_ratios(results, k, what)
            name = f"plain in {k}'s place" if null else KIND_NAMES[k]
            goal = f" (goal <= {COMPILE_GOAL})" if k == "lean" and what != "cpu_s" else ""
            print(f"      {name:21} {statistics.median(r[what] for r in results[k]):.3f} s  ratio "
                  f"{statistics.median(ratios):.3f} [{spread(ratios)}]{goal}")
    for k in ("full", "lean"):
        if k in results and not null:
            spent = [r["analysis_s"] for r in results[k]]
            print(f"    {k}: the capture's analysis after the cell (Session.defer; waited for by the next "
                  f"execution or view) {statistics.median(spent):.3f} s [{spread(spent)}]")
    return results


def compile_twin(kind: str, layers: int, core: int, null: bool) -> tuple[dict, dict]:
    """Plain torch_xla's fresh process on ``core`` and ``kind``'s on the other, each set up, then both cells
    started together: (plain's times, ``kind``'s)."""
    with live_workers({k: LiveWorker(f"{worker_mode(k, null)}-compile", 0, wait=False, core=c,
                                     extra=("--layers", str(layers), "--wait-go"))
                       for k, c in (("plain", core), (kind, 1 - core))}) as workers:
        return side_by_side(workers["plain"], workers[kind], core)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # (The %%xla process runs 2 x steps Adam steps a round; after about 6,000 steps the loop's graph
    # changes once by itself, 31 inputs instead of 32, so rounds x steps stay under that. Shorter loops
    # would measure the per-cell cost too: about 1.6 ms a cell, and the first two steps of each cell
    # trace with source lines on.)
    # A single pair of adjacent loops varies by about 8% on this machine (its other tenants), so the
    # median needs a few dozen pairs to settle within a percent or two of the 3% goal.
    parser.add_argument("--rounds", type=int, default=6, help="timed loops per process in (a)")
    parser.add_argument("--pairs", type=int, default=5, help="pairs of processes in (a)")
    parser.add_argument("--always-rounds", type=int, default=2,
                        help="rounds of each pair that also time --track-lines always (a2)")
    parser.add_argument("--steps", type=int, default=LOOP_STEPS)
    parser.add_argument("--loop-ms", type=float, default=9.0,
                        help="the Adam loop's step time to size its model for, in plain torch_xla (the issue's 9 ms)")
    parser.add_argument("--short-ms", type=float, default=3.0,
                        help="the short loop's step time to size its model for (the issue's 3 ms)")
    parser.add_argument("--loop-blocks", type=int, help=f"the Adam loop's hidden blocks, unsized (first "
                        f"measurements: {LOOP_BLOCKS})")
    parser.add_argument("--short-blocks", type=int, help=f"the short loop's hidden blocks, unsized (first "
                        f"measurements: {SHORT_BLOCKS})")
    parser.add_argument("--repeats", type=int, default=6, help="rounds of fresh processes in (b)")
    parser.add_argument("--big-layers", type=int, default=12, help="layers of the big model's compile (0: skip)")
    parser.add_argument("--big-repeats", type=int, default=3, help="rounds of fresh processes for the big model")
    parser.add_argument("--explain", action="store_true",
                        help="(b) also times plain torch_xla with only XLA's dump flags, with only the line metadata "
                        "and under a profiler session")
    parser.add_argument("--explain-big", action="store_true", help="the same for the big model")
    parser.add_argument("--layers", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--own-rounds", type=int, default=8, help="rounds of (a4), in one process (0: skip)")
    parser.add_argument("--skip-steady", action="store_true", help="only (b), the compile path")
    parser.add_argument("--null", action="store_true", help="plain torch_xla in every place: what the noise alone "
                        "gives a mode that costs nothing ((a4) and --explain skipped)")
    parser.add_argument("--json", metavar="OUT", help="also save every round's raw times here (pool_overhead.py "
                        "pools several runs)")
    parser.add_argument("--layout", choices=("twin", "turns"), default="twin",
                        help="twin: plain torch_xla and each mode at the same time, one core each (cores swapped "
                        "round by round); turns: one after another on both cores, as every run up to AT (2026-12-06)")
    parser.add_argument("--twin-others", type=int, default=2, help="twin layout: rounds of (b) that pair full capture "
                        "(and --explain's kinds) with plain torch_xla too; lean is paired in every round")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--wait-go", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        kind = args.worker[0]
        blocks = tuple(d if b is None else b for b, d in zip((args.loop_blocks, args.short_blocks),
                                                              (LOOP_BLOCKS, SHORT_BLOCKS)))
        if kind == "sizes":
            print("RESULT " + json.dumps(worker_sizes()))
            return
        if kind.endswith("-own"):
            print("RESULT " + json.dumps(worker_own_cost(kind.removesuffix("-own"), args.rounds, blocks)))
            return
        if kind.endswith("-loop"):
            worker_loop(kind.removesuffix("-loop"), args.steps, blocks)
            return
        out = worker_compile(kind.removesuffix("-compile"), args.layers, args.wait_go)
        print(("TIMES " if args.wait_go else "RESULT ") + json.dumps(out), flush=True)  # (TIMES: a LiveWorker's turn)
        return

    # PJRT settings every process inherits, plain torch_xla's and xla_lab's alike (PJRT_CPU_ASYNC_CLIENT=0:
    # the CPU client runs each execution on torch_xla's executor thread, which then frees the step's
    # donated inputs itself; see bench_donation_wait.py)
    pjrt = inherited_pjrt()
    if pjrt:
        print("every process, plain torch_xla and xla_lab alike, runs with " + pjrt_text(pjrt))
    if args.null:  # (before the arguments are saved: they say what ran)
        print("NULL RUN: every process is plain torch_xla, the ones in full's and lean's places too; their ratios "
              "are this machine's noise alone")
        args.own_rounds, args.explain, args.explain_big = 0, False, False
    saved = {"code": _code_version(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "args": {k: v for k, v in vars(args).items() if k not in ("worker", "json")}, "pjrt_env": pjrt,
             "compile": {}, "null": args.null, "layout": args.layout}

    def save() -> None:  # (after each part: a run stopped half-way keeps what it measured)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(saved, f, indent=1)

    twin = args.layout == "twin"
    if twin:
        print("TWIN LAYOUT: plain torch_xla runs at the same time as the mode it is compared with, one core each "
              "(swapped round by round), so both meet the same moment of this shared machine")
    if not args.skip_steady:
        blocks = (args.loop_blocks, args.short_blocks)
        if None in blocks:  # (sized on this machine; a size given is kept)
            blocks = tuple(s if b is None else b for b, s in zip(blocks, size_loops(args.loop_ms, args.short_ms,
                                                                      0 if twin else None)))
        saved["blocks"] = {"loop": blocks[0], "short": blocks[1]}
        saved["steady"] = steady_state(args.rounds, args.steps, args.pairs, min(args.always_rounds, args.rounds),
                                       blocks, args.null, twin)
        save()
        if args.own_rounds:
            saved["own"] = own_cost(args.own_rounds, blocks)
            save()
    others = args.twin_others if twin else None
    saved["compile"]["2"] = compile_path(2, args.repeats, ("plain", "full", "lean") +
                                         (EXPLAIN_KINDS if args.explain else ()), args.null, others)
    save()
    if args.big_layers:
        saved["compile"][str(args.big_layers)] = compile_path(args.big_layers, args.big_repeats, ("plain", "full", "lean") +
                                                              (EXPLAIN_KINDS if args.explain_big else ()), args.null, others)
    saved["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    save()


def _code_version() -> str | None:
    """The commit measured (with ``+dirty`` when the working tree has changes), for pooling like with like."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("+dirty" if dirty else "")) or None


if __name__ == "__main__":
    main()
