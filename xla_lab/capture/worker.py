"""What xla_lab runs inside the workers of ``xmp.spawn`` / ``torch_xla.launch``: each rank's explicit
syncs, written to the launch's own directory, never to the kernel's capture files.

torch_xla's sync log alone cannot tell the ranks apart: it is written only by the process whose
``PJRT_LOCAL_PROCESS_RANK`` is 0 (on TPU the other chips' processes write nothing), its blocks name
no device, and where the ranks are threads of one process (the CPU client, TPU v3) blocks of more
than 1 KB interleave mid-line (libstdc++ writes them in several ``write`` calls). So a rank is
recorded from what its own thread sees, and from a sync log the worker writes in a form that names
the rank:

* its explicit syncs (``torch_xla.sync()``, ``xm.mark_step()``), with the Python stack that called
  them, when they started and returned, the graph hashes they compiled and the ``CompileTime``
  sample of that compile;
* for those hashes, the worker's sync log of compiles (``PT_XLA_DEBUG_LEVEL=1``: a cached step
  writes nothing) with one frame per block: an explicit sync calls torch_xla through a function
  named after its rank (``_xla_lab_rank_3``), so each compile block says which rank compiled which
  graph, and stays under 1 KB, which libstdc++ writes in one call (the threads' blocks never
  interleave). The log is read after a sync only when torch_xla's ``UncachedCompile`` counter moved;
* the HLO of each compile, from XLA's dump in a directory of the worker process: the rank's function
  is called through one named after the rank (``_xla_lab_rank_call_3``), which is then in the
  recorded Python stack of every op the rank traced, so the binary dump says which rank's graph
  each module is (a graph traced while source lines were paused goes by the log's order).

The ranks' syncs run as they would without xla_lab, side by side (running them one at a time, to
tie each compile to a rank, made the CPU client's cached steps about twice as slow: measured).
Source lines on traced ops are recorded until the ranks' loops hit the cache, as in a cell (``_after_sync``).

Records are appended as JSON lines while the ranks run (a steady loop's at most FLUSH_EVERY_S late), so a
worker that raises, or is killed, leaves what it had recorded. The kernel joins them into steps (``capture/ranks.py``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

from xla_lab.settings import LAUNCH_DIR_ENV  # (internal) set by the kernel for the workers of one launch

from .metrics import MetricsDelta, MetricsSnapshot

MAX_FRAMES = 40  # frames kept of each sync's stack (innermost first), up to the rank's function


def process_dir(launch_dir: str) -> str:
    return os.path.join(launch_dir, f"p{os.getpid()}")


def point_dump_here(launch_dir: str) -> None:
    """Before this worker's runtime starts: XLA's dump goes to the worker's own directory (the kernel
    stripped its own dump and sync-log settings from the workers' environment)."""
    own = process_dir(launch_dir)
    os.makedirs(os.path.join(own, "dump"), exist_ok=True)
    from xla_lab.runtime import without_dump_flags

    flags = without_dump_flags(os.environ.get("XLA_FLAGS", ""))
    flags += [f"--xla_dump_to={os.path.join(own, 'dump')}", "--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto"]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["XLA_HLO_DEBUG"] = "1"  # source lines on the HLO (the fusion map's lines)
    os.environ["XLA_IR_DEBUG"] = "1"
    # torch_xla's sync log of compiles (level 1: a cached step writes nothing), for each compile's
    # graph hash and rank (only a local rank 0 process writes it): one frame, the rank's trampoline,
    # keeps a block under 1 KB, which libstdc++ writes in one call, so the threads' blocks never interleave
    os.environ["PT_XLA_DEBUG_LEVEL"] = "1"
    os.environ["PT_XLA_DEBUG_FILE"] = sync_log(launch_dir)
    os.environ["PT_XLA_DEBUG_MAX_FRAME"] = "1"


def sync_log(launch_dir: str) -> str:
    return os.path.join(process_dir(launch_dir), "sync.log")


class _ProcessRecorder:
    """The records of the ranks of this worker process (one per process, made on first use)."""

    def __init__(self, launch_dir: str, graph_name: str):
        import torch_xla

        self.launch_dir = launch_dir
        self.graph_name = graph_name
        self._xlac = torch_xla._XLAC
        self._out = open(os.path.join(launch_dir, f"p{os.getpid()}.jsonl"), "a", encoding="utf-8")
        self._write_lock = threading.Lock()
        self._pending: list[str] = []
        threading.Thread(target=self._flush_every, name="xla_lab records", daemon=True).start()
        self._local = threading.local()
        self._stacks: dict[tuple, int] = {}
        self._started: list[int] = []  # ranks of this process, in the order they started
        self._ended: set[int] = set()
        self._in_sync: set[int] = set()  # ranks inside a sync now (tracing done)
        self.expected_ranks = 0
        self._metrics_at_start = MetricsSnapshot()
        self._tracking_lines = True  # source lines on traced ops (see _after_sync)
        self._log = sync_log(launch_dir)
        self._log_offset = 0
        self._log_lock = threading.Lock()
        self._logged: dict[int | None, list[str]] = {}  # compiles read from the log, not yet claimed
        self._hits_in_a_row: dict[int, int] = {}
        self.write({"kind": "process", "pid": os.getpid(), "started": time.time(),
                    "graph_name": graph_name})

    # --- records ------------------------------------------------------------------------------
    def write(self, record: dict, flush: bool = True) -> None:
        """Append a record; written out now (``flush``) or by the flusher thread within FLUSH_EVERY_S:
        a write per sync gives up the GIL, and with the ranks' threads taking turns at it, getting it
        back can cost a short step several times over."""
        self._pending.append(json.dumps(record))  # (list.append holds the GIL: no lock needed)
        if flush:
            self.flush()

    def flush(self) -> None:
        with self._write_lock:
            if self._out.closed:
                return
            lines, self._pending = self._pending, []
            if lines:
                self._out.write("".join(line + "\n" for line in lines))
                self._out.flush()

    def _flush_every(self) -> None:
        while not self._out.closed:
            time.sleep(FLUSH_EVERY_S)
            self.flush()

    def _stack_id(self, frame) -> int:
        """The sync's Python stack, innermost first, up to the rank's function (interned: a loop's
        syncs share one)."""
        frames = []
        while frame is not None and len(frames) < MAX_FRAMES:
            code = frame.f_code
            if code.co_name.startswith(RANK_CALL):
                break
            frames.append((code.co_name, code.co_filename, frame.f_lineno))
            frame = frame.f_back
        key = tuple(frames)
        found = self._stacks.get(key)
        if found is None:
            found = self._stacks[key] = len(self._stacks)
            self.write({"kind": "stack", "id": found, "frames": [list(f) for f in frames]})
        return found

    # --- the sync hook --------------------------------------------------------------------------
    def install(self) -> None:
        original = self._xlac._xla_step_marker
        while hasattr(original, "__wrapped__"):  # a hook inherited from the kernel by fork
            original = original.__wrapped__
        recorder = self

        def _xla_lab_rank_step_marker(*args, **kwargs):
            __tracebackhide__ = True  # noqa: F841
            rank = getattr(recorder._local, "rank", None)
            if rank is None:  # a thread that is not a rank (the user's own)
                return original(*args, **kwargs)
            return recorder._sync(rank, sys._getframe(1), original, args, kwargs)

        _xla_lab_rank_step_marker.__wrapped__ = original
        self._xlac._xla_step_marker = _xla_lab_rank_step_marker

    def _sync(self, rank: int, caller, original, args, kwargs):
        __tracebackhide__ = True  # noqa: F841
        stack = self._stack_id(caller)
        xlac = self._xlac
        uncached = xlac._xla_counter_value("UncachedCompile") or 0
        enter = time.time()
        self.write({"kind": "enter", "rank": rank, "stack": stack, "enter": enter}, flush=False)  # (one that hangs)
        ok = False
        self._in_sync.add(rank)
        try:
            out = rank_function(RANK_FUNCTION, rank)(original, args, kwargs)  # names the rank in the sync log
            ok = True
            return out
        finally:
            returned = time.time()
            self._in_sync.discard(rank)
            hashes: list[str] = []
            if (xlac._xla_counter_value("UncachedCompile") or 0) != uncached:
                # a compile happened meanwhile, this rank's or another's at the same moment: the log's
                # blocks named after the rank say which (each is written before its compile starts)
                hashes = self._new_compiles(rank)
            compile_s = self._own_compile_seconds(enter, returned) if hashes else 0.0
            self._after_sync(rank, len(hashes))
            self.write({"kind": "sync", "rank": rank, "stack": stack, "enter": enter, "exit": returned,
                        "compiled": len(hashes), "hashes": hashes, "compile_s": compile_s, "ok": ok},
                       flush=bool(hashes))

    def _new_compiles(self, rank: int) -> list[str]:
        """Graph hashes of the rank's compiles logged since its last call (the sync log is read on
        from where it was read last, whole blocks only)."""
        from .xla_logs import parse_debug_log

        with self._log_lock:
            try:
                with open(self._log, "rb") as f:
                    f.seek(self._log_offset)
                    data = f.read()
            except OSError:
                data = b""
            end = data.rfind(_BLOCK_END)
            if end >= 0:
                end += len(_BLOCK_END)
                self._log_offset += end
                for event in parse_debug_log(data[:end].decode("utf-8", "replace")):
                    self._logged.setdefault(rank_of_block(event), []).append(event.graph_hash)
            mine = self._logged.pop(rank, [])
        return mine

    def _after_sync(self, rank: int, compiled: int) -> None:
        """Traced ops record their source lines until the loops are cached; a compile anywhere turns
        them on again (that compile's own graph then has no lines, as in a cell's steady loop).

        The ranks' threads do not keep step: on two cores one rank can run its whole cached loop
        while another still compiles its second graph. So lines pause once some rank hit the cache
        STEADY_AFTER times in a row and every other rank has too, or is inside a sync (its trace is
        done: the graph it compiles there has its lines), or has ended. Waiting for every rank to be
        steady kept lines on for most of such a loop (a Python stack walk per traced op, most of a
        short step with the threads taking turns at the GIL: measured)."""
        if compiled:
            self._hits_in_a_row.clear()
            if not self._tracking_lines:
                self._tracking_lines = True
                self._xlac._set_ir_debug(True)
            return
        self._hits_in_a_row[rank] = self._hits_in_a_row.get(rank, 0) + 1
        if self._tracking_lines and self._loops_cached():
            self._tracking_lines = False
            self._xlac._set_ir_debug(False)

    def _loops_cached(self) -> bool:
        started = set(self._started)
        if len(started) < max(self.expected_ranks, 1):
            return False  # a rank that has not started yet will trace its first graph
        steady = {r for r, hits in list(self._hits_in_a_row.items()) if hits >= STEADY_AFTER}  # (list(): one step under the GIL)
        return bool(steady) and all(r in steady or r in self._in_sync or r in self._ended for r in started)

    def _own_compile_seconds(self, enter: float, returned: float) -> float:
        """The CompileTime sample of this sync's compile: the one that ended last before the sync
        returned (a rank's sync returns right after its compile; a compile of another rank at the
        same moment ends elsewhere in the window)."""
        import torch_xla.debug.metrics as met

        _, _, samples = met.metric_data("CompileTime")
        inside = [(end, ns) for end, ns in samples[-64:] if enter <= end <= returned + 1e-3]
        return max(inside)[1] / 1e9 if inside else 0.0

    # --- ranks ------------------------------------------------------------------------------------
    def rank_started(self, rank: int, device: str) -> None:
        self._local.rank = rank
        with self._write_lock:
            self._started.append(rank)
        self.write({"kind": "rank", "rank": rank, "device": device, "thread": threading.get_native_id(),
                    "started": time.time()})

    def rank_ended(self, rank: int, error: BaseException | None) -> bool:
        """True for the process's last rank to end."""
        self._local.rank = None
        record = {"kind": "end", "rank": rank, "ended": time.time(), "status": "ok"}
        if error is not None:
            record.update(status="raised", error=f"{type(error).__name__}: {error}",
                          traceback="".join(traceback.format_exception(error))[-8000:])
        self.write(record)
        with self._write_lock:
            self._ended.add(rank)
            return len(self._ended) >= max(self.expected_ranks, len(self._started))

    def finish(self) -> None:
        """After the last rank: wait for the device, record the process's metric totals."""
        import torch_xla.core.xla_model as xm

        note = None
        try:
            xm.wait_device_ops()
        except Exception as exc:
            note = f"XLA failed while running a graph: {exc}"
        delta = MetricsDelta(self._metrics_at_start, MetricsSnapshot())
        totals = {kind: [delta.counts[kind], delta.totals_s[kind]] for kind in delta.counts}  # [count, seconds]
        self.write({"kind": "done", "ended": time.time(), "metrics": totals, "note": note})
        with self._write_lock:
            self._out.close()


STEADY_AFTER = 2
_BLOCK_END = ("=" * 80 + "\n").encode()  # a block's last line ends with these
FLUSH_EVERY_S = 0.5  # a killed worker loses at most this much of its records
# Functions named after the rank, so that what torch_xla records of a Python stack says which rank:
RANK_FUNCTION = "_xla_lab_rank_"  # + rank: calls the step marker (the one frame of a compile block)
RANK_CALL = "_xla_lab_rank_call_"  # + rank: calls the rank's function (in every op's stack in the dump)
_RANK_FUNCTIONS: dict[tuple[str, int], object] = {}


def rank_function(prefix: str, rank: int):
    """``RANK_FUNCTION``: ``f(original, args, kwargs)`` calls ``original(*args, **kwargs)``;
    ``RANK_CALL``: ``f(fn)`` calls ``fn()``."""
    found = _RANK_FUNCTIONS.get((prefix, rank))
    if found is None:
        body = ("(original, args, kwargs):\n    return original(*args, **kwargs)\n" if prefix == RANK_FUNCTION
                else "(fn):\n    return fn()\n")
        namespace: dict = {}
        exec(compile(f"def {prefix}{rank}{body}", __file__, "exec"), namespace)
        found = _RANK_FUNCTIONS[(prefix, rank)] = namespace[f"{prefix}{rank}"]
    return found


def rank_of_block(event) -> int | None:
    """The rank a sync-log block names in its one frame (``RANK_FUNCTION``); None for a block of a
    sync outside a rank's explicit ones (a value read)."""
    name = event.frames[0].function if event.frames else ""
    tail = name[len(RANK_FUNCTION):] if name.startswith(RANK_FUNCTION) else ""
    return int(tail) if tail.isdigit() else None


_PROCESS: _ProcessRecorder | None = None
_PROCESS_LOCK = threading.Lock()


def _process(launch_dir: str, graph_name: str) -> _ProcessRecorder:
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None or _PROCESS.launch_dir != launch_dir:
            _PROCESS = _ProcessRecorder(launch_dir, graph_name)
            _PROCESS.install()
        return _PROCESS


class RankWorker:
    """Pickle-able wrapper of a launch's per-rank function (torch_xla's ``_SpawnFn``): unpickled in
    the worker before its runtime starts (the dump is pointed at the worker's directory then), and
    called once per rank, in the rank's thread."""

    def __init__(self, fn, launch_dir: str, graph_name: str):
        self.fn = fn
        self.launch_dir = launch_dir
        self.graph_name = graph_name

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)
        if os.environ.get(LAUNCH_DIR_ENV) == self.launch_dir:
            _setup_worker(self.launch_dir)

    def __call__(self):
        import torch_xla
        import torch_xla.core.xla_model as xm
        from torch_xla import runtime as xr

        recorder = _process(self.launch_dir, self.graph_name)
        if not recorder.expected_ranks:
            recorder.expected_ranks = len(xm.get_xla_supported_devices())
        rank = xr.global_ordinal()
        recorder.rank_started(rank, str(torch_xla._XLAC._xla_get_default_device()))
        error = None
        try:
            return rank_function(RANK_CALL, rank)(self.fn)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if recorder.rank_ended(rank, error):
                recorder.finish()


_SET_UP: set[str] = set()


def _setup_worker(launch_dir: str) -> None:
    """Once per worker process, before anything touches the device."""
    if launch_dir in _SET_UP:
        return
    _SET_UP.add(launch_dir)

    started = "torch_xla" in sys.modules and sys.modules["torch_xla"]._XLAC._xla_runtime_is_initialized()
    if not started:
        point_dump_here(launch_dir)
