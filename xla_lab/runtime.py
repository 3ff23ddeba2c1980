"""Set the XLA runtime up for capture before the PJRT client starts, and say so when it is too late.

torch_xla reads its debug switches once: ``XLA_FLAGS`` when the PJRT client is created,
``PT_XLA_DEBUG_*``, ``XLA_SAVE_TENSORS_FILE`` and ``XLA_HLO_DEBUG`` on first use. They can be set
after ``import torch_xla`` as long as no XLA device was used yet. ``prepare()`` sets them, pointing
every file at a private directory of this kernel that is removed when the process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from xla_lab import settings

HOW_TO_FIX = (
    "Run `%load_ext xla_lab` before anything touches an XLA device "
    "(restart the kernel and make it the first cell), or set the variables yourself before starting."
)


@dataclass
class RuntimeState:
    """What ``prepare()`` did and what capture can rely on in this process."""

    workdir: Path
    dump_dir: Path
    debug_file: Path
    ir_file: Path
    device_env: str
    pjrt_device_set_by_us: bool
    too_late: bool = False
    mode: str = "full"  # "full" (XLA's dump) | "lean" (modules from the profiler session; lean.py)
    hlo_dump: bool = True  # XLA_FLAGS dump reaches us
    sync_log: bool = True  # PT_XLA_DEBUG analysis reaches us (steps, causes, hashes)
    execution_log: bool = True  # ... with a block per execution (level 2), not only per compile (level 1)
    ir_log: bool = False  # torch_xla's IR text of every sync (opt-in: XLA_LAB_IR_LOG=1, costly)
    debug_metadata: bool = True  # source lines on IR nodes / HLO instructions
    persistent_cache: str = "not set up"  # set by xla_lab.precompile.persistent.enable
    problems: list[str] = field(default_factory=list)

    def describe(self) -> list[tuple[str, str]]:
        """(what, state) rows for ``%xla status``."""
        on = lambda b: "on" if b else "OFF"  # noqa: E731
        lean = self.mode == "lean"
        return [
            ("device", self.device_env),
            ("runtime started", "yes" if runtime_started() else "not yet"),
            ("capture mode", "lean (no XLA dump; %xla mode full before the first device use for every view)"
             if lean else "full (%xla mode lean before the first device use: near-plain compiles)"),
            ("work directory", str(self.workdir)),
            ("HLO dump (before/after optimization)",
             "off (lean: the optimized module comes from the compile's profiler session)" if lean and not self.hlo_dump
             else on(self.hlo_dump)),
            ("sync log (steps, causes, graph hashes)", on(self.sync_log) if self.execution_log or not self.sync_log
             else "compiles only (lean: cache hits from the sync hook and metrics)"),
            ("lazy-IR text of every sync (XLA_LAB_IR_LOG=1)", "on" if self.ir_log else "off (graph rebuilt from HLO)"),
            ("IR/HLO source-line metadata", on(self.debug_metadata)),
            ("persistent compile cache", self.persistent_cache),
        ]


_STATE: RuntimeState | None = None


# XLA_FLAGS that point XLA's dump somewhere: xla_lab sets them for the kernel (and its launches' workers)
DUMP_FLAGS = ("--xla_dump_to", "--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto")


def without_dump_flags(flags: str) -> list[str]:
    """The XLA flags of ``flags`` other than the dump's."""
    return [f for f in flags.split() if not f.startswith(DUMP_FLAGS)]


def current() -> RuntimeState | None:
    """The state ``prepare()`` made, if it ran in this process."""
    return _STATE


def runtime_started() -> bool:
    """True once the PJRT client exists (after that, XLA_FLAGS and debug switches are fixed)."""
    if "torch_xla" not in sys.modules:
        return False
    try:
        import torch_xla

        return bool(torch_xla._XLAC._xla_runtime_is_initialized())
    except Exception:  # a broken torch_xla import is reported elsewhere
        return False


def _already_used_env_at_start() -> dict[str, bool]:
    """Which of our switches were in force when the runtime started (too-late case)."""
    flags = os.environ.get("XLA_FLAGS", "")
    return {
        "hlo_dump": "--xla_dump_to" in flags and "--xla_dump_hlo_as_text" in flags,
        "sync_log": os.environ.get("PT_XLA_DEBUG_LEVEL", "") not in ("", "0", "1")
        and bool(os.environ.get("PT_XLA_DEBUG_FILE")),
        "ir_log": bool(os.environ.get("XLA_SAVE_TENSORS_FILE")),
        "debug_metadata": os.environ.get("XLA_HLO_DEBUG") == "1",
    }


def prepare() -> RuntimeState:
    """Point XLA's debug output at a private directory of this kernel. Idempotent per process."""
    global _STATE
    if _STATE is not None:
        return _STATE
    workdir = Path(tempfile.mkdtemp(prefix=f"xla_lab_{os.getpid()}_"))
    atexit.register(shutil.rmtree, workdir, True)
    dump_dir = workdir / "dump"
    dump_dir.mkdir()
    debug_file = workdir / "sync.log"
    ir_base = workdir / "ir.log"
    set_by_us = "PJRT_DEVICE" not in os.environ
    too_late = runtime_started()
    env_at_start = _already_used_env_at_start()  # read before we change anything
    lean = settings.current().capture == "lean" and not too_late
    _set_debug_env(dump_dir, debug_file, ir_base, set_by_us=set_by_us and not too_late, lean=lean)
    ir_file = workdir / "ir.log.0"  # torch_xla appends the device ordinal to the saved-tensors path
    if too_late:
        # XLA_FLAGS were read when the client started. The other switches are read on the first
        # compile/execution, so they still work if nothing ran yet; recorder checks that they did.
        import torch_xla

        ran_already = _ran_anything()
        used = env_at_start if ran_already else {}
        state = RuntimeState(
            workdir, dump_dir, debug_file, ir_file, os.environ.get("PJRT_DEVICE", "?"), False,
            too_late=True,
            hlo_dump=False,
            sync_log=used.get("sync_log", True),
            ir_log=used.get("ir_log", ir_log_requested()),
            debug_metadata=used.get("debug_metadata", True),
        )
        torch_xla._XLAC._set_ir_debug(True)  # source locations on IR nodes can be turned on now
        state.problems.append(too_late_message(state))
        _STATE = state
        return state
    if "torch_xla" in sys.modules:
        # imported before xla_lab (not yet used): it read XLA_IR_DEBUG at import, so source lines on
        # traced ops are turned on here (the other switches are read when the runtime starts)
        sys.modules["torch_xla"]._XLAC._set_ir_debug(True)
    _STATE = RuntimeState(workdir, dump_dir, debug_file, ir_file, os.environ["PJRT_DEVICE"], set_by_us,
                          ir_log=ir_log_requested(), problems=_PENDING_PROBLEMS[:])
    if lean:
        _STATE.mode, _STATE.hlo_dump, _STATE.execution_log = "lean", False, False
    return _STATE


LEAN_TOO_LATE = (
    "too late to change the capture mode: XLA reads its dump flags, and torch_xla its sync-log level, once, "
    "when the runtime starts, and it has started in this kernel. Restart the kernel and run "
    "`%xla mode {mode}` right after `%load_ext xla_lab` (or set XLA_LAB_CAPTURE={mode} before starting)."
)


def set_mode(mode: str) -> str:
    """Switch between full and lean capture before the runtime starts (``%xla mode``); returns what
    happened, in words. After the runtime started the switches are fixed: says so and changes nothing."""
    state = prepare()
    if mode not in settings.CAPTURE_MODES:
        return f"unknown capture mode {mode!r}: use one of {', '.join(settings.CAPTURE_MODES)}"
    if mode == state.mode:
        return f"capture mode is already {mode}"
    if state.too_late or runtime_started():
        return LEAN_TOO_LATE.format(mode=mode)
    lean = mode == "lean"
    _set_debug_env(state.dump_dir, state.debug_file, state.workdir / "ir.log", set_by_us=False, lean=lean)
    state.mode, state.hlo_dump, state.execution_log = mode, not lean, not lean
    return f"capture mode: {mode}. " + MODE_WORDS[mode]


MODE_WORDS = {
    "lean": ("No XLA dump and no per-execution analysis: compiles and cached steps run at near plain torch_xla "
             "speed. The optimized module, its buffers, every op's call stack and the compile profile come from "
             "the compile's profiler session; the graph before optimization (the lazy graph view, baked-in "
             "constants, exact recompile reasons) is not recorded: re-run a cell in full mode for it."),
    "full": ("XLA's dump of every compile and torch_xla's analysis of every execution: every view, at the cost "
             "of slower compiles (about 1.1-1.4x) and about 0.1 ms per sync."),
}


def too_late_message(state: RuntimeState) -> str:
    missing = [what for what, ok in (
        ("HLO before/after optimization (XLA_FLAGS dump)", state.hlo_dump),
        ("per-step sync causes, lines and graph hashes (PT_XLA_DEBUG)", state.sync_log),
        ("source lines in HLO metadata (XLA_HLO_DEBUG)", state.debug_metadata),
    ) if not ok]
    return (
        "The XLA runtime had already started when xla_lab was loaded, so these are unavailable in "
        "this kernel: " + "; ".join(missing) + ". Still captured: compile/execute/transfer timings, "
        "cache hits and misses from torch_xla's metrics. " + HOW_TO_FIX
    )


def ir_log_requested() -> bool:
    """torch_xla writes the IR text of *every* sync, cache hits included, once this is on: in a
    fast loop that costs more than the step itself, so it is opt-in (``XLA_LAB_IR_LOG``)."""
    return settings.current().ir_log


def _ran_anything() -> bool:
    import torch_xla.debug.metrics as met

    names = set(met.metric_names())
    return any(n in names and met.metric_data(n)[0] > 0 for n in ("CompileTime", "ExecuteTime"))


_PENDING_PROBLEMS: list[str] = []


def _set_debug_env(dump_dir: Path, debug_file: Path, ir_base: Path, set_by_us: bool, lean: bool = False) -> None:
    """``lean``: no dump flags, and torch_xla's analysis of compiles only (level 1)."""
    if set_by_us:
        os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["XLA_IR_DEBUG"] = "1"
    os.environ["XLA_HLO_DEBUG"] = "1"
    flags = os.environ.get("XLA_FLAGS", "")
    inherited = os.environ.get(settings.PID_ENV) not in (None, str(os.getpid()))
    ours = f"--xla_dump_to={dump_dir}" in flags  # set by prepare(), now switched by %xla mode
    if "--xla_dump_to" in flags and not inherited and not ours:  # inherited: a parent process's xla_lab set it
        _PENDING_PROBLEMS.append(
            "XLA_FLAGS already had --xla_dump_to; xla_lab replaced it with its own directory "
            f"({dump_dir}) so it can read and clean the dump."
        )
        flags = " ".join(without_dump_flags(flags))
    if ours:
        flags = " ".join(without_dump_flags(flags))
    if lean:
        os.environ["XLA_FLAGS"] = flags
    else:
        # Text for people, proto for the Python call stack of every op (see hlo/proto_frames.py).
        os.environ["XLA_FLAGS"] = (f"{flags} --xla_dump_to={dump_dir} --xla_dump_hlo_as_text "
                                   "--xla_dump_hlo_as_proto").strip()
    os.environ["PT_XLA_DEBUG_LEVEL"] = "1" if lean else "2"
    os.environ["PT_XLA_DEBUG_FILE"] = str(debug_file)
    os.environ.setdefault("PT_XLA_DEBUG_MAX_FRAME", "32")
    if ir_log_requested():
        os.environ["XLA_SAVE_TENSORS_FILE"] = str(ir_base)
        os.environ["XLA_SAVE_TENSORS_FMT"] = "text"
    elif inherited:
        os.environ.pop("XLA_SAVE_TENSORS_FILE", None)
    os.environ[settings.PID_ENV] = str(os.getpid())
