"""Multi-process work started from the kernel (``xmp.spawn``, ``torch_xla.launch``, any fork): its
workers never write into, or read from, the kernel's capture files, and the workers of a launch are
recorded rank by rank (``capture/worker.py``) and handed back to the kernel when they end.

* ``xmp.spawn`` and ``torch_xla.launch`` both start their workers through
  ``torch_xla._internal.pjrt.run_multiprocess``; xla_lab wraps it. For the length of the call the
  workers' environment has none of the kernel's dump and sync-log settings (fork and spawn both take
  the environment of that moment), names the launch's own directory, and the per-rank function is
  wrapped in a ``RankWorker``.
* Any other fork of the kernel (a ``multiprocessing`` pool, a ``DataLoader`` worker) gets, in the
  child, a dump and sync log of its own under the kernel's ``foreign/`` directory, and the sync hook a
  running cell had installed is taken off: the kernel says when such a process compiled something,
  and never mistakes it for its own steps.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from xla_lab import runtime
from xla_lab.capture.worker import RankWorker
from xla_lab.settings import LAUNCH_DIR_ENV

_ENV_KEYS = ("XLA_FLAGS", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "XLA_SAVE_TENSORS_FILE", LAUNCH_DIR_ENV)


@dataclass
class Launch:
    """One ``run_multiprocess`` call: where its workers wrote, how it was started, how it ended."""

    directory: Path
    start_method: str
    function: str
    started: float
    ended: float = 0.0
    error: str | None = None  # what the launch raised in the kernel (a rank's exception, a dead worker)


class Launches:
    """The launches that ended and no capture has taken yet (the session's: ``Session.launches``)."""

    def __init__(self):
        self._ended: list[Launch] = []
        self._lock = threading.Lock()
        self.count = 0  # launches so far (their directories are numbered)

    def next_directory(self) -> Path:
        with self._lock:
            self.count += 1
            return launches_root() / f"launch_{self.count}"

    def ended(self, launch: Launch) -> None:
        with self._lock:
            self._ended.append(launch)

    def take(self, since: float) -> list[Launch]:
        """Launches that ended after ``since`` and no capture has taken yet (a cell's, at its end)."""
        with self._lock:
            out = [l for l in self._ended if l.ended >= since]
            self._ended = [l for l in self._ended if l.ended < since]
            return out

    def clear(self) -> None:
        """Forget every untaken launch and delete what its workers wrote."""
        with self._lock:
            ended, self._ended = self._ended, []
        for launch in ended:
            forget(launch)


_INSTALLED = {"run_multiprocess": None, "at_fork": False, "launches": None}


def install(launches: Launches) -> None:
    """Wrap torch_xla's launcher (its launches recorded in ``launches``) and watch forks (once per process)."""
    _INSTALLED["launches"] = launches
    root = foreign_root()
    if root is not None:
        root.mkdir(exist_ok=True)
    if not _INSTALLED["at_fork"]:
        os.register_at_fork(after_in_child=_forked_child)
        _INSTALLED["at_fork"] = True
    try:
        from torch_xla._internal import pjrt
    except Exception:  # no torch_xla: nothing to wrap
        return
    if getattr(pjrt.run_multiprocess, "__name__", "") == "_xla_lab_run_multiprocess":
        return
    original = pjrt.run_multiprocess

    def _xla_lab_run_multiprocess(fn, *args, start_method: str = "spawn", **kwargs):
        return _run_multiprocess(original, fn, args, kwargs, start_method)

    _xla_lab_run_multiprocess.__wrapped__ = original
    _INSTALLED["run_multiprocess"] = original
    pjrt.run_multiprocess = _xla_lab_run_multiprocess


def uninstall() -> None:
    original = _INSTALLED["run_multiprocess"]
    if original is not None:
        from torch_xla._internal import pjrt

        pjrt.run_multiprocess = original
        _INSTALLED["run_multiprocess"] = None


def launches_root() -> Path:
    root = runtime.prepare().workdir / "launches"
    root.mkdir(exist_ok=True)
    return root


def _run_multiprocess(original, fn, args, kwargs, start_method: str):
    import time

    import torch_xla

    if torch_xla._XLAC._xla_runtime_is_initialized():  # torch_xla refuses this itself: let it say so
        return original(fn, *args, start_method=start_method, **kwargs)
    launches: Launches = _INSTALLED["launches"]
    directory = launches.next_directory()
    directory.mkdir(parents=True, exist_ok=True)
    inner = getattr(fn, "fn", fn)  # torch_xla's _SpawnFn keeps the user's function as .fn
    launch = Launch(directory, start_method, getattr(inner, "__qualname__", repr(inner)), time.time())
    graph_name = torch_xla._XLAC._get_current_graph_name() or "SyncTensorsGraph"
    worker = RankWorker(fn, str(directory), graph_name)
    saved = {k: os.environ.get(k) for k in _ENV_KEYS}
    try:
        _workers_environment(directory)
        return original(worker, *args, start_method=start_method, **kwargs)
    except BaseException as exc:
        launch.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        launch.ended = time.time()
        launches.ended(launch)


def _workers_environment(directory: Path) -> None:
    """The environment the workers start with: the user's XLA flags without xla_lab's dump, no sync
    log (the workers record themselves), the launch's directory."""
    os.environ["XLA_FLAGS"] = " ".join(runtime.without_dump_flags(os.environ.get("XLA_FLAGS", "")))
    os.environ["PT_XLA_DEBUG_LEVEL"] = "0"
    os.environ.pop("PT_XLA_DEBUG_FILE", None)
    os.environ.pop("XLA_SAVE_TENSORS_FILE", None)
    os.environ[LAUNCH_DIR_ENV] = str(directory)


def forget(launch: Launch) -> None:
    """Delete what the launch's workers wrote, once the capture has read it."""
    shutil.rmtree(launch.directory, ignore_errors=True)


# --- forks that are not a launch's ------------------------------------------------------------------
def foreign_root() -> Path | None:
    state = runtime.current()
    return None if state is None else state.workdir / "foreign"


def _forked_child() -> None:
    """In every child forked from the kernel, before it can start a runtime: never the kernel's files."""
    _unhook_inherited_sync()
    if os.environ.get(LAUNCH_DIR_ENV):
        return  # a launch's worker: RankWorker points its dump at the launch's directory
    root = foreign_root()
    if root is None:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_dump_to" not in flags and not os.environ.get("PT_XLA_DEBUG_FILE"):
        return
    # (nothing is created here: XLA makes the dump directory if the child ever compiles)
    own = root / str(os.getpid())
    kept = runtime.without_dump_flags(flags)
    os.environ["XLA_FLAGS"] = " ".join(kept + [f"--xla_dump_to={own / 'dump'}", "--xla_dump_hlo_as_text"])
    os.environ["PT_XLA_DEBUG_FILE"] = str(root / f"{os.getpid()}.sync.log")
    os.environ["PT_XLA_DEBUG_LEVEL"] = "1"  # compiles only: enough to say what it did
    os.environ.pop("XLA_SAVE_TENSORS_FILE", None)


def _unhook_inherited_sync() -> None:
    """A cell's sync hook (and its listeners: a profiler window) belongs to the kernel's cell."""
    import sys

    torch_xla = sys.modules.get("torch_xla")
    if torch_xla is None:
        return
    xlac = torch_xla._XLAC
    marker = xlac._xla_step_marker
    while hasattr(marker, "__wrapped__"):
        marker = marker.__wrapped__
    xlac._xla_step_marker = marker


def foreign_work() -> list[str]:
    """Notes on forked processes (not a launch's) that compiled XLA graphs since the last call; their
    files are then deleted."""
    root = foreign_root()
    if root is None or not root.is_dir():
        return []
    notes = []
    pids = sorted({p.name.split(".")[0] for p in root.iterdir()})
    for pid in pids:
        log, dump = root / f"{pid}.sync.log", root / pid / "dump"
        try:
            compiles = log.read_text(errors="replace").count("Compilation Analysis: Compilation Cause")
        except OSError:
            compiles = 0
        modules = {p.name.split(".")[0] for p in dump.glob("module_*")} if dump.is_dir() else set()
        count = max(compiles, len(modules))
        if count:
            notes.append(f"a process forked from this kernel (pid {pid}) outside xmp.spawn / torch_xla.launch "
                         f"compiled {count} XLA graph{'s' if count != 1 else ''}; xla_lab does not capture it, and "
                         "its work is not among this cell's steps")
        if count or _gone(pid):
            shutil.rmtree(root / pid, ignore_errors=True)
            log.unlink(missing_ok=True)
    return notes


def _gone(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return True
    return False
