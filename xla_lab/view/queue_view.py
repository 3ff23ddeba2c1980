"""The precompile queue as text, static HTML and a live widget (``%xla queue``).

Rows come from ``queue_rows``; the renderers only lay them out. The live widget re-renders its HTML
when the queue reports a change (from the worker thread; ipywidgets sends the update over the comm),
at most a few times a second.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass

from .details import fmt_bytes


@dataclass
class JobRow:
    number: int
    state: str
    label: str
    reason: str
    compile_s: str
    saved_s: str
    detail: str


def _s(value: float | None) -> str:
    return "-" if not value else f"{value:.3f} s"


def queue_rows(queue) -> list[JobRow]:
    rows = []
    for j in queue.jobs:
        state = j.state
        if state == "running":
            state = j.phase or "running"
        elif state == "compiled":
            state = "used" if j.used else ("missed" if j.missed else "compiled, unused")
        elif state == "cached":
            state = "already compiled"
        detail = j.error or (f"the real step compiled another graph: {j.missed}" if j.missed and not j.used else "")
        if j.output and not detail:
            detail = f"printed {len(j.output.splitlines())} line(s) on the shadow"
        rows.append(JobRow(j.number, state, j.label, j.reason, _s(j.compile_s), _s(j.saved_s), detail))
    return rows


def headline(queue) -> str:
    c = queue.counts()
    parts = [f"xla_lab precompile queue{' (paused)' if queue.paused else ''}: "
             f"{c['pending']} pending, {c['running']} compiling, {c['compiled'] + c['cached']} done, "
             f"{c['used']} used, {c['unused']} unused, {c['failed']} failed",
             f"time saved {queue.saved_s:.3f} s",
             f"shadow memory peak {fmt_bytes(queue.shadow_bytes_peak)}"]
    return " | ".join(parts)


def step_problems(queue) -> list[str]:
    return [f"{s.name} is not precompiled: {p}" for s in queue.steps() for p in s.problems]


def to_text(queue) -> str:
    lines = [headline(queue), f"  persistent compile cache: {queue.persistent_cache}"]
    if queue.blocked:
        lines.append(f"  waiting: {queue.blocked}")
    for p in step_problems(queue):
        lines.append(f"  ! {p}")
    rows = queue_rows(queue)
    if not rows:
        lines.append("  no jobs yet: mark a step with @xla_lab.step and run it once")
    for r in rows:
        lines.append(f"  #{r.number:<3} {r.state:<18} {r.label}  [{r.reason}]  compile {r.compile_s}, saved {r.saved_s}"
                     + (f"  {r.detail}" if r.detail else ""))
    return "\n".join(lines)


_STYLE = ("<style>.xla-lab-queue{font-family:var(--jp-code-font-family,monospace);font-size:12px;"
          "color:var(--jp-content-font-color1,inherit)}"
          ".xla-lab-queue table{border-collapse:collapse;margin:4px 0}"
          ".xla-lab-queue td,.xla-lab-queue th{padding:1px 8px;text-align:left;"
          "border-bottom:1px solid var(--jp-border-color2,#ddd)}"
          ".xla-lab-queue .failed{color:var(--jp-error-color1,#c53030)}"
          ".xla-lab-queue .used{color:var(--jp-success-color0,#2f855a)}</style>")


def to_html(queue) -> str:
    e = html.escape
    parts = [_STYLE, '<div class="xla-lab-queue">', f"<div><b>{e(headline(queue))}</b></div>",
             f"<div>persistent compile cache: {e(queue.persistent_cache)}</div>"]
    if queue.blocked:
        parts.append(f"<div>waiting: {e(queue.blocked)}</div>")
    for p in step_problems(queue):
        parts.append(f'<div class="failed">{e(p)}</div>')
    rows = queue_rows(queue)
    if rows:
        parts.append("<table><tr><th>#</th><th>state</th><th>graph</th><th>why</th><th>compile</th>"
                     "<th>saved</th><th></th></tr>")
        for r in rows:
            cls = "failed" if r.state == "failed" else ("used" if r.state == "used" else "")
            parts.append(f'<tr class="{cls}"><td>{r.number}</td><td>{e(r.state)}</td><td><code>{e(r.label)}</code></td>'
                         f"<td>{e(r.reason)}</td><td>{e(r.compile_s)}</td><td>{e(r.saved_s)}</td>"
                         f"<td>{e(r.detail)}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<div>no jobs yet: mark a step with <code>@xla_lab.step</code> and run it once</div>")
    parts.append("</div>")
    return "".join(parts)


class QueueView:
    """A snapshot of the queue (text/plain + text/html)."""

    def __init__(self, queue):
        self.queue = queue

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": to_text(self.queue), "text/html": to_html(self.queue)}

    def __repr__(self) -> str:
        return to_text(self.queue)


def live_widget(queue, min_interval: float = 0.25):
    """An ipywidgets.HTML that follows the queue; its bundle keeps a static text/plain and text/html
    so a saved notebook shows the state at save time."""
    import ipywidgets

    class QueueWidget(ipywidgets.HTML):
        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs) or {}
            bundle["text/plain"] = to_text(queue)
            bundle["text/html"] = to_html(queue)
            return bundle

        def __repr__(self) -> str:
            return to_text(queue)

    widget = QueueWidget(value=to_html(queue))
    state = {"last": 0.0, "timer": None}
    lock = threading.Lock()

    def refresh(_queue=None) -> None:
        with lock:
            now = time.time()
            if now - state["last"] < min_interval:
                if state["timer"] is None:
                    state["timer"] = threading.Timer(min_interval, flush)
                    state["timer"].daemon = True
                    state["timer"].start()
                return
            state["last"] = now
        widget.value = to_html(queue)

    def flush() -> None:
        with lock:
            state["timer"] = None
            state["last"] = time.time()
        widget.value = to_html(queue)

    queue.listeners.append(refresh)
    return widget
