"""``%%xla`` (run a cell on the lazy XLA device and capture every sync) and ``%xla`` (status, history,
show, clear)."""

from __future__ import annotations

import ast
import hashlib
import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from xla_lab import session as session_mod
from xla_lab.capture.analysis import CellFiles
from xla_lab.interrupts import HeldInterrupts
from xla_lab.view.summary import SummaryView

LINE_COMMANDS = ("status", "history", "show", "clear", "queue", "report")
QUEUE_COMMANDS = ("status", "pause", "resume", "clear", "add", "run")
_current_cell = {"info": None}
RECORDING_NOTE = ("interrupted; the cell stops once xla_lab has finished its sync and its capture "
                  "(a running XLA compile cannot be stopped)")


def remember_cell(info) -> None:
    """``pre_run_cell`` callback: IPython numbers a cell before running it, and only the cell's
    ExecutionInfo says whether it counts (store_history) and which notebook cell it is (cell_id)."""
    _current_cell["info"] = info


def forget_cell() -> None:
    """``pre_execute`` callback (fires for silent executions too, which skip pre_run_cell)."""
    _current_cell["info"] = None
    _current_cell["was_xla"] = False


def after_cell(result=None) -> None:
    """``post_run_cell`` callback: a cell that was not ``%%xla`` may have compiled graphs; keep their
    HLO and keep the dump directory and logs from growing."""
    _stop_progress(_current_cell.pop("progress", None))  # (normally stopped already, before the capture)
    if _current_cell.get("was_xla"):
        return
    if result is not None and getattr(result, "error_in_exec", None) is not None:
        _repair_lost_tensors(None, _ipython(), result.error_in_exec)  # a plain cell's graph may have failed
    s = session_mod.current()
    if s is not None:
        try:
            s.absorb_outside_work()
        except Exception as exc:  # never disturb the user's cell for this
            print(f"xla_lab: could not read XLA's output after the cell: {exc}", file=sys.stderr)


@magics_class
class XlaMagics(Magics):
    @magic_arguments()
    @argument("--no-sync", action="store_true",
              help="Do not sync at the end of the cell: pending work stays lazy and joins the next graph.")
    @argument("-q", "--quiet", action="store_true", help="Record the cell but do not display the summary.")
    @argument("-n", "--name", default=None,
              help="Name for the cell's graphs (XLA module name, shown in dumps and summaries).")
    @argument("--track-lines", choices=("auto", "always"), default="auto",
              help="Source lines on traced ops cost a stack walk per op. 'auto' (default) pauses them once "
                   "a loop hits the cache twice in a row and resumes after any compile; 'always' keeps them.")
    @argument("command", nargs="*",
              help="Line magic only: status | history | show [N] | clear | report FILE.html | "
                   "queue [status | pause | resume | clear | run | add STEP ARG=8x128 ...].")
    @line_cell_magic
    def xla(self, line: str, cell: str | None = None):
        """Run a cell on the lazy XLA device and show what XLA did with it.

        As a cell magic (``%%xla [options]``), runs the cell in the notebook's namespace, syncs the
        work it left pending, and records every sync in the cell as a step: each
        ``torch_xla.sync()`` / ``xm.mark_step()``, each implicit one (``.item()``, ``print(t)``,
        ``.cpu()``) with the line that forced it, and the final one. The capture is then available
        as ``xla_lab.last()``; a summary is displayed under the cell.

        As a line magic: ``%xla status`` (device, runtime, dump directory, what is on),
        ``%xla history``, ``%xla show [N]`` (capture N of the history, default the last),
        ``%xla clear``, ``%xla report FILE.html`` (one self-contained HTML page of every capture),
        ``%xla queue`` (the precompile queue: ``status``, ``pause``, ``resume``, ``clear``, ``run``
        to run the pending jobs now, ``add STEP x=8x256 y=8x256`` to queue a variant of a marked step).
        """
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame from user tracebacks)
        args = parse_argstring(self.xla, line)
        if cell is None:
            return self._line(args.command)
        if args.command:
            raise UsageError(f"%%xla takes options only, got {' '.join(args.command)!r}; see %%xla?")
        return self._run_cell(args, cell)

    # --- %%xla ----------------------------------------------------------------------------------
    def _run_cell(self, args, cell: str):
        __tracebackhide__ = True  # noqa: F841
        shell = self.shell
        session = session_mod.get()
        _current_cell["was_xla"] = True
        info = _current_cell["info"]
        count = shell.execution_count - 1 if getattr(info, "store_history", False) else shell.execution_count
        filename = shell.compile.cache(cell, count)  # registers the source for tracebacks
        tree = ast.parse(cell, filename=filename)  # (cells were checked by hooks.check_xla_cell_syntax)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        body = compile(tree, filename, "exec", flags=shell.compile.flags, dont_inherit=True)
        expr = None
        if last is not None:
            expr = compile(ast.Expression(last.value), filename, "eval", flags=shell.compile.flags,
                           dont_inherit=True)
        with HeldInterrupts(RECORDING_NOTE) as held:  # (an interrupt here would leave the sync hook half set up)
            session.absorb_outside_work()  # e.g. silent executions since the last cell
            recorder = session.recorder(cell_id=_cell_id(shell, cell), execution_count=count, source=cell,
                                        cell_file=filename, graph_name=_graph_name(args.name, count),
                                        track_lines=args.track_lines,
                                        cells=CellFiles.from_shell(shell, filename, count))
            recorder.named = bool(args.name)
            recorder.start()
            _current_cell["progress"] = None if args.quiet else _start_progress(shell, session, recorder)
        error: BaseException | None = None
        result = None
        if held.interrupted:
            error = KeyboardInterrupt("interrupted before the cell's code ran")
        else:
            try:
                exec(body, shell.user_ns)
                if expr is not None:
                    result = eval(expr, shell.user_ns)
            except BaseException as exc:  # KeyboardInterrupt too: record, then re-raise below
                error = exc
        # xla_lab's own work from here on. An interrupt now (typically while the end-of-cell sync
        # compiles: XLA's C++ compile does not see it, Python raises it when the compile returns, i.e.
        # inside xla_lab) is held until the capture is recorded, then raised as the cell's own.
        with HeldInterrupts(RECORDING_NOTE) as held:
            # XLA rejected a graph in the cell (even one the user caught): later syncs must work.
            _repair_lost_tensors(recorder, shell, error)
            if not args.no_sync:
                try:
                    recorder.final_sync()
                except Exception as exc:
                    if error is None:
                        error = exc
                    else:
                        recorder.capture.notes.append(f"the final sync after the error also failed: {exc}")
                    _repair_lost_tensors(recorder, shell, exc)
            if held.interrupted and error is None:
                error = KeyboardInterrupt("interrupted during the end-of-cell sync (XLA ends a compile "
                                          "before it sees an interrupt)")
            _stop_progress(_current_cell.pop("progress", None))
            capture = recorder.finish(error)
            if recorder.device_error is not None:  # a graph of the cell failed while running
                _repair_lost_tensors(recorder, shell, recorder.device_error)
                if error is None:
                    error = GraphRunError(f"XLA failed while running the cell's graph: {recorder.device_error}")
            wait = session.queue.last_wait if session.queue is not None else None
            if wait is not None and wait.seconds >= 0.05:
                capture.notes.append(f"the cell waited {wait.seconds:.3f} s for the precompile job {wait.job} "
                                     "to finish compiling before it started")
            session.add(capture)
            if not args.quiet:
                _show(shell, SummaryView(capture))
        if held.interrupted and error is None:
            error = KeyboardInterrupt("interrupted after the cell's code had run (the capture is recorded)")
        if error is not None:
            raise error.with_traceback(_user_traceback(error.__traceback__, filename))
        return result

    # --- %xla ---------------------------------------------------------------------------------
    def _line(self, command: list[str]):
        session = session_mod.get()
        verb = command[0] if command else "status"
        if verb not in LINE_COMMANDS:
            raise UsageError(f"unknown %xla command {verb!r}; use one of: {', '.join(LINE_COMMANDS)}")
        if verb == "status":
            print(status_text(session))
        elif verb == "history":
            print(history_text(session))
        elif verb == "show":
            if not session.history:
                print("xla_lab: no %%xla cell has run yet.")
                return None
            index = -1
            if len(command) > 1:
                try:
                    index = int(command[1])
                except ValueError:
                    raise UsageError(f"%xla show takes a history index, got {command[1]!r}") from None
            try:
                capture = session.history[index]
            except IndexError:
                raise UsageError(f"no capture {index} (history has {len(session.history)})") from None
            _show(self.shell, SummaryView(capture, max_rows=None))
        elif verb == "queue":
            return self._queue(session, command[1:])
        elif verb == "report":
            if len(command) != 2:
                raise UsageError("usage: %xla report FILE.html")
            from xla_lab.view.static_html import report_html

            page = report_html(list(session.history))
            try:
                with open(command[1], "w", encoding="utf-8") as f:
                    f.write(page)
            except OSError as exc:
                raise UsageError(f"cannot write {command[1]}: {exc.strerror or exc}") from None
            print(f"xla_lab: wrote {len(session.history)} captures to {command[1]}")
        elif verb == "clear":
            n = len(session.history)
            session.clear()
            print(f"xla_lab: cleared {n} captures and the stored graphs.")
        return None


    def _queue(self, session, command: list[str]):
        """%xla queue [status|pause|resume|clear|run|add STEP ARG=AxB ...]"""
        from xla_lab.view import queue_view

        queue = session.start_queue(self.shell.user_ns)
        verb = command[0] if command else "status"
        if verb not in QUEUE_COMMANDS:
            raise UsageError(f"unknown %xla queue command {verb!r}; use one of: {', '.join(QUEUE_COMMANDS)}")
        if verb == "pause":
            queue.pause()
            print("xla_lab: precompile queue paused (jobs in the queue wait for %xla queue resume).")
        elif verb == "resume":
            queue.resume()
            print("xla_lab: precompile queue resumed.")
        elif verb == "clear":
            print(f"xla_lab: dropped {queue.clear()} pending precompile jobs.")
        elif verb == "run":
            # What a pause to read and think gives the queue, on demand (and deterministic in
            # notebooks run top to bottom, where cells follow each other with no idle time).
            queue.plan()
            queue.run_pending()
            _show(self.shell, queue_view.QueueView(queue))
        elif verb == "add":
            try:
                queue.add_variant(*_parse_variant(queue, command[1:]))
            except ValueError as exc:  # the step has not run, or has no such argument
                raise UsageError(str(exc)) from None
            _show(self.shell, queue_view.QueueView(queue))
        elif _is_terminal(self.shell):
            _show(self.shell, queue_view.QueueView(queue))
        else:
            from IPython.display import display

            display(queue_view.live_widget(queue))
        return None


def _parse_variant(queue, words: list[str]):
    """``STEP x=8x128 y=8x128`` -> (step, {"x": (8, 128), "y": (8, 128)})."""
    if not words:
        raise UsageError("usage: %xla queue add STEP ARG=8x128 [ARG=...]")
    steps = {s.name: s for s in queue.steps()}
    if words[0] not in steps:
        known = ", ".join(steps) or "none (mark one with @xla_lab.step)"
        raise UsageError(f"no marked step named {words[0]!r}; marked steps: {known}")
    shapes = {}
    for word in words[1:]:
        name, sep, shape = word.partition("=")
        try:
            if not sep:
                raise ValueError
            dims = tuple(int(d) for d in shape.lower().split("x")) if shape else ()
        except ValueError:
            raise UsageError(f"cannot read {word!r}: write ARG=8x128 (a scalar is ARG=)") from None
        if any(d < 1 for d in dims):
            raise UsageError(f"cannot read {word!r}: a dimension is a positive integer")
        shapes[name] = dims
    if not shapes:
        raise UsageError("give at least one ARG=shape, e.g. x=8x256")
    return steps[words[0]], shapes


def status_text(session) -> str:
    rt = session.runtime
    lines = ["xla_lab status"]
    for what, state in rt.describe():
        lines.append(f"  {what:<40} {state}")
    lines.append(f"  {'captured cells':<40} {len(session.history)}")
    store = session.store
    cap = (f"cap {store.max_graphs or 'none'} graphs / "
           f"{f'{store.max_bytes >> 20} MiB' if store.max_bytes else 'no byte cap'} (XLA_LAB_MAX_GRAPHS, XLA_LAB_MAX_GRAPH_MB)")
    lines.append(f"  {'distinct graphs stored':<40} {len(store)} ({cap})")
    lines.append(f"  {'dump directory size':<40} {session.dumps.size_bytes()} bytes")
    for p in rt.problems:
        lines.append(f"  ! {p}")
    return "\n".join(lines)


def history_text(session) -> str:
    if not session.history:
        return "xla_lab: no %%xla cell has run yet."
    lines = [f"{'#':>3} {'cell':>6} {'name':<16} {'steps':>6} {'compiled':>8} {'hits':>6} {'precomp':>7} "
             f"{'compile s':>10}"]
    if session.dropped_history:
        lines.append(f"    ({session.dropped_history} older captures dropped: XLA_LAB_MAX_HISTORY keeps "
                     f"the last {session.max_history})")
    for i, c in enumerate(session.history):
        cell = f"[{c.execution_count}]" if c.execution_count is not None else ""
        lines.append(f"{i:>3} {cell:>6} {(c.graph_name or '')[:16]:<16} {len(c.steps):>6} "
                     f"{c.compiles:>8} {c.cache_hits:>6} {c.precompiled:>7} {c.total('compile_s'):>10.3f}"
                     + ("  (raised)" if c.error else ""))
    return "\n".join(lines)


def _start_progress(shell, session, recorder):
    """Live compile progress under the running cell (notebooks only; see view/progress.py)."""
    if _is_terminal(shell):
        return None
    from xla_lab.view.progress import ProgressDisplay, expected_compile_s

    cell_id = recorder.capture.cell_id
    return ProgressDisplay(recorder.compile_watch(),  # (reads the history when asked: no copy of it is kept)
                           lambda compiling, nth: expected_compile_s(session.history, cell_id, compiling, nth)).start()


def _stop_progress(progress) -> None:
    if progress is not None:
        progress.stop()


def _show(shell, view) -> None:
    if _is_terminal(shell):
        from rich.console import Console

        Console().print(view)
    else:
        from IPython.display import display

        if isinstance(view, SummaryView):  # notebooks get the panel (same text/plain, more in HTML)
            from xla_lab.view.panel import panel_for

            history = session_mod.current().history if session_mod.current() else []
            earlier = []
            for c in history:
                if c is view.capture:
                    break
                if c.cell_id == view.capture.cell_id:
                    earlier.append(c)
            view = panel_for(view.capture, earlier, view.max_rows)
        display(view)


def _is_terminal(shell) -> bool:
    try:
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
    except ImportError:  # pragma: no cover
        return False
    return isinstance(shell, TerminalInteractiveShell) and sys.stdout.isatty()


def _cell_id(shell, source: str) -> str:
    """JupyterLab sends the cell's id with each execute request. Without one (nbclient, nbval, the
    terminal) the source stands in: re-running an unchanged cell is then the same cell, which is what
    recompile explanations compare with."""
    info = _current_cell["info"]
    if getattr(info, "cell_id", None):
        return str(info.cell_id)
    try:
        parent = shell.kernel.get_parent()
        cell_id = (parent or {}).get("metadata", {}).get("cellId")
        if cell_id:
            return str(cell_id)
    except Exception:
        pass
    return "source-" + hashlib.sha1(source.encode()).hexdigest()[:12]


def _graph_name(name: str | None, count) -> str:
    import re

    if name:
        return re.sub(r"[^A-Za-z0-9_]", "_", name)[:64] or "cell"
    return f"cell_{count}"


class GraphRunError(RuntimeError):
    """XLA failed while running a graph of the cell (e.g. out of memory): the sync had returned, the
    failure shows when xla_lab waits for the device at the end of the cell."""


def _repair_lost_tensors(recorder, shell, error: BaseException | None = None) -> None:
    """After a failed sync or run: see capture/recovery.py (torch_xla loses the tensors of a graph XLA
    rejects or fails to run; left alone they break every later sync or crash the kernel). A
    ``RuntimeError`` may be XLA reporting a failed run: only then is the heap scanned for the
    placeholders it left."""
    from xla_lab.capture.recovery import repair_lost_tensors

    run_failed = isinstance(error, RuntimeError)
    try:
        note = repair_lost_tensors(getattr(shell, "user_ns", None), str(error) if error else None, run_failed)
    except Exception as exc:  # never hide the user's error behind ours
        note = f"could not check for tensors lost by the failed sync: {type(exc).__name__}: {exc}"
    if note:
        if recorder is not None:
            recorder.capture.notes.append(note)
        print(f"xla_lab: {note}", file=sys.stderr)


def _ipython():
    from IPython import get_ipython

    return get_ipython()


_PACKAGE_DIR = str(__import__("pathlib").Path(__file__).resolve().parent)


def _user_traceback(tb, filename: str):
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
