"""The compact per-cell summary, as plain text, HTML and a ``rich`` renderable.

``sections`` turns a capture into its sections, in order (headline, steps, recompile reasons,
kernels, memory, SPMD, notes), holding plain strings; the three renderers only lower each section. User text (cell source lines, graph names) is escaped in HTML and never
interpreted as markup by rich.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from xla_lab.capture.frames import current_line, fmt_line
from xla_lab.capture.records import CellCapture, StepRecord

from .details import KernelRow, clip, clip_list, kernel_lines_text, kernel_rows, main_step, memory_line, recompile_lines
from .ranks import headline_part, rank_lines
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
    name = f' "{clip(c.graph_name, 80)}"' if c.graph_name else ""
    count = f"[{c.execution_count}]" if c.execution_count is not None else ""
    n = len(c.steps)
    parts = [f"xla_lab cell{count}{name}: {n} step{'s' if n != 1 else ''}",
             f"{c.compiles} compiled", f"{c.cache_hits} cache hit{'s' if c.cache_hits != 1 else ''}"]
    if c.precompiled:
        saved = sum(s.saved_s or 0.0 for s in c.steps)
        parts.append(f"{c.precompiled} precompiled (saved {saved:.3f} s of compiling)")
    ranks = headline_part(c)
    if ranks:
        parts.append(ranks)
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

        # (the one format of a line reference: [5]:3, the cell's current prompt)
        line = "" if first.sync_line is None else (
            fmt_line(current_line({"cell": c.execution_count, "line": first.sync_line, "code": first.sync_code},
                                  c.execution_count, c.source, None))
            if c.execution_count is not None else f"line {first.sync_line}")
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


# --- the sections, in order (written once; each renderer lowers them) -----------------------------
@dataclass
class Headline:
    text: str
    totals: str


@dataclass
class Steps:
    rows: list[StepRow]
    more: int  # rows left out (max_rows)


@dataclass
class Recompiles:
    lines: list[str]


@dataclass
class Kernels:
    step: int
    count: int
    rows: list[KernelRow]


@dataclass
class Memory:
    step: int
    line: str


@dataclass
class Spmd:
    lines: list[str]


@dataclass
class Ranks:
    lines: list[str]  # the ranks of the cell's multi-process launches (view/ranks.py rank_lines)


@dataclass
class Notes:
    lines: list[str]


@dataclass
class Profile:
    lines: list[str]  # measured time (profile_lines): totals, top kernels, top lines


def measured_totals(capture) -> str:
    """One line: how many executions were measured, device busy and idle time."""
    from xla_lab.profile.breakdown import fmt_ns

    steps = capture.profile.get("steps", [])
    busy = sum(s["busy_ns"] for s in steps)
    idle = sum(s["idle_before_ns"] for s in steps[1:])
    recorded = capture.profile.get("recorded_steps")
    window = (f" (the first {recorded} of the cell's {len(capture.steps)} steps were recorded)"
              if recorded is not None and recorded < len(capture.steps) else "")
    return (f"measured: {len(steps)} executions{window}, device busy {fmt_ns(busy)}, "
            f"device idle between steps {fmt_ns(idle)} (waiting for Python, input, compiles)")


def profile_lines(capture, top: int = 3) -> list[str]:
    """A few lines for the terminal summary and the HTML report: measured totals, the top kernels
    and the top lines."""
    profile = capture.profile
    if not profile:
        return []
    from xla_lab.profile.breakdown import fmt_ns, kernel_times, line_times

    kernels = kernel_times(capture)
    out = [measured_totals(capture)]
    for k in kernels[:top]:
        where = kernel_lines_text({"lines": k.lines, "model_lines": k.model_lines, "sources": k.sources})
        bound = f", {k.bound}-bound" if k.bound else ""
        out.append(f"  {k.share:5.1%} {k.name} ({k.count}x {fmt_ns(k.mean_ns)}{bound}) {where}".rstrip())
    for ln in line_times(capture, kernels=kernels)[:top]:
        code = f"  {ln.code.strip()[:60]}" if ln.code else ""
        out.append(f"  line {ln.label}: {ln.share:.1%} of kernel time{code}")
    return out


def sections(c: CellCapture, max_rows: int | None = MAX_ROWS, details: bool = True) -> list:
    """The summary of a capture as sections, in the order every renderer shows them. ``details=False``
    leaves out the kernels, memory and notes (the panel's static HTML shows them in sections of its
    own)."""
    rows = summary_rows(c)
    out: list = [Headline(headline(c), totals_line(c))]
    if rows:
        out.append(Steps(rows[:max_rows], len(rows) - max_rows if max_rows is not None and len(rows) > max_rows else 0))
    out.append(Recompiles(recompile_lines(c)))
    step = main_step(c)
    if details and step is not None and step.fusions:
        out.append(Kernels(step.index, len(step.fusions), kernel_rows(step, top=max_rows and 6, capture=c)))
    memory = memory_line(step, c) if details and step is not None else None
    if memory:
        out.append(Memory(step.index, memory))
    out.append(Spmd(_spmd(step, max_rows)))
    if c.ranks:
        out.append(Ranks(rank_lines(c)))
    if c.profile:
        out.append(Profile(profile_lines(c)))
    if details:
        out.append(Notes(clip_list(notes(c))))
    return out


# --- plain text ---------------------------------------------------------------------------------
def _text(part) -> list[str]:
    if isinstance(part, Headline):
        return [part.text, "  " + part.totals]
    if isinstance(part, Steps):
        lines = [f"  {'step':<14}{'cache':<11} {'compile':>9} {'execute':>9}  cause / line"]
        for r in part.rows:
            where = f" @ {r.line}" if r.line else ""
            lines.append(f"  {r.steps:<14}{r.cache:<11} {_fmt_s(r.compile_s):>9} {_fmt_s(r.execute_s):>9}"
                         f"  {r.cause}{where}")
        if part.more:
            lines.append(f"  ... {part.more} more rows (%xla show for all)")
        return lines
    if isinstance(part, Recompiles):
        return [f"  {r}" for r in part.lines]
    if isinstance(part, Kernels):
        return [f"  kernels of step {part.step}'s graph ({part.count}, by flops):"] + [
            f"    {k.name:<24} {k.kind:<12} {k.flops:>12} {k.bytes:>10}  {k.ops}  {k.lines}" for k in part.rows]
    if isinstance(part, Memory):
        return [f"  memory of step {part.step}'s graph: {part.line}"]
    if isinstance(part, (Spmd, Profile, Ranks)):
        return ["  " + ln for ln in part.lines]
    if isinstance(part, Notes):
        return [f"  note: {n}" for n in part.lines]
    raise TypeError(part)


def to_text(c: CellCapture, max_rows: int | None = MAX_ROWS) -> str:
    return "\n".join(line for part in sections(c, max_rows) for line in _text(part))


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


def _html(part) -> list[str]:
    e = html.escape
    if isinstance(part, Headline):
        return [f"<div><b>{e(part.text)}</b></div>", f"<div>{e(part.totals)}</div>"]
    if isinstance(part, Steps):
        out = ["<table><tr><th>step</th><th>cache</th><th>compile</th><th>execute</th>"
               "<th>trace</th><th>cause</th><th>line</th><th>graph</th></tr>"]
        for r in part.rows:
            out.append(f"<tr><td>{e(r.steps)}</td><td class=\"{e(r.cache)}\">{e(r.cache)}</td>"
                       f"<td>{e(_fmt_s(r.compile_s))}</td><td>{e(_fmt_s(r.execute_s))}</td>"
                       f"<td>{e(_fmt_s(r.trace_s))}</td><td>{e(r.cause)}</td><td><code>{e(r.line)}</code></td>"
                       f"<td><code>{e(r.graph)}</code></td></tr>")
        out.append("</table>")
        if part.more:
            out.append(f"<div>... {part.more} more rows (<code>%xla show</code> for all)</div>")
        return out
    if isinstance(part, Recompiles):
        return [f"<div class=\"miss\">{e(r)}</div>" for r in part.lines]
    if isinstance(part, Kernels):
        out = [f"<div>kernels of step {part.step}'s graph ({part.count}, by flops):</div>"
               "<table><tr><th>kernel</th><th>kind</th><th>flops</th><th>bytes</th><th>aten ops</th><th>lines</th></tr>"]
        out.extend(f"<tr><td><code>{e(k.name)}</code></td><td>{e(k.kind)}</td><td>{e(k.flops)}</td>"
                   f"<td>{e(k.bytes)}</td><td>{e(k.ops)}</td><td><code>{e(k.lines)}</code></td></tr>" for k in part.rows)
        out.append("</table>")
        return out
    if isinstance(part, Memory):
        return [f"<div>memory of step {part.step}'s graph: {e(part.line)}</div>"]
    if isinstance(part, (Spmd, Profile, Ranks)):
        return [f"<pre>{e(chr(10).join(part.lines))}</pre>"] if part.lines else []
    if isinstance(part, Notes):
        return [f"<div>note: {e(n)}</div>" for n in part.lines]
    raise TypeError(part)


def to_html(c: CellCapture, max_rows: int | None = MAX_ROWS, details: bool = True) -> str:
    """``details=False`` leaves out the kernels, memory and notes (see ``sections``)."""
    return "".join([_STYLE, '<div class="xla-lab-summary">']
                   + [h for part in sections(c, max_rows, details) for h in _html(part)] + ["</div>"])


# --- rich ---------------------------------------------------------------------------------------
def _rich(part) -> list:
    from rich.table import Table
    from rich.text import Text

    if isinstance(part, Headline):
        return [Text(part.text, style="bold"), Text(part.totals)]
    if isinstance(part, Steps):
        table = Table(title=None, show_edge=False, pad_edge=False, box=None)
        for col in ("step", "cache", "compile", "execute", "trace", "cause", "line"):
            table.add_column(col, justify="right" if col in ("compile", "execute", "trace") else "left")
        for r in part.rows:
            style = "bold yellow" if r.cache == "miss" else "green"
            table.add_row(Text(r.steps), Text(r.cache, style=style), Text(_fmt_s(r.compile_s)),
                          Text(_fmt_s(r.execute_s)), Text(_fmt_s(r.trace_s)), Text(r.cause), Text(r.line))
        return [table]
    if isinstance(part, Recompiles):
        return [Text(r, style="yellow") for r in part.lines]
    if isinstance(part, Kernels):
        kernels = Table(title=f"kernels of step {part.step}'s graph", show_edge=False, box=None, title_justify="left")
        for col in ("kernel", "kind", "flops", "bytes", "aten ops", "lines"):
            kernels.add_column(col, justify="right" if col in ("flops", "bytes") else "left")
        for k in part.rows:
            kernels.add_row(Text(k.name), Text(k.kind), Text(k.flops), Text(k.bytes), Text(k.ops), Text(k.lines))
        return [kernels]
    if isinstance(part, Memory):
        return [Text(f"memory of step {part.step}'s graph: {part.line}")]
    if isinstance(part, Spmd):
        return [Text("\n".join(part.lines), style="cyan")] if part.lines else []
    if isinstance(part, Profile):
        return [Text("\n".join(part.lines), style="magenta")] if part.lines else []
    if isinstance(part, Ranks):
        return [Text(ln, style="bold red" if ln.startswith("! ") else "") for ln in part.lines]
    if isinstance(part, Notes):
        return [Text("note: " + n, style="dim") for n in part.lines]
    raise TypeError(part)


def to_rich(c: CellCapture, max_rows: int | None = MAX_ROWS):
    from rich.console import Group

    return Group(*[r for part in sections(c, max_rows) for r in _rich(part)])


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
