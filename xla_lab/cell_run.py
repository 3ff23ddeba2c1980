"""One run of a ``%%xla`` cell, start to end: compile the cell's code as IPython would
(``cell_code``), record it (``CellRecorder``),
run it in the notebook's namespace, sync what it left pending, repair tensors a failed graph lost,
and add the capture to the session's history. The result is a ``CellRun`` (the capture, the value of
the last expression, the error to raise as the cell's); ``magics.py`` only parses options and
displays it.

Interrupts: SIGINT is held while xla_lab sets up the recording (an interrupt there would leave the
sync hook half set up) and from the end of the cell's code until the capture is recorded (typically
an interrupt while the end-of-cell sync compiles: XLA's compile does not see it, Python raises it
when the compile returns, inside xla_lab); a held interrupt becomes the cell's KeyboardInterrupt.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from xla_lab.capture.analysis import CellFiles
from xla_lab.cell_code import compile_cell
from xla_lab.capture.records import CellCapture
from xla_lab.interrupts import HeldInterrupts
from xla_lab.profile.session import DEFAULT_STEPS as DEFAULT_PROFILE_STEPS

RECORDING_NOTE = ("interrupted; the cell stops once xla_lab has finished its sync and its capture "
                  "(a running XLA compile cannot be stopped)")
_PACKAGE_DIR = str(Path(__file__).resolve().parent)


@dataclass
class CellOptions:
    name: str | None = None  # names the cell's graphs (%%xla -n)
    track_lines: str = "auto"  # "auto" | "always"
    no_sync: bool = False  # leave pending work lazy
    profile: bool = False  # run the cell under a profiler session and join measured time (--profile)
    profile_steps: int | None = DEFAULT_PROFILE_STEPS  # explicit steps the session records (None: all)


@dataclass
class CellRun:
    capture: CellCapture
    result: Any = None  # the value of the cell's last expression
    error: BaseException | None = None  # raise this as the cell's own (its traceback starts in the cell)


class GraphRunError(RuntimeError):
    """XLA failed while running a graph of the cell (e.g. out of memory): the sync had returned, the
    failure shows when xla_lab waits for the device at the end of the cell."""


def prompt_of(shell, info) -> int:
    """The prompt of the running cell: IPython counts a stored cell before ``pre_run_cell``."""
    return shell.execution_count - 1 if getattr(info, "store_history", False) else shell.execution_count


def run_cell(shell, session, source: str, options: CellOptions, info=None,
             progress: Callable | None = None) -> CellRun:
    """``info``: IPython's ExecutionInfo of the execution (from ``pre_run_cell``), if any;
    ``progress(recorder)``: starts a live view of compiles and returns something with ``stop()``."""
    __tracebackhide__ = True  # noqa: F841
    count = prompt_of(shell, info)
    filename = shell.compile.cache(source, count)  # registers the user's lines for tracebacks
    code = compile_cell(shell, source, filename)  # (hooks.check_xla_cell_syntax raised its SyntaxError)
    watch = None
    with HeldInterrupts(RECORDING_NOTE) as held:
        session.absorb_outside_work()  # e.g. silent executions since the last cell
        recorder = session.recorder(cell_id=cell_id(shell, source, info), execution_count=count, source=source,
                                    cell_file=filename, graph_name=graph_name(options.name, count),
                                    track_lines=options.track_lines, cells=CellFiles.from_shell(shell, filename, count))
        recorder.named = bool(options.name)
        recorder.start()
        layer_calls = _record_layer_calls(shell)
        profiler = _start_profiler(recorder, options.profile_steps) if options.profile else None
        window = _open_compile_window(recorder) if profiler is None else None
        watch = progress(recorder) if progress is not None else None
    error: BaseException | None = None
    result = None
    if held.interrupted:
        error = KeyboardInterrupt("interrupted before the cell's code ran")
    else:
        try:
            exec(code.body, shell.user_ns)
            if code.value is not None:
                result = eval(code.value, shell.user_ns)
        except BaseException as exc:  # KeyboardInterrupt too: record, then raise as the cell's
            error = exc
    with HeldInterrupts(RECORDING_NOTE) as held:
        if layer_calls is not None:
            session.keep_layer_calls(*layer_calls.finish(), count)
        # XLA rejected a graph in the cell (even one the user caught): later syncs must work.
        repair_and_note_lost_tensors(shell, error, recorder.capture)
        if not options.no_sync:
            try:
                if window is not None:
                    window.before_final_sync()
                recorder.final_sync()
            except Exception as exc:
                if error is None:
                    error = exc
                else:
                    recorder.capture.notes.append(f"the final sync after the error also failed: {exc}")
                repair_and_note_lost_tensors(shell, exc, recorder.capture)
        if held.interrupted and error is None:
            error = KeyboardInterrupt("interrupted during the end-of-cell sync (XLA ends a compile "
                                      "before it sees an interrupt)")
        if watch is not None:
            watch.stop()
        capture = recorder.end(error)  # (waits for the cell's graphs to run)
        _attach_launches(session, recorder, capture)
        if recorder.device_error is not None:  # a graph of the cell failed while running
            repair_and_note_lost_tensors(shell, recorder.device_error, capture)
            if error is None:
                error = GraphRunError(f"XLA failed while running the cell's graph: {recorder.device_error}")
        wait = session.queue.last_wait if session.queue is not None else None
        if wait is not None and wait.seconds >= 0.05:
            capture.notes.append(f"the cell waited {wait.seconds:.3f} s for the precompile job {wait.job} "
                                 "to finish compiling before it started")
        session.add(capture)

        def complete():  # what the cell's end need not wait for (Session.defer)
            # The profiler sessions end here: ending one converts every event it recorded (a second for a
            # large model's step), and nothing runs on the device before this is done. In lean capture
            # they bring the modules the cell compiled, and which module each execution ran.
            profile_data = _stop_profiler(recorder, profiler)
            chunks = window.stop() if window is not None else []
            modules = lean = None
            if session.lean:
                recorded = ([(profile_data, profiler.executions_at_start)] if profile_data else []) + \
                    list(zip(chunks, window.opened_at if window is not None else []))
                if not recorded and (capture.metrics.get("counts") or {}).get("compile"):
                    # (the window started closed and a compile came: a session ended now lists its module)
                    from xla_lab.session import live_modules

                    recorded = [(live_modules(), -1)]
                modules = session.lean_modules.new([data for data, _ in recorded], capture.notes)
                lean = (session.lean_modules, recorded)
            recorder.build(modules, lean)
            if session.lean:
                session.adopt_lean_modules(recorder.outside_modules)
            capture.notes.extend(recorder.complete())
            if profiler is not None:
                _attach_profile(session, capture, profiler, profile_data)
            _attach_compile_profiles(capture, window, profiler, profile_data, chunks, recorder.sync_windows())
            _advise(shell, capture)
            if session.queue is not None:
                capture.notes.extend(session.queue.explain_misses(capture, session.explain_pair))
            session.store.trim()  # the LRU cap on stored graph text (capture/store.py)

        session.defer(capture, complete)
    if held.interrupted and error is None:
        error = KeyboardInterrupt("interrupted after the cell's code had run (the capture is recorded)")
    if error is not None:
        error = error.with_traceback(user_traceback(error.__traceback__, filename))
    return CellRun(capture, result, error)


def _attach_launches(session, recorder, capture: CellCapture) -> None:
    """The ranks of the multi-process launches that ran in the cell (``launch.py``), and a word on
    forked processes xla_lab could not capture. Never costs the capture."""
    from xla_lab import launch
    from xla_lab.capture.ranks import read_launch

    try:
        capture.notes.extend(launch.foreign_work())
        for n, done in enumerate(session.launches.take(since=capture.started_at), start=len(capture.launches) + 1):
            try:
                ranks, processes, notes = read_launch(
                    done.directory, n, store=session.store, cells=recorder.cells, cell_file=recorder.cell_file,
                    source_lines=recorder.source_lines, execution_count=capture.execution_count)
            finally:
                launch.forget(done)
            capture.ranks.extend(ranks)
            capture.launches.append({"launch": n, "function": done.function, "start_method": done.start_method,
                                     "processes": processes, "error": done.error})
            capture.notes.extend(notes)
    except Exception as exc:
        capture.notes.append(f"the workers' captures could not be read: {type(exc).__name__}: {exc}")


def _start_profiler(recorder, steps: int | None):
    from xla_lab.profile.session import ProfilerBusy, ProfilerSession

    profiler = ProfilerSession(steps)
    try:
        profiler.start()
    except ProfilerBusy as exc:
        recorder.capture.notes.append(f"not profiled: {exc}")
        return None
    recorder.on_explicit_sync(profiler.after_sync)  # ends the session after its steps
    return profiler


def _open_compile_window(recorder):
    """The compile profile's session (``profile/compile_window.py``), unless switched off."""
    from xla_lab import settings
    from xla_lab.profile.compile_window import CompileWindow

    if not settings.current().compile_profile and not recorder.lean:  # (lean: the window brings the modules)
        return None
    window = CompileWindow()
    if window.start(closed=_ran_steady_before(recorder)):
        recorder.on_explicit_sync(window.after_sync)  # closes it once the loop is steady
    return window


def _ran_steady_before(recorder) -> bool:
    """The cell's last run had steps and compiled none (a cached loop run again)."""
    last = next((c for c in reversed(recorder.earlier) if c.cell_id == recorder.capture.cell_id), None)
    return last is not None and bool(last.steps) and all(s.cache != "miss" for s in last.steps)


def _attach_compile_profiles(capture: CellCapture, window, profiler, profile_data: bytes | None,
                             chunks: list[bytes], sync_windows: dict[int, tuple[float, float]]) -> None:
    """Each compiled graph's compile profile, from the window's or the ``--profile`` session's bytes (and
    the execution wait of the cached steps the session recorded)."""
    from xla_lab.profile.attach import attach_compile_profiles
    from xla_lab import settings

    if not settings.current().compile_profile:  # (lean capture opens the window for its modules anyway)
        return
    try:
        if profiler is not None:
            attach_compile_profiles(capture, [profile_data] if profile_data else [], failure=profiler.failure or (
                None if profile_data else "the --profile session recorded nothing"), sync_windows=sync_windows)
        elif window is not None:
            attach_compile_profiles(capture, chunks, missed=window.missed, failure=window.failure,
                                    started_closed=window.started_closed, sync_windows=sync_windows)
    except Exception as exc:  # never lose the capture to a compile profile
        capture.notes.append(f"the compile profiles could not be read: {type(exc).__name__}: {exc}")


class _LayerCalls:
    """The stacks of identical layers a cell may call, and the recording of their calls."""

    def __init__(self, stacks: dict):
        from xla_lab.precompile.layer_call import CallRecording

        self.stacks = stacks
        self.recording = CallRecording(stacks)

    def finish(self) -> tuple[dict, dict]:
        return self.stacks, self.recording.finish()


def _record_layer_calls(shell) -> _LayerCalls | None:
    """Watch how the cell calls the notebook's stacks of identical layers (the scan what-if rebuilds
    their inputs from it). Never worth the cell: any failure records nothing."""
    from xla_lab.precompile.scan_whatif import stack_modules

    try:
        stacks = dict(stack_modules(shell.user_ns))
        return _LayerCalls(stacks) if stacks else None
    except Exception:
        return None


def _advise(shell, capture: CellCapture) -> None:
    """What would cut the cell's compiles (``profile/compile_advice.py``), with the notebook's stacks
    of identical layers as candidates for scan_layers."""
    from xla_lab.precompile.scan_whatif import layer_stacks
    from xla_lab.profile.compile_advice import advise

    try:
        profiled = any(s.cache == "miss" and s.artifacts is not None and s.artifacts.compile_profile
                       for s in capture.steps)
        stacks = layer_stacks(shell.user_ns, CellFiles.from_shell(shell, None, None).files) if profiled else []
        capture.advice = advise(capture, stacks)
    except Exception as exc:  # advice is never worth the capture
        capture.notes.append(f"the compile advice failed: {type(exc).__name__}: {exc}")


def _stop_profiler(recorder, profiler) -> bytes | None:
    """End the ``--profile`` session (if any): its bytes, or None (its failure is on ``profiler``)."""
    if profiler is None:
        return None
    try:
        return profiler.stop()
    except Exception as exc:
        recorder.capture.notes.append(f"the profile could not be read: {type(exc).__name__}: {exc}")
        return None


def _attach_profile(session, capture: CellCapture, profiler, data: bytes | None) -> None:
    from xla_lab.profile.attach import attach_profile

    try:
        if data is None:
            return
        if profiler.failure:
            capture.notes.append(f"not profiled: {profiler.failure}")
            return
        attach_profile(capture, data, session.runtime.device_env, recorded=profiler.recorded_executions,
                       max_steps=profiler.max_steps)
        session.keep_profile(capture, data)
    except Exception as exc:  # never lose the capture to the profile
        capture.notes.append(f"the profile could not be joined: {type(exc).__name__}: {exc}")


def repair_and_note_lost_tensors(shell, error: BaseException | None = None,
                                 capture: CellCapture | None = None) -> None:
    """After a failed sync or run: repair the tensors XLA lost (``capture.recovery.repair_lost_tensors``:
    torch_xla loses the tensors of a graph XLA rejects or fails to run; left alone they break every
    later sync or crash the kernel) and note which of the user's variables were hit. A
    ``RuntimeError`` may be XLA reporting a failed run: only then is the heap scanned for the
    placeholders it left. The note goes to the capture (if any) and to stderr; a failure of the repair
    itself is noted the same way, never raised."""
    from xla_lab.capture.recovery import repair_lost_tensors as repair

    run_failed = isinstance(error, RuntimeError)
    try:
        note = repair(getattr(shell, "user_ns", None), str(error) if error else None, run_failed)
    except Exception as exc:  # never hide the user's error behind ours
        note = f"could not check for tensors lost by the failed sync: {type(exc).__name__}: {exc}"
    if note:
        if capture is not None:
            capture.notes.append(note)
        print(f"xla_lab: {note}", file=sys.stderr)


def user_traceback(tb, filename: str):
    """The traceback from the user's cell on, without xla_lab's own frames at its end (the sync hook
    wraps ``torch_xla.sync``: a failing sync must end at torch_xla's frame, as without xla_lab)."""
    first = tb
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if tb is None:
        return first
    last_outside = None
    entry = tb
    while entry is not None:
        if not entry.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            last_outside = entry
        entry = entry.tb_next
    if last_outside is not None:
        last_outside.tb_next = None
    return tb


def cell_id(shell, source: str, info=None) -> str:
    """JupyterLab sends the cell's id with each execute request. Without one (nbclient, nbval, the
    terminal) the source stands in: re-running an unchanged cell is then the same cell, which is what
    recompile explanations compare with."""
    if getattr(info, "cell_id", None):
        return str(info.cell_id)
    try:
        parent = shell.kernel.get_parent()
        found = (parent or {}).get("metadata", {}).get("cellId")
        if found:
            return str(found)
    except Exception:
        pass
    return "source-" + hashlib.sha1(source.encode()).hexdigest()[:12]


def graph_name(name: str | None, count) -> str:
    if name:
        return re.sub(r"[^A-Za-z0-9_]", "_", name)[:64] or "cell"
    return f"cell_{count}"
