"""Where xla_lab's views go: a terminal (rich) or a notebook (a capture's report becomes its panel), and
the side panel's channel (display updates no output has). Used by the ``%%xla`` cell, the ``%xla`` verbs
and what JupyterLab's extension calls."""

from __future__ import annotations

import sys

from xla_lab.view.report import MAX_ROWS, Report


def is_terminal(shell) -> bool:
    """Terminal IPython on a tty: views print as rich text (no panel, no widget)."""
    try:
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
    except ImportError:  # pragma: no cover
        return False
    return isinstance(shell, TerminalInteractiveShell) and sys.stdout.isatty()


def report(session, capture, max_rows: int | None = MAX_ROWS) -> Report:
    """The one report of a display: the capture, the history before it (the report keeps the earlier
    runs of the capture's cell) and the notebook's prompts now."""
    history = list(session.history)
    before = history[:next((i for i, c in enumerate(history) if c is capture), len(history))]
    return Report(capture, before, session.prompts, max_rows)


def show(shell, view, save: str = "full", live=None) -> None:
    """A view in a terminal (rich) or a notebook, where a capture's report becomes its panel (the same
    text/plain, more in HTML; ``live``: the session's panels, which keep its widget)."""
    if is_terminal(shell):
        from rich.console import Console

        Console().print(view)
        return
    from IPython.display import display

    if isinstance(view, Report):
        from xla_lab.view.panel import panel_for

        view = panel_for(view.capture, view.earlier, view.max_rows, save, view.prompts, live)
    display(view)


def tell_side_panel(shell, session, capture) -> None:
    """A quiet cell shows nothing, but JupyterLab's side panel still lists it (view/panel.py
    quiet_message). Only a kernel with a front end (ipykernel) is told: a terminal has no side panel."""
    if getattr(shell, "kernel", None) is None or capture is None:
        return
    from xla_lab.view.panel import quiet_message

    session.settle()
    try:
        send_to_side_panel(quiet_message(capture, session.prompts))
    except Exception as exc:  # the side panel misses one run; the cell and its capture are fine
        print(f"xla_lab: could not send the quiet cell's capture to the side panel: {exc}", file=sys.stderr)


def send_to_side_panel(data: dict) -> None:
    """An update of a display id no output has: front ends show and save nothing, the side panel (which
    reads every message of the kernel) takes it (quiet cells here, and what the side panel asks for:
    ``xla_lab.frontend``)."""
    import uuid

    from IPython.display import publish_display_data

    publish_display_data(data, transient={"display_id": f"xla-lab-quiet-{uuid.uuid4().hex}"}, update=True)
