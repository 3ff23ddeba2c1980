"""``%%xla`` (run a cell on the lazy XLA device and show what XLA did) and ``%xla VERB`` (the verbs'
table, ``verbs/``): the magic class and its dispatch. The work is elsewhere: a cell's run in
``cell_run``, the session's state in ``session``, the verbs in ``verbs/``, the views in ``view/``."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from xla_lab import cell_run, display, hooks, verbs
from xla_lab import session as session_mod
from xla_lab.interrupts import HeldInterrupts
from xla_lab.profile.session import DEFAULT_STEPS as DEFAULT_PROFILE_STEPS
from xla_lab.settings import SAVE_CHOICES
from xla_lab.verbs.profile import profile_steps
from xla_lab.verbs.table import one_line_usage

DOC = """Run a cell on the lazy XLA device and show what XLA did with it; ``%xla VERB`` steers xla_lab.

As a cell magic (``%%xla [options]``), runs the cell as a plain cell runs (shell escapes, line magics,
``?`` and the rest of IPython's syntax included) in the notebook's namespace, syncs the work it left
pending, and records every sync in the cell as a step: each ``torch_xla.sync()`` /
``xm.mark_step()``, each implicit one (``.item()``, ``print(t)``, ``.cpu()``) with the line that
forced it, and the final one. The capture is then ``xla_lab.last()``; a summary is displayed under
the cell. Its options are below.

As a line magic, ``%xla VERB [ARGS]`` (``%xla`` alone: ``status``; ``%xla help VERB``: a verb's
arguments):

{verbs}
"""


def _documented(fn):
    """The magic's docstring lists every verb of the table (so ``%xla?`` does)."""
    fn.__doc__ = DOC.format(verbs=verbs.summary_table())
    return fn


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
    @line_cell_magic
    @_documented
    def xla(self, line: str, cell: str | None = None):
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame from user tracebacks)
        if cell is None:
            return verbs.run(self.shell, line)
        try:
            args = parse_argstring(self.xla, line)
            steps = None if args.profile_steps is None else profile_steps(args.profile_steps)
        except UsageError as exc:
            usage = one_line_usage(self.xla.parser).replace("%xla", "%%xla", 1)
            raise UsageError(f"%%xla: {str(exc).rstrip('.')}; usage: {usage} (%xla? for the options, %xla VERB "
                             "on a line of its own)") from None
        return self._cell(args, steps, cell)

    def _cell(self, args, profile_steps: int | None, cell: str):
        __tracebackhide__ = True  # noqa: F841
        session = session_mod.get()
        cells = hooks.of(session).cells
        cells.xla_cell_started()
        progress = None if args.quiet or display.is_terminal(self.shell) else _progress(session)
        run = cell_run.run_cell(self.shell, session, cell,
                                cell_run.CellOptions(name=args.name, track_lines=args.track_lines, no_sync=args.no_sync,
                                                     profile=(args.profile or session.profile_every_cell
                                                              or args.profile_steps is not None),
                                                     profile_steps=(session.profile_steps if args.profile_steps is None
                                                                    else profile_steps)),
                                cells.info, progress=progress)
        error = run.error
        with HeldInterrupts(cell_run.RECORDING_NOTE) as held:  # (the capture is recorded: show or send it whole)
            if args.quiet:
                display.tell_side_panel(self.shell, session, run.capture)
            else:
                session.settle()  # the views show the analysis
                display.show(self.shell, display.report(session, run.capture), save=args.save or session.save,
                             live=session.panels)
        if held.interrupted and error is None:
            error = KeyboardInterrupt("interrupted after the cell's code had run (the capture is recorded)")
        if error is not None:
            raise error
        return run.result


def _progress(session):
    """Live compile progress under the running cell (notebooks only; see view/progress.py)."""
    from xla_lab.view.progress import ProgressDisplay, expected_compile_s

    def start(recorder):
        cell_id = recorder.capture.cell_id
        progress = ProgressDisplay(recorder.compile_watch(),  # (reads the history when asked: keeps no copy)
                                   lambda compiling, nth: expected_compile_s(session.history, cell_id, compiling, nth))
        hooks.of(session).cells.progress_shown(progress.start())
        return progress

    return start
