"""The compact per-cell summary, as plain text, HTML and a ``rich`` renderable.

One function (``summary_rows``) turns a capture into rows of plain strings; the three renderers only
lay those rows out. User text (cell source lines, graph names) is escaped in HTML and never
interpreted as markup by rich.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from xla_lab.capture.records import CellCapture, StepRecord

from .details import kernel_rows, main_step, memory_line, recompile_lines
from .spmd import spmd_lines

MAX_ROWS = 12


@dataclass
class StepRow:
    steps: str  # "0" or "3-199 (197x)"
    cache: str
    cause: str
    line: str
    graph: str
    compile_s: float | None
    execute_s: float | None
    trace_s: float | None


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def headline(c: CellCapture) -> str:
    name = f' "{c.graph_name}"' if c.graph_name else ""
    count = f"[{c.execution_count}]" if c.execution_count is not None else ""
    n = len(c.steps)
    parts = [f"xla_lab cell{count}{name}: {n} step{'s' if n != 1 else ''}",
             f"{c.compiles} compiled", f"{c.cache_hits} cache hit{'s' if c.cache_hits != 1 else ''}"]
    if c.precompiled:
        saved = sum(s.saved_s or 0.0 for s in c.steps)
        parts.append(f"{c.precompiled} precompiled (saved {saved:.3f} s of compiling)")
    return ", ".join(parts)


def totals_line(c: CellCapture) -> str:
    transfer = c.total("to_device_s") + c.total("from_device_s") + sum(c.outside_steps.values())
    return (f"compile {_fmt_s(c.total('compile_s'))} | execute {_fmt_s(c.total('execute_s'))} | "
            f"trace {_fmt_s(c.total('trace_s'))} | transfer {_fmt_s(transfer)}")


def _group_key(s: StepRecord):
    return (s.graph_hash, s.cache, s.sync_cause, s.sync_line)


def summary_rows(c: CellCapture) -> list[StepRow]:
    """Consecutive steps with the same graph, cache state and sync site collapse into one row."""
    groups: list[list[StepRecord]] = []
    for s in c.steps:
        if groups and _group_key(groups[-1][-1]) == _group_key(s):
            groups[-1].append(s)
        else:
            groups.append([s])
    rows = []
    for g in groups:
        first, last = g[0], g[-1]
        label = str(first.index) if len(g) == 1 else f"{first.index}-{last.index} ({len(g)}x)"

        def total(key: str, steps=g):
            values = [s.timings.get(key) for s in steps]
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        line = "" if first.sync_line is None else str(first.sync_line)
        if first.sync_code:
            line += f": {first.sync_code}"
        rows.append(StepRow(label, first.cache, first.sync_cause, line, first.graph_hash[:12],
                            total("compile_s"), total("execute_s"), total("trace_s")))
    return rows


def notes(c: CellCapture) -> list[str]:
    out = []
    if c.fallback_ops:
        ops = ", ".join(f"aten::{op} x{n}" for op, n in sorted(c.fallback_ops.items()))
        out.append(f"CPU fallbacks (ops XLA could not lower, run on the host): {ops}")
    if c.error:
        out.append(f"the cell raised {c.error}")
    out.extend(c.notes)
    return out


def _spmd(step: StepRecord | None, max_rows: int | None) -> list[str]:
    if step is None or step.artifacts is None:
        return []
    return spmd_lines(step.artifacts.spmd, pictures=2 if max_rows is not None else 8)


# --- plain text ---------------------------------------------------------------------------------
def to_text(c: CellCapture, max_rows: int | None = MAX_ROWS) -> str:
    lines = [headline(c), "  " + totals_line(c)]
    rows = summary_rows(c)
    if rows:
        lines.append(f"  {'step':<14}{'cache':<11} {'compile':>9} {'execute':>9}  cause / line")
        for r in rows[:max_rows]:
            where = f" @ line {r.line}" if r.line else ""
            lines.append(f"  {r.steps:<14}{r.cache:<11} {_fmt_s(r.compile_s):>9} {_fmt_s(r.execute_s):>9}"
                         f"  {r.cause}{where}")
        if max_rows is not None and len(rows) > max_rows:
            lines.append(f"  ... {len(rows) - max_rows} more rows (%xla show for all)")
    for r in recompile_lines(c):
        lines.append(f"  {r}")
    step = main_step(c)
    if step is not None and step.fusions:
        lines.append(f"  kernels of step {step.index}'s graph ({len(step.fusions)}, by flops):")
        for k in kernel_rows(step, top=max_rows and 6):
            lines.append(f"    {k.name:<24} {k.kind:<12} {k.flops:>12} {k.bytes:>10}  {k.ops}  {k.lines}")
    if step is not None and memory_line(step):
        lines.append(f"  memory of step {step.index}'s graph: {memory_line(step)}")
    lines.extend("  " + ln for ln in _spmd(step, max_rows))
    for n in notes(c):
        lines.append(f"  note: {n}")
    return "\n".join(lines)


# --- HTML ---------------------------------------------------------------------------------------
_STYLE = (
    "<style>.xla-lab-summary{font-family:var(--jp-code-font-family,monospace);font-size:12px;"
    "color:var(--jp-content-font-color1,inherit)}"
    ".xla-lab-summary table{border-collapse:collapse;margin:4px 0}"
    ".xla-lab-summary td,.xla-lab-summary th{padding:1px 8px;text-align:left;"
    "border-bottom:1px solid var(--jp-border-color2,#ddd)}"
    ".xla-lab-summary .miss{color:var(--jp-warn-color0,#b7791f);font-weight:bold}"
    ".xla-lab-summary .hit{color:var(--jp-success-color0,#2f855a)}</style>"
)


def to_html(c: CellCapture, max_rows: int | None = MAX_ROWS, details: bool = True) -> str:
    """``details=False`` leaves out the kernels, memory and notes (the panel's static HTML shows them
    in sections of its own)."""
    e = html.escape
    parts = [_STYLE, '<div class="xla-lab-summary">', f"<div><b>{e(headline(c))}</b></div>",
             f"<div>{e(totals_line(c))}</div>"]
    rows = summary_rows(c)
    if rows:
        parts.append("<table><tr><th>step</th><th>cache</th><th>compile</th><th>execute</th>"
                     "<th>trace</th><th>cause</th><th>line</th><th>graph</th></tr>")
        for r in rows[:max_rows]:
            parts.append(
                f"<tr><td>{e(r.steps)}</td><td class=\"{e(r.cache)}\">{e(r.cache)}</td>"
                f"<td>{e(_fmt_s(r.compile_s))}</td><td>{e(_fmt_s(r.execute_s))}</td>"
                f"<td>{e(_fmt_s(r.trace_s))}</td><td>{e(r.cause)}</td><td><code>{e(r.line)}</code></td>"
                f"<td><code>{e(r.graph)}</code></td></tr>"
            )
        parts.append("</table>")
        if max_rows is not None and len(rows) > max_rows:
            parts.append(f"<div>... {len(rows) - max_rows} more rows (<code>%xla show</code> for all)</div>")
    for r in recompile_lines(c):
        parts.append(f"<div class=\"miss\">{e(r)}</div>")
    step = main_step(c)
    if details and step is not None and step.fusions:
        parts.append(f"<div>kernels of step {step.index}'s graph ({len(step.fusions)}, by flops):</div>"
                     "<table><tr><th>kernel</th><th>kind</th><th>flops</th><th>bytes</th><th>aten ops</th>"
                     "<th>lines</th></tr>")
        for k in kernel_rows(step, top=max_rows and 6):
            parts.append(f"<tr><td><code>{e(k.name)}</code></td><td>{e(k.kind)}</td><td>{e(k.flops)}</td>"
                         f"<td>{e(k.bytes)}</td><td>{e(k.ops)}</td><td><code>{e(k.lines)}</code></td></tr>")
        parts.append("</table>")
    if details and step is not None and memory_line(step):
        parts.append(f"<div>memory of step {step.index}'s graph: {e(memory_line(step))}</div>")
    spmd = _spmd(step, max_rows)
    if spmd:
        parts.append(f"<pre>{e(chr(10).join(spmd))}</pre>")
    for n in notes(c) if details else []:
        parts.append(f"<div>note: {e(n)}</div>")
    parts.append("</div>")
    return "".join(parts)


# --- rich ---------------------------------------------------------------------------------------
def to_rich(c: CellCapture, max_rows: int | None = MAX_ROWS):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, show_edge=False, pad_edge=False, box=None)
    for col in ("step", "cache", "compile", "execute", "trace", "cause", "line"):
        table.add_column(col, justify="right" if col in ("compile", "execute", "trace") else "left")
    for r in summary_rows(c)[:max_rows]:
        style = "bold yellow" if r.cache == "miss" else "green"
        table.add_row(Text(r.steps), Text(r.cache, style=style), Text(_fmt_s(r.compile_s)),
                      Text(_fmt_s(r.execute_s)), Text(_fmt_s(r.trace_s)), Text(r.cause), Text(r.line))
    items = [Text(headline(c), style="bold"), Text(totals_line(c)), table]
    items.extend(Text(r, style="yellow") for r in recompile_lines(c))
    step = main_step(c)
    if step is not None and step.fusions:
        kernels = Table(title=f"kernels of step {step.index}'s graph", show_edge=False, box=None, title_justify="left")
        for col in ("kernel", "kind", "flops", "bytes", "aten ops", "lines"):
            kernels.add_column(col, justify="right" if col in ("flops", "bytes") else "left")
        for k in kernel_rows(step, top=max_rows and 6):
            kernels.add_row(Text(k.name), Text(k.kind), Text(k.flops), Text(k.bytes), Text(k.ops), Text(k.lines))
        items.append(kernels)
    if step is not None and memory_line(step):
        items.append(Text(f"memory of step {step.index}'s graph: {memory_line(step)}"))
    spmd = _spmd(step, max_rows)
    if spmd:
        items.append(Text("\n".join(spmd), style="cyan"))
    items.extend(Text("note: " + n, style="dim") for n in notes(c))
    return Group(*items)


class SummaryView:
    """What ``%%xla`` displays: text/plain + text/html in notebooks, rich in a terminal."""

    def __init__(self, capture: CellCapture, max_rows: int | None = MAX_ROWS):
        self.capture = capture
        self.max_rows = max_rows

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": to_text(self.capture, self.max_rows),
                "text/html": to_html(self.capture, self.max_rows)}

    def __rich__(self):
        return to_rich(self.capture, self.max_rows)

    def __repr__(self) -> str:
        return to_text(self.capture, self.max_rows)
