"""What xla_lab runs inside the workers of ``xmp.spawn`` / ``torch_xla.launch``: each rank's explicit
syncs, written to the launch's own directory, never to the kernel's capture files.

torch_xla's sync log alone cannot tell the ranks apart: it is written only by the process whose
``PJRT_LOCAL_PROCESS_RANK`` is 0 (on TPU the other chips' processes write nothing), its blocks name
no device, and where the ranks are threads of one process (the CPU client, TPU v3) blocks of more
than 1 KB interleave mid-line (libstdc++ writes them in several ``write`` calls). So a rank is
recorded from what its own thread sees:

* its explicit syncs (``torch_xla.sync()``, ``xm.mark_step()``), with the Python stack that called
  them, when they started and returned, whether they compiled (torch_xla's ``UncachedCompile``
  counter) and the compile's own ``CompileTime`` samples;
* the part of the worker's sync log written during the sync (its byte range): the graph hash, where
  the process writes one (blocks of one frame, under 1 KB, so they never interleave);
* the HLO of each compile, from XLA's dump in a directory of the worker process: the graph name is
  set to ``<cell graph name>_r<rank>`` for the length of the sync, so the dump's file names say which
  rank compiled each module.

All of it needs the sync to be the only one of its process in flight, so a process with several
ranks runs their explicit syncs one at a time (its ranks then reuse a graph the first of them
compiled instead of compiling it at the same time); the time a rank waits for another's sync is
recorded apart and is not the rank's. A process with one rank (a TPU chip) takes no lock.

Records are appended as JSON lines while the ranks run, so a worker that raises, or is killed, leaves
what it had recorded. The kernel joins them into steps (``capture/ranks.py``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

LAUNCH_DIR_ENV = "XLA_LAB_LAUNCH_DIR"  # set by the kernel for the workers of one launch
HOOK_FUNCTION = "_xla_lab_rank_step_marker"
MAX_FRAMES = 40  # frames kept of each sync's stack (innermost first), up to the rank's function


def process_dir(launch_dir: str, pid: int | None = None) -> str:
    return os.path.join(launch_dir, f"p{pid or os.getpid()}")


def point_dump_here(launch_dir: str) -> None:
    """Before this worker's runtime starts: XLA's dump goes to the worker's own directory (the kernel
    stripped its own dump and sync-log settings from the workers' environment)."""
    own = process_dir(launch_dir)
    os.makedirs(os.path.join(own, "dump"), exist_ok=True)
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith(("--xla_dump_to", "--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto"))]
    flags += [f"--xla_dump_to={os.path.join(own, 'dump')}", "--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto"]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["XLA_HLO_DEBUG"] = "1"  # source lines on the HLO (the fusion map's lines)
    os.environ["XLA_IR_DEBUG"] = "1"
    # torch_xla's sync log, for the graph hash of each sync (only a local rank 0 process writes it):
    # one frame keeps a block under 1 KB, which libstdc++ writes in one call, so the blocks of the
    # ranks' threads never interleave
    os.environ["PT_XLA_DEBUG_LEVEL"] = "2"
    os.environ["PT_XLA_DEBUG_FILE"] = sync_log(launch_dir)
    os.environ["PT_XLA_DEBUG_MAX_FRAME"] = "1"


def sync_log(launch_dir: str, pid: int | None = None) -> str:
    return os.path.join(process_dir(launch_dir, pid), "sync.log")


class _ProcessRecorder:
    """The records of the ranks of this worker process (one per process, made on first use)."""

    def __init__(self, launch_dir: str, graph_name: str):
        import torch_xla

        self.launch_dir = launch_dir
        self.graph_name = graph_name
        self._xlac = torch_xla._XLAC
        self._out = open(os.path.join(launch_dir, f"p{os.getpid()}.jsonl"), "a", buffering=1, encoding="utf-8")
        self._write_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._local = threading.local()
        self._stacks: dict[tuple, int] = {}
        self._ranks_running = 0
        self._ranks_ended = 0
        self.expected_ranks = 0
        self._original = None
        self._counts_at_start = self._counts()
        self._log = sync_log(launch_dir)
        self.write({"kind": "process", "pid": os.getpid(), "started": time.time(),
                    "graph_name": graph_name})

    # --- records ------------------------------------------------------------------------------
    def write(self, record: dict) -> None:
        line = json.dumps(record)
        with self._write_lock:
            self._out.write(line + "\n")

    def _stack_id(self, frame) -> int:
        """The sync's Python stack, innermost first, up to the rank's function (interned: a loop's
        syncs share one)."""
        frames = []
        while frame is not None and len(frames) < MAX_FRAMES:
            code = frame.f_code
            if code.co_name == "_xla_lab_rank_call":
                break
            frames.append((code.co_name, code.co_filename, frame.f_lineno))
            frame = frame.f_back
        key = tuple(frames)
        found = self._stacks.get(key)
        if found is None:
            found = self._stacks[key] = len(self._stacks)
            self.write({"kind": "stack", "id": found, "frames": [list(f) for f in frames]})
        return found

    def _counts(self) -> dict:
        import torch_xla.debug.metrics as met

        out = {}
        names = set(met.metric_names())
        for name in ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"):
            if name in names:
                count, total, _ = met.metric_data(name)
                out[name] = [count, total]
        return out

    # --- the sync hook --------------------------------------------------------------------------
    def install(self) -> None:
        original = self._xlac._xla_step_marker
        while hasattr(original, "__wrapped__"):  # a hook inherited from the kernel by fork
            original = original.__wrapped__
        self._original = original
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
        enter = time.time()
        lock = self._sync_lock if self.expected_ranks > 1 else None
        if lock is not None:
            lock.acquire()
        got = time.time()
        xlac = self._xlac
        uncached = xlac._xla_counter_value("UncachedCompile") or 0
        xlac._set_current_graph_name(f"{self.graph_name}_r{rank}")
        log_start = _size(self._log)
        ok = False
        try:
            out = original(*args, **kwargs)
            ok = True
            return out
        finally:
            returned = time.time()
            log_end = _size(self._log)
            compiled = (xlac._xla_counter_value("UncachedCompile") or 0) - uncached
            compile_s = self._last_compile_seconds(compiled) if compiled else 0.0
            xlac._set_current_graph_name(self.graph_name)
            if lock is not None:
                lock.release()
            self.write({"kind": "sync", "rank": rank, "stack": stack, "enter": enter, "waited": got - enter,
                        "exit": returned, "compiled": compiled, "compile_s": compile_s, "ok": ok,
                        "log": [log_start, log_end]})

    def _last_compile_seconds(self, n: int) -> float:
        import torch_xla.debug.metrics as met

        _, _, samples = met.metric_data("CompileTime")
        return sum(ns for _, ns in samples[-n:]) / 1e9

    # --- ranks ------------------------------------------------------------------------------------
    def rank_started(self, rank: int, device: str) -> None:
        self._local.rank = rank
        with self._write_lock:
            self._ranks_running += 1
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
            self._ranks_ended += 1
            return self._ranks_ended >= max(self.expected_ranks, self._ranks_running)

    def finish(self) -> None:
        """After the last rank: wait for the device, record the process's metric totals."""
        import torch_xla.core.xla_model as xm

        note = None
        try:
            xm.wait_device_ops()
        except Exception as exc:
            note = f"XLA failed while running a graph: {exc}"
        before, after = self._counts_at_start, self._counts()
        totals = {name: [after[name][0] - before.get(name, [0, 0])[0], (after[name][1] - before.get(name, [0, 0])[1]) / 1e9]
                  for name in after}
        self.write({"kind": "done", "ended": time.time(), "metrics": totals, "note": note})
        self._out.close()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


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
            return _xla_lab_rank_call(self.fn)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if recorder.rank_ended(rank, error):
                recorder.finish()


def _xla_lab_rank_call(fn):
    """The outermost frame of a rank's own code (the recorded stacks stop here)."""
    return fn()


_SET_UP: set[str] = set()


def _setup_worker(launch_dir: str) -> None:
    """Once per worker process, before anything touches the device."""
    if launch_dir in _SET_UP:
        return
    _SET_UP.add(launch_dir)
    started = "torch_xla" in sys.modules and sys.modules["torch_xla"]._XLAC._xla_runtime_is_initialized()
    if not started:
        point_dump_here(launch_dir)
