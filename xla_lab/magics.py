"""``%%xla`` (run a cell on the lazy XLA device and show what XLA did) and ``%xla`` (status, history,
show, clear, report, queue): argument parsing and display. The work is elsewhere: a cell's run in
``cell_run``, the session's state in ``session``, the views in ``view/``."""

from __future__ import annotations

import sys

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from xla_lab import cell_run, hooks
from xla_lab import session as session_mod
from xla_lab.capture.prompts import PROMPTS
from xla_lab.interrupts import HeldInterrupts
from xla_lab.profile.session import DEFAULT_STEPS as DEFAULT_PROFILE_STEPS
from xla_lab.settings import SAVE_CHOICES
from xla_lab.view.report import MAX_ROWS, Report

LINE_COMMANDS = ("status", "history", "show", "clear", "queue", "report", "save", "profile", "whatif", "fit",
                 "mode")
QUEUE_COMMANDS = ("status", "pause", "resume", "clear", "add", "run")


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
    @argument("--profile", action="store_true",
              help="Run the cell under a profiler session and show measured time per kernel, aten op, source "
                   "line and step, with a roofline reading (%%xla profile on: every cell).")
    @argument("--profile-steps", default=None, metavar="N|all",
              help=f"With --profile: record the cell's first N explicit steps (default {DEFAULT_PROFILE_STEPS}, or what "
                   "%%xla profile on STEPS set: a cached loop's first steps measure what the rest cost) or 'all' of "
                   "them (slower, and the recording grows with the loop). Implies --profile.")
    @argument("--save", choices=SAVE_CHOICES, default=None,
              help="What the notebook keeps of this cell's output: 'full' (every view, packed) or 'summary' "
                   "(text and an HTML summary, for notebooks you share). Default: the session's (%%xla save).")
    @argument("command", nargs="*",
              help="Line magic only: status | history | show [N] | clear | report FILE.html | "
                   "queue [status | pause | resume | clear | run | add STEP ARG=8x128 ...] | save [full | summary] | mode [full | lean] | "
                   "profile [on [STEPS | all] | off | export DIR [N]].")
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
        ``%xla clear``, ``%xla mode [full|lean]`` (the capture mode: lean writes no XLA dump, for
        near-plain compiles; chosen before the first device use), ``%xla report FILE.html`` (one self-contained HTML page of every capture),
        ``%xla queue`` (the precompile queue: ``status``, ``pause``, ``resume``, ``clear``, ``run``
        to run the pending jobs now, ``add STEP x=8x256 y=8x256`` to queue a variant of a marked step),
        ``%xla save full|summary`` (what notebooks keep of later ``%%xla`` outputs: every view, or a
        summary for notebooks you share; ``XLA_LAB_SAVE`` sets the starting choice),
        ``%xla profile on|off`` (profile every ``%%xla`` cell, as ``--profile`` does for one),
        ``%xla fit STEP batch|ARG[DIM]... --budget 16GiB|v5e|A100 [--multiple M] [--max N] [--wait]``
        (the largest batch or sequence length of a marked step whose compiled peak fits the budget,
        from a few compiles in the background; ``%xla fit`` alone shows the latest),
        ``%xla profile export DIR [N]`` (the profile of capture N, default the last profiled one:
        ``DIR/trace.json`` for Perfetto / chrome://tracing, and DIR as an XProf / TensorBoard log
        directory).
        """
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame from user tracebacks)
        if cell is None and line.split()[:1] == ["fit"]:  # (its options are its own: see _fit)
            return self._fit(session_mod.get(), line.split()[1:])
        args = parse_argstring(self.xla, line)
        if cell is None:
            return self._line(args.command)
        if args.command:
            raise UsageError(f"%%xla takes options only, got {' '.join(args.command)!r}; see %%xla?")
        return self._cell(args, cell)

    # --- %%xla ----------------------------------------------------------------------------------
    def _cell(self, args, cell: str):
        __tracebackhide__ = True  # noqa: F841
        session = session_mod.get()
        hooks.CELLS.xla_cell_started()
        progress = None if args.quiet or _is_terminal(self.shell) else _progress(session)
        run = cell_run.run_cell(self.shell, session, cell,
                                cell_run.CellOptions(name=args.name, track_lines=args.track_lines, no_sync=args.no_sync,
                                                     profile=(args.profile or session.profile_every_cell
                                                              or args.profile_steps is not None),
                                                     profile_steps=(session.profile_steps if args.profile_steps is None
                                                                    else _profile_steps(args.profile_steps))),
                                hooks.CELLS.info, progress=progress)
        error = run.error
        with HeldInterrupts(cell_run.RECORDING_NOTE) as held:  # (the capture is recorded: show or send it whole)
            if args.quiet:
                _tell_side_panel(self.shell, run.capture)
            else:
                session.settle()  # the views show the analysis
                _show(self.shell, _report(session, run.capture), save=args.save or session.save)
        if held.interrupted and error is None:
            error = KeyboardInterrupt("interrupted after the cell's code had run (the capture is recorded)")
        if error is not None:
            raise error
        return run.result

    # --- %xla ---------------------------------------------------------------------------------
    def _line(self, command: list[str]):
        session = session_mod.get()
        session.settle()  # (every command reads complete captures)
        verb = command[0] if command else "status"
        if verb not in LINE_COMMANDS:
            raise UsageError(f"unknown %xla command {verb!r}; use one of: {', '.join(LINE_COMMANDS)}")
        if verb == "status":
            from xla_lab import compat
            from xla_lab.view.status import status_text

            print(status_text(session, compat.versions()))
        elif verb == "history":
            from xla_lab.view.status import history_text

            print(history_text(session))
        elif verb == "show":
            if not session.history:
                print("xla_lab: no %%xla cell has run yet.")
                return None
            _show(self.shell, _report(session, _history_entry(session, command[1:]), max_rows=None), save=session.save)
        elif verb == "queue":
            return self._queue(session, command[1:])
        elif verb == "report":
            self._report(session, command[1:])
        elif verb == "save":
            self._save(session, command[1:])
        elif verb == "profile":
            self._profile(session, command[1:])
        elif verb == "whatif":
            return self._whatif(session, command[1:])
        elif verb == "mode":
            self._mode(session, command[1:])
        elif verb == "clear":
            n = len(session.history)
            session.clear()
            print(f"xla_lab: cleared {n} captures and the stored graphs.")
        return None

    def _whatif(self, session, words: list[str]):
        """``%xla whatif scan EXPR input=8x32x192``: scan_layers' compile measured beside the unrolled
        stack's (``precompile/scan_whatif.py``)."""
        usage = "usage: %xla whatif scan LAYERS input=8x32x192 (LAYERS: e.g. model.layers, a stack of identical layers)"
        if len(words) != 3 or words[0] != "scan" or not words[2].startswith("input="):
            raise UsageError(usage)
        from xla_lab.precompile.scan_whatif import measure, optimizer_of

        try:
            layers = eval(words[1], self.shell.user_ns)
        except Exception as exc:
            raise UsageError(f"cannot evaluate {words[1]!r}: {type(exc).__name__}: {exc}") from None
        try:
            shape = tuple(int(d) for d in words[2][len("input="):].lower().split("x"))
        except ValueError:
            raise UsageError(f"cannot read the input shape {words[2]!r}: write it as input=8x32x192") from None
        if not shape or any(d < 1 for d in shape):
            raise UsageError(f"cannot read the input shape {words[2]!r}: dimensions are positive integers")
        if session.queue is not None:
            session.queue.wait_for_job()  # never beside a precompile job
        try:
            return measure(words[1], layers, shape, step_compile_s=_step_compile_s(session, words[1]),
                           optimizer=optimizer_of(layers, self.shell.user_ns))
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from None

    def _fit(self, session, words: list[str]):
        """``%xla fit STEP batch --budget 16GiB``: see ``precompile/fit.py``."""
        import argparse

        from xla_lab.fits import start_fit
        from xla_lab.precompile import fit as fit_mod
        from xla_lab.view.fit_view import FitView, live_widget

        if not words:
            if not fit_mod.RESULTS:
                print("xla_lab: no fit yet: %xla fit STEP batch --budget 16GiB")
            else:
                _show(self.shell, FitView(fit_mod.RESULTS[-1]))
            return None
        parser = argparse.ArgumentParser(prog="%xla fit", add_help=False, exit_on_error=False)
        parser.add_argument("step")
        parser.add_argument("dims", nargs="*")
        parser.add_argument("--budget", required=True)
        parser.add_argument("--multiple", type=int, default=1)
        parser.add_argument("--max", type=int, default=None)
        parser.add_argument("--wait", action="store_true")
        usage = ("usage: %xla fit STEP [batch | ARG[DIM] ...] --budget 16GiB|v5e|A100 [--multiple M] [--max N] "
                 "[--wait]")
        try:
            args = parser.parse_args(words)
        except (argparse.ArgumentError, SystemExit) as exc:
            raise UsageError(f"{exc}; {usage}" if isinstance(exc, argparse.ArgumentError) else usage) from None
        queue = session.start_queue(self.shell.user_ns)
        queue.adopt(self.shell.user_ns)
        steps = {s.name: s for s in queue.steps()}
        step = steps.get(args.step)
        if step is None:
            value = self.shell.user_ns.get(args.step)
            if value is None:
                known = ", ".join(steps) or "none (mark one with @xla_lab.step)"
                raise UsageError(f"no marked step named {args.step!r}; marked steps: {known}")
            step = value
        try:
            view = start_fit(step, " ".join(args.dims) or "batch", args.budget, multiple=args.multiple,
                             max_size=args.max, wait=False, namespace=self.shell.user_ns)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.wait:
            queue.run_pending()
            _show(self.shell, view)
        elif _is_terminal(self.shell):
            print(view.text() + "\nxla_lab: %xla fit shows the answer once it is there.")
        else:
            from IPython.display import display

            display(live_widget(view.result))
        return None

    def _mode(self, session, words: list[str]) -> None:
        """``%xla mode [full | lean]``: what ``%%xla`` records (runtime.set_mode: only before the first
        device use)."""
        from xla_lab import runtime

        if not words:
            print(f"xla_lab: capture mode {session.runtime.mode}. " + runtime.MODE_WORDS[session.runtime.mode])
            return
        if len(words) > 1 or words[0] not in ("full", "lean"):
            raise UsageError("usage: %xla mode [full | lean]")
        print("xla_lab: " + runtime.set_mode(words[0]))

    def _save(self, session, words: list[str]) -> None:
        if len(words) > 1 or (words and words[0] not in SAVE_CHOICES):
            raise UsageError("usage: %xla save [full | summary]")
        if words:
            session.save = words[0]
        what = ("every view, packed (reopened notebooks draw the panel)" if session.save == "full"
                else "the text and an HTML summary only (no graphs or HLO in the file)")
        print(f"xla_lab: saved %%xla outputs keep {what}.")

    def _profile(self, session, words: list[str]) -> None:
        usage = "usage: %xla profile [on [STEPS | all] | off | export DIR [N]]"
        if not words:
            state = "on (every %%xla cell)" if session.profile_every_cell else "off (use %%xla --profile for one cell)"
            print(f"xla_lab: profiling is {state}.")
        elif (words[0] == "on" and len(words) <= 2) or words == ["off"]:
            session.profile_every_cell = words[0] == "on"
            if len(words) == 2:
                session.profile_steps = _profile_steps(words[1])
            steps = "every step" if session.profile_steps is None else f"the first {session.profile_steps} steps"
            print(f"xla_lab: profiling {f'every %%xla cell ({steps})' if session.profile_every_cell else 'is off'}.")
        elif words[0] == "export" and len(words) in (2, 3):
            from xla_lab.profile.export import export_profile

            if len(words) == 3:
                capture = _history_entry(session, words[2:])
            else:
                capture = next((c for c in reversed(session.history) if c.profile), None)
            if capture is None or not capture.profile:
                raise UsageError("no profiled capture: run a cell with %%xla --profile first")
            try:
                written = export_profile(capture, words[1], session.raw_profile(capture))
            except OSError as exc:
                raise UsageError(f"cannot write {words[1]}: {exc.strerror or exc}") from None
            for path in written:
                print(f"xla_lab: wrote {path}")
        else:
            raise UsageError(usage)

    def _report(self, session, words: list[str]) -> None:
        if len(words) != 1:
            raise UsageError("usage: %xla report FILE.html")
        from xla_lab.view.static_html import report_html

        from xla_lab.precompile.fit import RESULTS as FITS

        fits = [r.to_dict() for r in FITS if r.finished]
        page = report_html(list(session.history), prompts=PROMPTS, fits=fits)
        try:
            with open(words[0], "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as exc:
            raise UsageError(f"cannot write {words[0]}: {exc.strerror or exc}") from None
        print(f"xla_lab: wrote {len(session.history)} captures" + (f" and {len(fits)} fits" if fits else "")
              + f" to {words[0]}")

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


def _history_entry(session, words: list[str]):
    index = -1
    if words:
        try:
            index = int(words[0])
        except ValueError:
            raise UsageError(f"%xla show takes a history index, got {words[0]!r}") from None
    try:
        return session.history[index]
    except IndexError:
        raise UsageError(f"no capture {index} (history has {len(session.history)})") from None


def _step_compile_s(session, expr: str) -> float | None:
    """The latest measured compile whose advice named this layer stack."""
    for capture in reversed(session.history):
        for a in capture.advice:
            if a.get("kind") == "scan_layers" and a["evidence"].get("expr") == expr:
                return a["evidence"].get("compile_s")
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


def _progress(session):
    """Live compile progress under the running cell (notebooks only; see view/progress.py)."""
    from xla_lab.view.progress import ProgressDisplay, expected_compile_s

    def start(recorder):
        cell_id = recorder.capture.cell_id
        display = ProgressDisplay(recorder.compile_watch(),  # (reads the history when asked: keeps no copy)
                                  lambda compiling, nth: expected_compile_s(session.history, cell_id, compiling, nth))
        hooks.CELLS.progress_shown(display.start())
        return display

    return start


def _report(session, capture, max_rows: int | None = MAX_ROWS) -> Report:
    """The one report of a display: the capture, the history before it (the report keeps the earlier
    runs of the capture's cell) and the notebook's prompts now."""
    history = list(session.history)
    before = history[:next((i for i, c in enumerate(history) if c is capture), len(history))]
    return Report(capture, before, PROMPTS, max_rows)


def _show(shell, view, save: str = "full") -> None:
    """A view in a terminal (rich) or a notebook, where a capture's report becomes its panel (the same
    text/plain, more in HTML)."""
    if _is_terminal(shell):
        from rich.console import Console

        Console().print(view)
        return
    from IPython.display import display

    if isinstance(view, Report):
        from xla_lab.view.panel import panel_for

        view = panel_for(view.capture, view.earlier, view.max_rows, save, view.prompts)
    display(view)


def _tell_side_panel(shell, capture) -> None:
    """A quiet cell shows nothing, but JupyterLab's side panel still lists it (view/panel.py
    quiet_message). Only a kernel with a front end (ipykernel) is told: a terminal has no side panel."""
    if getattr(shell, "kernel", None) is None or capture is None:
        return
    from xla_lab.view.panel import quiet_message

    session_mod.get().settle()
    try:
        send_to_side_panel(quiet_message(capture, PROMPTS))
    except Exception as exc:  # the side panel misses one run; the cell and its capture are fine
        print(f"xla_lab: could not send the quiet cell's capture to the side panel: {exc}", file=sys.stderr)


def send_to_side_panel(data: dict) -> None:
    """An update of a display id no output has: front ends show and save nothing, the side panel (which
    reads every message of the kernel) takes it (quiet cells here, and what the side panel asks for:
    ``xla_lab.frontend``)."""
    import uuid

    from IPython.display import publish_display_data

    publish_display_data(data, transient={"display_id": f"xla-lab-quiet-{uuid.uuid4().hex}"}, update=True)


def _profile_steps(value: str) -> int | None:
    """``--profile-steps``: a count of steps, or None for all of them."""
    if value.strip().lower() == "all":
        return None
    try:
        steps = int(value)
    except ValueError:
        steps = 0
    if steps < 1:
        raise UsageError(f"--profile-steps takes a number of steps (1 or more) or 'all', not {value!r}")
    return steps


def _is_terminal(shell) -> bool:
    try:
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
    except ImportError:  # pragma: no cover
        return False
    return isinstance(shell, TerminalInteractiveShell) and sys.stdout.isatty()
