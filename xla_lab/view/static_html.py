"""The panel as static HTML: what a notebook shows without the widget (nbconvert, a notebook reopened
without a kernel, VS Code) and what ``%xla report FILE.html`` writes for a whole session.

No scripts, no network: summary, warnings, kernels, the cell's source annotated with the kernels each
line feeds, memory, HLO before/after in ``<details>``. Every piece of user text (cell source, graph
names, HLO, notes) goes through ``html.escape``. Colours come from JupyterLab's theme variables
(``var(--jp-...)``) with fallbacks; the report defines those variables for light and dark schemes.
"""

from __future__ import annotations

import html
import time

from xla_lab.capture.records import CellCapture, GraphArtifacts
from xla_lab.capture.source_ref import ref_text
from xla_lab.hlo.parser import strip_metadata

from .details import clip_list, fmt_bytes, fmt_count, kernel_lines_text
from .panel_model import model_files, source_lines
from .report import MAX_ROWS, Report, measured_totals

# Notebook outputs keep the HLO short (the capture MIME payload has all of it); the report keeps it all.
NOTEBOOK_HLO_LINES = 100
NOTEBOOK_KERNELS = 40

STYLE = """<style>
.xla-lab-panel{font-family:var(--jp-code-font-family,monospace);font-size:12px;
 color:var(--jp-content-font-color1,inherit);background:transparent}
.xla-lab-panel h4{margin:10px 0 4px;font-size:12px;color:var(--jp-ui-font-color1,inherit)}
.xla-lab-panel table{border-collapse:collapse;margin:4px 0;font-size:inherit}
.xla-lab-panel td,.xla-lab-panel th{padding:1px 8px;text-align:left;vertical-align:top;
 border-bottom:1px solid var(--jp-border-color2,#ddd)}
.xla-lab-panel .warn{color:var(--jp-warn-color0,#b7791f)}
.xla-lab-panel .num{text-align:right;white-space:nowrap}
.xla-lab-panel pre{margin:2px 0;padding:4px;max-height:40em;overflow:auto;white-space:pre;
 background:var(--jp-layout-color2,rgba(127,127,127,.08));color:var(--jp-content-font-color1,inherit)}
.xla-lab-panel .src td{border:none;padding:0 8px}
.xla-lab-panel .src .hot{background:var(--jp-warn-color3,rgba(255,200,0,.18))}
.xla-lab-panel .k{color:var(--jp-content-font-color2,#666)}
.xla-lab-panel details{margin:2px 0}
.xla-lab-panel summary{cursor:pointer;color:var(--jp-ui-font-color1,inherit)}
</style>"""

# The report is opened outside JupyterLab: give the --jp variables values for both colour schemes.
REPORT_THEME = """<style>
:root{color-scheme:light dark;--jp-content-font-color1:#1a1a1a;--jp-content-font-color2:#555;
 --jp-ui-font-color1:#1a1a1a;--jp-border-color2:#ddd;--jp-layout-color0:#fff;--jp-layout-color2:#f3f3f3;
 --jp-warn-color0:#b7791f;--jp-warn-color3:#fff3c4;--jp-success-color0:#2f855a;
 --jp-code-font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme: dark){:root{--jp-content-font-color1:#e6e6e6;--jp-content-font-color2:#aaa;
 --jp-ui-font-color1:#e6e6e6;--jp-border-color2:#444;--jp-layout-color0:#111;--jp-layout-color2:#1d1d1d;
 --jp-warn-color0:#f6ad55;--jp-warn-color3:#4a3b12;--jp-success-color0:#68d391}}
body{background:var(--jp-layout-color0);color:var(--jp-content-font-color1);margin:16px;
 font-family:var(--jp-code-font-family)}
.xla-lab-report>section{border-top:2px solid var(--jp-border-color2);padding-top:8px;margin-top:16px}
</style>"""


e = html.escape


def capture_html(c: CellCapture, *, hlo_lines: int | None = NOTEBOOK_HLO_LINES,
                 kernels: int | None = NOTEBOOK_KERNELS, graphs: str = "main", style: bool = True,
                 max_rows: int | None = MAX_ROWS, runs=(), prompts=None) -> str:
    """One capture shown on its own as static HTML (see ``of_report``)."""
    return of_report(Report(c, runs, prompts, max_rows), hlo_lines=hlo_lines, kernels=kernels, graphs=graphs,
                     style=style)


def of_report(report: Report, *, hlo_lines: int | None = NOTEBOOK_HLO_LINES, kernels: int | None = NOTEBOOK_KERNELS,
              graphs: str = "main", style: bool = True) -> str:
    """A report as static HTML. ``graphs``: "main" (the graph the panel opens on), "all" or "none";
    ``hlo_lines``: lines of HLO shown per module (None: all, with op metadata)."""
    c = report.capture
    parts = [STYLE if style else "", '<div class="xla-lab-panel">', report.html(details=False)]
    if report.warnings:
        parts.append("<h4>warnings</h4><ul>")
        parts.extend(f'<li class="warn">{e(w)}</li>' for w in clip_list(report.warnings))
        parts.append("</ul>")
    step = report.main
    if step is not None and step.fusions:
        parts.append(_kernels_table(report, kernels))
        parts.append(_annotated_source(c))
    if step is not None and step.memory:
        parts.append(_memory(report))
    if c.profile:
        parts.append(_profile(report, kernels))
    arts = c.artifacts()
    if graphs == "all":
        shown = list(arts.values())
    elif graphs == "main" and step is not None and step.artifacts is not None:
        shown = [step.artifacts]
    else:
        shown = []
    for art in shown:
        parts.append(_hlo(art, hlo_lines))
    parts.append("</div>")
    return "".join(parts)


def _kernels_table(report: Report, top: int | None) -> str:
    step = report.main
    rows = report.kernel_rows(top)
    out = [f"<h4>kernels of step {step.index}'s graph ({len(step.fusions)}, by flops)</h4>",
           "<table><tr><th>kernel</th><th>kind</th><th class=\"num\">flops</th><th class=\"num\">bytes</th>"
           "<th>members</th><th>aten ops</th><th>lines</th></tr>"]
    members = {k["name"]: len(k["members"]) for k in step.fusions}
    for r in rows:
        out.append(f"<tr><td><code>{e(r.name)}</code></td><td>{e(r.kind)}</td><td class=\"num\">{e(r.flops)}</td>"
                   f"<td class=\"num\">{e(r.bytes)}</td><td class=\"num\">{members.get(r.name, 0)}</td>"
                   f"<td>{e(r.ops)}</td><td><code>{e(r.lines)}</code></td></tr>")
    out.append("</table>")
    if top is not None and len(step.fusions) > top:
        out.append(f"<div>... {len(step.fusions) - top} more kernels (all of them are in the panel and in "
                   "<code>%xla report</code>)</div>")
    return "".join(out)


def _profile(report: Report, top: int | None) -> str:
    """Measured time (%%xla --profile): the kernels and lines that took it."""
    from xla_lab.profile.breakdown import fmt_ns

    kernels = report.profile_kernels
    shown = kernels if top is None else kernels[:top]
    out = [f"<h4>measured time ({len(kernels)} kernels)</h4><div>{e(measured_totals(report.capture))}</div>",
           "<table><tr><th>kernel</th><th class=\"num\">runs</th><th class=\"num\">total</th><th class=\"num\">a run</th>"
           "<th class=\"num\">share</th><th class=\"num\">flops</th><th class=\"num\">bytes</th><th>roofline</th>"
           "<th>lines</th></tr>"]
    for k in shown:
        lines = kernel_lines_text({"lines": k.lines, "model_lines": k.model_lines, "sources": k.sources})
        left = f"<br><small>{e(k.left_out_text)}</small>" if k.left_out else ""
        out.append(f"<tr><td><code>{e(k.name)}</code>{left}</td><td class=\"num\">{k.count}</td>"
                   f"<td class=\"num\">{e(fmt_ns(k.total_ns))}</td><td class=\"num\">{e(fmt_ns(k.run_ns))}</td>"
                   f"<td class=\"num\">{k.share:.1%}</td><td class=\"num\">{e(fmt_count(k.flops, 'FLOP'))}</td>"
                   f"<td class=\"num\">{e(fmt_bytes(k.bytes))}</td><td>{e(k.roof_text or '-')}</td>"
                   f"<td><code>{e(lines)}</code></td></tr>")
    out.append("</table><table><tr><th>line</th><th class=\"num\">share</th><th>code</th></tr>")
    rows = report.profile_lines()
    for ln in rows if top is None else rows[:top]:
        out.append(f"<tr><td><code>{e(ln.label)}</code></td><td class=\"num\">{ln.share:.1%}</td>"
                   f"<td><code>{e((ln.code or '').strip())}</code></td></tr>")
    out.append("</table>")
    return "".join(out)


def _annotated_source(c: CellCapture) -> str:
    out = ["<h4>the cell's lines and the kernels they feed</h4><table class=\"src\">"]
    for ln in source_lines(c):
        names = ln["kernels"]
        shown = ", ".join(names[:6]) + (f" +{len(names) - 6}" if len(names) > 6 else "")
        flops = fmt_count(ln["flops"], "FLOP") if names else ""
        hot = ' class="hot"' if names else ""
        out.append(f"<tr{hot}><td class=\"num\">{ln['line']}</td><td><pre style=\"margin:0;padding:0;"
                   f"background:none;max-height:none\">{e(ln['code'])}</pre></td>"
                   f"<td class=\"k\">{e(shown)}</td><td class=\"num k\">{e(flops)}</td></tr>")
    out.append("</table>")
    files = model_files(c)
    for f in files[:STATIC_MODEL_FILES]:
        out.append(f"<h4>lines of <code>{e(f['file'])}</code> and the kernels they feed</h4><table class=\"src\">")
        for ln in f["lines"][:STATIC_FILE_LINES]:
            names = ln["kernels"]
            shown = ", ".join(names[:6]) + (f" +{len(names) - 6}" if len(names) > 6 else "")
            out.append(f"<tr class=\"hot\"><td class=\"num\">{ln['line']}</td><td><pre style=\"margin:0;padding:0;"
                       f"background:none;max-height:none\">{e(ln['code'])}</pre></td><td class=\"k\">{e(ln['function'])}</td>"
                       f"<td class=\"k\">{e(shown)}</td><td class=\"num k\">{e(fmt_count(ln['flops'], 'FLOP'))}</td></tr>")
        out.append("</table>")
        if len(f["lines"]) > STATIC_FILE_LINES:
            out.append(f"<div>... {len(f['lines']) - STATIC_FILE_LINES} more lines of this file in the panel</div>")
    if len(files) > STATIC_MODEL_FILES:
        out.append(f"<div>... {len(files) - STATIC_MODEL_FILES} more model files in the panel</div>")
    return "".join(out)


STATIC_MODEL_FILES, STATIC_FILE_LINES = 3, 40  # a saved notebook's fallback stays small


def _memory(report: Report) -> str:
    step = report.main
    m = step.memory
    out = [f"<h4>memory of step {step.index}'s graph</h4>"]
    line = report.memory_line()
    if line:
        out.append(f"<div>{e(line)}</div>")
    largest = m.get("largest") or []
    if largest:
        out.append("<table><tr><th class=\"num\">bytes</th><th>kind</th><th>instruction</th><th>line</th></tr>")
        for b in largest[:10]:
            src = report.shown(b["source"], step) if b.get("source") else None
            where = ""
            if src:
                where = ref_text(src) + (f" {src['code']}" if src.get("code") else "")
            out.append(f"<tr><td class=\"num\">{e(fmt_bytes(b.get('bytes', 0)))}</td><td>{e(str(b.get('kind', '')))}"
                       f"</td><td><code>{e(str(b.get('instruction') or '-'))}</code></td><td><code>{e(where)}</code>"
                       "</td></tr>")
        out.append("</table>")
    return "".join(out)


def _hlo(art: GraphArtifacts, max_lines: int | None) -> str:
    name = art.graph_name or art.graph_hash[:12]
    out = []
    for label, text in (("HLO before optimization", art.hlo_before), ("HLO after optimization", art.hlo_after)):
        if not text:
            continue
        note = ""
        if max_lines is not None:
            text = strip_metadata(text)
            lines = text.splitlines()
            if len(lines) > max_lines:
                note = f" (first {max_lines} of {len(lines)} lines, op metadata left out)"
                text = "\n".join(lines[:max_lines])
            else:
                note = " (op metadata left out)"
        out.append(f"<details><summary>{e(label)} of graph <code>{e(name)}</code>{e(note)}</summary>"
                   f"<pre>{e(text)}</pre></details>")
    return "".join(out)


def report_html(captures: list[CellCapture], title: str = "xla_lab report", prompts=None,
                fits: list[dict] | tuple = ()) -> str:
    """One self-contained page for a session's captures: no scripts, no network; each graph's full
    HLO appears once (captures that ran a graph an earlier capture showed point back to it).

    ``fits``: the session's ``%xla fit`` answers (``FitResult.to_dict()``), in a section of their own
    after the captures. A fit belongs to a marked step, not to a cell run: it runs none of the cell's
    code and records no capture, so it is no part of any capture's report; its picture and table are
    the ones its own output shows (``fit_view.to_html``)."""
    parts = ["<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">",
             f"<title>{e(title)}</title>", REPORT_THEME, STYLE, "</head><body class=\"xla-lab-report\">",
             f"<h2>{e(title)}</h2>",
             f"<div>{len(captures)} captured cell run{'s' if len(captures) != 1 else ''}; written "
             f"{e(time.strftime('%Y-%m-%d %H:%M:%S'))}</div>"]
    shown: set[str] = set()
    for n, c in enumerate(captures):
        parts.append(f"<section id=\"capture-{n}\"><h3>capture {n}</h3>")
        parts.append(of_report(Report(c, captures[:n], prompts, max_rows=None), hlo_lines=None, kernels=None,
                               graphs="none", style=False))
        for h, art in c.artifacts().items():
            if h in shown:
                parts.append(f"<div>graph <code>{e(art.graph_name or h[:12])}</code>: HLO shown in an earlier "
                             "capture above</div>")
                continue
            shown.add(h)
            parts.append('<div class="xla-lab-panel">' + _hlo(art, None) + "</div>")
        parts.append("<h4>source of the cell</h4>")
        parts.append(f'<pre class="xla-lab-panel">{e(c.source)}</pre></section>')
    if fits:
        from .fit_view import to_html as fit_html

        parts.append(f'<section id="fits"><h3>Will it fit? ({len(fits)} fit{"s" if len(fits) != 1 else ""})</h3>')
        parts += [f'<div class="xla-lab-panel" id="fit-{n}">{fit_html(d)}</div>' for n, d in enumerate(fits)]
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "".join(parts)
