"""The verbs about the kernel's captures and choices: ``status``, ``history``, ``show``, ``clear``,
``report``, ``save`` and ``mode``."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab import display
from xla_lab.settings import SAVE_CHOICES
from xla_lab.verbs.table import verb


@verb("status", "the device, the runtime, the bridge's versions, what capture records and what is stored",
      reads_only=True)
def status(shell, session, args):
    from xla_lab import compat
    from xla_lab.view.status import status_text

    print(status_text(session, compat.versions()))


@verb("history", "every %%xla cell run of this kernel, one line each", reads_only=True)
def history(shell, session, args):
    from xla_lab.view.status import history_text

    print(history_text(session))


@verb("show", "a capture of the history again, every row (default: the last)", reads_only=True)
@argument("index", nargs="?", type=int, default=-1, metavar="N", help="position in %%xla history (negative: from the end)")
def show(shell, session, args):
    if not session.history:
        print("xla_lab: no %%xla cell has run yet.")
        return
    display.show(shell, display.report(session, history_entry(session, args.index), max_rows=None), save=session.save,
                 live=session.panels)


@verb("clear", "forget every capture, stored graph, profile, queue job and fit, and close the live panels "
               "(the device, your tensors and the settings are untouched)")
def clear(shell, session, args):
    dropped = session.clear()
    said = ", ".join(f"{n} {what}" for what, n in dropped.items())
    print(f"xla_lab: cleared {said}, and the stored graphs.")


@verb("report", "one self-contained HTML page of every capture (and finished fits)")
@argument("file", metavar="FILE.html", help="the page to write, e.g. report.html")
def report(shell, session, args):
    from xla_lab.view.static_html import report_html

    fits = [r.to_dict() for r in session.fits if r.finished]
    page = report_html(list(session.history), prompts=session.prompts, fits=fits)
    try:
        with open(args.file, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise UsageError(f"cannot write {args.file}: {exc.strerror or exc}") from None
    print(f"xla_lab: wrote {len(session.history)} captures" + (f" and {len(fits)} fits" if fits else "")
          + f" to {args.file}")


@verb("save", "what notebooks keep of later %%xla outputs: every view, or a summary for notebooks you share "
              "(XLA_LAB_SAVE sets the starting choice)", usage="[full | summary]")
@argument("choice", nargs="?", choices=SAVE_CHOICES, help="full: every view, packed; summary: text and an HTML summary")
def save(shell, session, args):
    if args.choice:
        session.save = args.choice
    what = ("every view, packed (reopened notebooks draw the panel)" if session.save == "full"
            else "the text and an HTML summary only (no graphs or HLO in the file)")
    print(f"xla_lab: saved %%xla outputs keep {what}.")


@verb("mode", "the capture mode: full, or lean (no XLA dump: near-plain compiles); chosen before the first "
              "device use", usage="[full | lean]")
@argument("mode", nargs="?", choices=("full", "lean"), help="full: every view; lean: near-plain compile times")
def mode(shell, session, args):
    from xla_lab import runtime

    if not args.mode:
        print(f"xla_lab: capture mode {session.runtime.mode}. " + runtime.MODE_WORDS[session.runtime.mode])
        return
    print("xla_lab: " + runtime.set_mode(args.mode))


def history_entry(session, index: int):
    """Capture ``index`` of the history (``%xla show N``, ``%xla profile export DIR N``)."""
    try:
        return session.history[index]
    except IndexError:
        raise UsageError(f"no capture {index} (history has {len(session.history)})") from None
