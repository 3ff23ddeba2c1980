"""The names JupyterLab's extension calls in the kernel, in one small module.

The extension (``extension/src/lab/sidebar.ts``) sends Python code in silent executions, spelled as
``__import__("xla_lab.frontend", fromlist=[...]).NAME(...)``; ``ENTRY_POINTS`` lists those names.
``tests/kernel/test_frontend.py`` runs the very code the extension sends, read out of its source, so renaming
or moving one of them fails a test instead of the side panel, silently.
"""

from __future__ import annotations

ENTRY_POINTS = ("send_full_capture",)


def send_full_capture(cell_id: str, execution_count: int | None, started_at: float) -> None:
    """JupyterLab's side panel asks for a quiet run's whole model (a silent execution, when a step of it
    is opened): sent like the quiet message. Raises if the kernel no longer keeps the capture."""
    from xla_lab import session as session_mod
    from xla_lab.display import send_to_side_panel
    from xla_lab.view.panel import full_message

    s = session_mod.current()
    found = next((c for c in (s.history if s else []) if c.cell_id == cell_id and c.execution_count == execution_count
                  and abs(c.started_at - started_at) < 1e-3), None)
    if found is None:
        raise LookupError(f"xla_lab no longer keeps the capture of cell [{execution_count}] (XLA_LAB_MAX_HISTORY, "
                          "%xla clear, or a restarted kernel): run the cell again to see its graphs")
    send_to_side_panel(full_message(found, s.prompts))
