"""One report per display: a capture as a person sees it, built once from (the capture, the earlier
runs of its cell, the prompts the notebook shows now) and lowered to plain text, HTML and a ``rich``
renderable here, to the panel's JSON in ``panel_model.py`` and to the static page in ``static_html.py``.

Every renderer reads the same step rows (``StepRow``), the same ONE list of warnings, the same kernels
with their lines as the run shown names them (``capture/source_ref.py``) and the same measured time
(``kernel_times``, computed once). ``Report`` renders itself the way IPython's ``TimeitResult`` does:
``text/plain`` and ``text/html`` in a notebook, ``__rich__`` in a terminal. User text (cell source
lines, graph names) is escaped in HTML and never interpreted as markup by rich.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from collections import Counter

from xla_lab.capture.records import CellCapture, GraphArtifacts, StepRecord
from xla_lab.capture.source_ref import Prompts, cell_ref, ref_text, ref_with_code, shown_ref

from .details import (KernelRow, clip, clip_list, fmt_bytes, kernel_lines_text, kernel_rows, main_step, memory_line,
                      recompile_lines)
from .details import loop_lines
from .ranks import attention, headline_part, rank_lines
from .compile_summary import WAIT_SHOWN_FROM_NS
from .spmd import spmd_lines

MAX_ROWS = 12


@dataclass
class StepRow:
    """Consecutive steps with the same graph, cache state, cause and sync line, as one row."""
    steps: str  # "0" or "3-199 (197x)"
    first: int
    last: int
    count: int
    cache: str
    cause: str
    ref: dict | None  # where the step synced (capture/source_ref.py), as the run shown names it
    graph: str  # the graph's hash, 12 characters
    compile_s: float | None
    execute_s: float | None
    trace_s: float | None

    @property
    def where(self) -> str:
        """``[5]:3: loss.item()``, or "" for a step that synced outside the cell's lines."""
        if self.ref is None:
            return ""
        return ref_text(self.ref) + (f": {self.ref['code']}" if self.ref.get("code") else "")

    @property
    def text(self) -> str:
        """The row in one line, as both languages write it (``stepRowText`` in extension/src/core/steps.ts)."""
        return f"{self.steps} | {self.cache} | {self.cause}" + (f" @ {self.where}" if self.ref else "")

    def to_dict(self) -> dict:
        return {**self.__dict__, "text": self.text}


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
    line = (f"compile {_fmt_s(c.total('compile_s'))} | execute {_fmt_s(c.total('execute_s'))} | "
            f"trace {_fmt_s(c.total('trace_s'))} | transfer {_fmt_s(transfer)}")
    waited = c.total("execution_wait_s")
    if waited * 1e9 >= WAIT_SHOWN_FROM_NS:  # (as the compile headline; README "Compile time, explained")
        line += f" | syncs waited {_fmt_s(waited)} for their step's execution"
    return line


def _group_key(s: StepRecord):
    return (s.graph_hash, s.cache, s.sync_cause, s.sync_line)


def notes(c: CellCapture) -> list[str]:
    out = []
    if c.fallback_ops:
        ops = ", ".join(f"aten::{op} x{n}" for op, n in sorted(c.fallback_ops.items()))
        out.append(f"CPU fallbacks (ops XLA could not lower, run on the host): {ops}")
    if c.error:
        out.append(f"the cell raised {c.error}")
    out.extend(c.notes)
    return out


# --- the report -----------------------------------------------------------------------------------
class Report:
    """A capture as every renderer shows it. ``runs``: earlier captures of the same cell, oldest first
    (others, and the capture itself, are ignored); ``prompts``: the notebook's prompts now
    (``capture/prompts.py``), so lines name cells as they show now; None keeps them as recorded."""

    def __init__(self, capture: CellCapture, runs=(), prompts: Prompts | None = None,
                 max_rows: int | None = MAX_ROWS):
        self.capture = capture
        self.earlier = [r for r in runs if r is not capture and r.cell_id == capture.cell_id]
        self.prompts = prompts
        self.max_rows = max_rows
        self.main = main_step(capture)
        self.rows = self._step_rows()
        self.warnings = self._warnings()

    # lines as the run shown names them
    def shown(self, ref: dict, step: StepRecord | GraphArtifacts | None = None) -> dict:
        """A line recorded by a graph (of ``step``), as this report names it."""
        art = step.artifacts if isinstance(step, StepRecord) else step
        return self.shown_in(ref, art.compiled_in if art is not None else None)

    def shown_in(self, ref: dict, compiled_in: int | None) -> dict:
        """A line recorded by a graph compiled in the run ``compiled_in``, as this report names it."""
        c = self.capture
        return shown_ref(ref, c.execution_count, c.source, compiled_in, self.prompts)

    def _step_rows(self) -> list[StepRow]:
        c = self.capture
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
                known = [v for v in (s.timings.get(key) for s in steps) if v is not None]
                return sum(known) if known else None

            ref = cell_ref(c.execution_count, first.sync_line, first.sync_code)
            rows.append(StepRow(label, first.index, last.index, len(g), first.cache, first.sync_cause,
                                None if ref is None else self.shown(ref), first.graph_hash[:12],
                                total("compile_s"), total("execute_s"), total("trace_s")))
        return rows

    def _warnings(self) -> list[str]:
        """The one list every renderer shows: ranks that diverged, failed or straggled, mid-step
        (implicit) syncs, huge baked constants, then CPU fallbacks, the cell's error and capture notes."""
        c = self.capture
        out = attention(c)
        implicit = [s for s in c.steps if s.sync_cause.startswith("implicit")]
        by_site = Counter((s.sync_line, s.sync_code, s.sync_cause) for s in implicit)
        for (line, code, cause), n in by_site.items():
            where = ref_with_code(self.shown(cell_ref(c.execution_count, line, code))) if line is not None \
                else "outside the cell's lines"
            times = f" {n} times" if n > 1 else ""
            out.append(f"mid-step sync{times} at {where}: {cause.removeprefix('implicit: ')}; each one cuts the "
                       "graph there and waits for the device (move value reads after torch_xla.sync())")
        for art in c.artifacts().values():
            for const in art.large_constants or []:
                where = f" at {const['where']}" if const.get("where") else ""
                out.append(f"graph {art.graph_name or art.graph_hash[:12]} bakes a {fmt_bytes(const['bytes'])} "
                           f"constant {const['shape']}{where} into the HLO: it is compiled into the executable and "
                           "any change recompiles; pass it as a device tensor instead")
        out.extend(notes(c))
        return out

    @functools.cached_property
    def profile_kernels(self) -> list:
        """Measured time per kernel (%%xla --profile), longest first; [] when the cell was not profiled."""
        if not self.capture.profile:
            return []
        from xla_lab.profile.breakdown import kernel_times

        return kernel_times(self.capture, self.prompts)

    def profile_lines(self, model: bool = False) -> list:
        from xla_lab.profile.breakdown import line_times

        return line_times(self.capture, model=model, kernels=self.profile_kernels) if self.capture.profile else []

    @functools.cached_property
    def compile_views(self) -> list:
        """Where each compile of this run went (``profile/compile_breakdown.py``), in step order."""
        from xla_lab.profile.compile_breakdown import compile_views

        return compile_views(self.capture, self.prompts)

    def advice(self, graph_hash: str | None = None) -> list[dict]:
        """The capture's compile advice (of one graph, or of the cell when None), each with its line
        as this report names it in ``where``."""
        out = []
        for a in self.capture.advice:
            if a.get("graph_hash") != graph_hash:
                continue
            line = a.get("line")
            where = ref_with_code(self.shown_in(line, a.get("compiled_in"))) if line else None
            text = a["text"] + (f" (the line: {where})" if where else "")
            out.append({**a, "where": where, "text": text})
        return out

    def compile_lines(self, top: int = 3, compiles: int = 2, compact: bool = False) -> list[str]:
        """The largest compiles in full (``compact``: in a few lines), the rest one line each, then the
        cell's own advice."""
        from xla_lab.view.compile_summary import compile_lines, headline

        views = sorted(self.compile_views, key=lambda v: -v.compile_ns)
        out = []
        for n, v in enumerate(views):
            out.extend(compile_lines(v, self.advice(v.graph_hash), top, compact) if n < compiles else [headline(v)])
        out.extend(f"advice: {a['text']}" for a in self.advice(None))
        return out

    def kernel_rows(self, top: int | None) -> list[KernelRow]:
        return kernel_rows(self.main, top=top, shown=self.shown) if self.main is not None else []

    def memory_line(self) -> str | None:
        return memory_line(self.main, shown=self.shown) if self.main is not None else None

    def sections(self, details: bool = True) -> list:
        """The report as sections, in the order every renderer shows them. ``details=False`` leaves out
        the kernels, memory and warnings (the static HTML shows them in sections of its own)."""
        return sections(self, self.max_rows, details)

    # display (notebooks: text and HTML; a terminal: rich)
    def text(self) -> str:
        return "\n".join(line for part in self.sections() for line in _text(part))

    def html(self, details: bool = True) -> str:
        return "".join([_STYLE, '<div class="xla-lab-summary">']
                       + [h for part in self.sections(details=details) for h in _html(part)] + ["</div>"])

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text(), "text/html": self.html()}

    def __rich__(self):
        from rich.console import Group

        return Group(*[r for part in self.sections() for r in _rich(part)])

    def __repr__(self) -> str:
        return self.text()


def to_text(c: CellCapture, max_rows: int | None = MAX_ROWS) -> str:
    """The text of a capture shown on its own (no earlier runs, lines as recorded)."""
    return Report(c, max_rows=max_rows).text()


def to_html(c: CellCapture, max_rows: int | None = MAX_ROWS) -> str:
    return Report(c, max_rows=max_rows).html()


def to_rich(c: CellCapture, max_rows: int | None = MAX_ROWS):
    return Report(c, max_rows=max_rows).__rich__()


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
class Loops:
    lines: list[str]  # the main step's while loops and their trip counts (details.loop_lines)


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
class Compile:
    lines: list[str]  # where each compile's seconds went and what would cut them (Report.compile_lines)


@dataclass
class Warnings:
    lines: list[str]  # Report.warnings, clipped


@dataclass
class Profile:
    lines: list[str]  # measured time (profile_lines): totals, top kernels, top lines


def measured_totals(capture) -> str:
    """One line: how many executions were measured, their compute time (and what was left out of it),
    device busy and idle time, and the executions' dispatch-to-ready time beside them."""
    from xla_lab.profile.breakdown import fmt_ns

    steps = capture.profile.get("steps", [])
    busy = sum(s["busy_ns"] for s in steps)
    idle = sum(s["idle_before_ns"] for s in steps[1:])
    recorded = capture.profile.get("recorded_steps")
    window = (f" (the first {recorded} of the cell's {len(capture.steps)} steps were recorded)"
              if recorded is not None and recorded < len(capture.steps) else "")
    text = f"measured: {len(steps)} executions{window}"
    if steps and all("compute_ns" in s for s in steps):
        compute = sum(s["compute_ns"] for s in steps)
        left_out = sum(s.get("left_out_ns", 0.0) for s in steps)
        reasons = sorted({reason for g in capture.profile.get("graphs", {}).values()
                          for c in (g.get("compute") or {}).values() for reason in c.get("left_out", {})})
        words = {"warm-up": "one-time warm-ups", "beside a compile": "runs beside a compile"}
        text += f", kernels computing {fmt_ns(compute)}" + (
            f" (+{fmt_ns(left_out)} left out: {', '.join(words.get(r, r) for r in reasons)})" if left_out else "")
    return (text + f"; device busy {fmt_ns(busy)}, "
            f"idle between steps {fmt_ns(idle)} (waiting for Python, input, compiles)")


def profile_lines(report: Report, top: int = 3) -> list[str]:
    """A few lines for the terminal summary and the HTML report: measured totals, the top kernels
    and the top lines."""
    if not report.capture.profile:
        return []
    from xla_lab.profile.breakdown import fmt_ns

    kernels = report.profile_kernels
    out = [measured_totals(report.capture)]
    for k in kernels[:top]:
        where = kernel_lines_text({"lines": k.lines, "model_lines": k.model_lines, "sources": k.sources})
        roof = f", {k.roof_text}" if k.roof_text else ""
        left = f" [{k.left_out_text}]" if k.left_out else ""
        runs = f"{k.count}x {fmt_ns(k.run_ns)}" if k.median_ns is None else f"{k.count} runs, median {fmt_ns(k.run_ns)}"
        out.append(f"  {k.share:5.1%} {k.name} ({runs}{roof}){left} {where}".rstrip())
    for ln in report.profile_lines()[:top]:
        code = f"  {ln.code.strip()[:60]}" if ln.code else ""
        out.append(f"  {ln.label}: {ln.share:.1%} of kernel time{code}")
    return out


def sections(report: Report, max_rows: int | None = MAX_ROWS, details: bool = True) -> list:
    c, rows, step = report.capture, report.rows, report.main
    out: list = [Headline(headline(c), totals_line(c))]
    if rows:
        out.append(Steps(rows[:max_rows], len(rows) - max_rows if max_rows is not None and len(rows) > max_rows else 0))
    out.append(Recompiles(recompile_lines(c)))
    compile_text = report.compile_lines(compiles=2 if details else 1, compact=max_rows is not None)
    if compile_text:
        out.append(Compile(compile_text))
    if details and step is not None and step.fusions:
        out.append(Kernels(step.index, len(step.fusions), report.kernel_rows(top=max_rows and 6)))
        out.append(Loops(loop_lines(step, report.shown)))
    memory = report.memory_line() if details else None
    if memory:
        out.append(Memory(step.index, memory))
    out.append(Spmd(_spmd(step, max_rows)))
    if c.ranks:
        out.append(Ranks(rank_lines(c)))
    if c.profile:
        out.append(Profile(profile_lines(report)))
    if details:
        out.append(Warnings(clip_list(report.warnings)))
    return out


# --- plain text ---------------------------------------------------------------------------------
def _text(part) -> list[str]:
    if isinstance(part, Headline):
        return [part.text, "  " + part.totals]
    if isinstance(part, Steps):
        lines = [f"  {'step':<14}{'cache':<11} {'compile':>9} {'execute':>9}  cause / line"]
        for r in part.rows:
            where = f" @ {r.where}" if r.where else ""
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
    if isinstance(part, (Spmd, Profile, Ranks, Compile, Loops)):
        return ["  " + ln for ln in part.lines]
    if isinstance(part, Warnings):
        return [f"  ! {w}" for w in part.lines]
    raise TypeError(part)



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
                       f"<td>{e(_fmt_s(r.trace_s))}</td><td>{e(r.cause)}</td><td><code>{e(r.where)}</code></td>"
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
    if isinstance(part, (Spmd, Profile, Ranks, Compile, Loops)):
        return [f"<pre>{e(chr(10).join(part.lines))}</pre>"] if part.lines else []
    if isinstance(part, Warnings):
        return [f"<div class=\"miss\">! {e(w)}</div>" for w in part.lines]
    raise TypeError(part)



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
                          Text(_fmt_s(r.execute_s)), Text(_fmt_s(r.trace_s)), Text(r.cause), Text(r.where))
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
    if isinstance(part, (Spmd, Loops)):
        return [Text("\n".join(part.lines), style="cyan")] if part.lines else []
    if isinstance(part, Profile):
        return [Text("\n".join(part.lines), style="magenta")] if part.lines else []
    if isinstance(part, Compile):
        return [Text("\n".join(part.lines), style="blue")] if part.lines else []
    if isinstance(part, Ranks):
        return [Text(ln, style="bold red" if ln.startswith("! ") else "") for ln in part.lines]
    if isinstance(part, Warnings):
        return [Text("! " + w, style="yellow") for w in part.lines]
    raise TypeError(part)
