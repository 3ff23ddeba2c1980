"""A fit's answer (``%xla fit``) as text, HTML with a picture (peak against the varied size: the
compiled points, the fitted line, the budget) and a rich table for terminal IPython. Renders
``FitResult.to_dict()`` only; every string that came from the user's code (step and argument names,
source lines, errors) is escaped in HTML.
"""

from __future__ import annotations

import html
import threading
import time

from xla_lab.capture.source_ref import ref_text

from .details import fmt_bytes

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 520, 260, 70, 16, 14, 36


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def headline(d: dict) -> str:
    dim, budget = d["dimension"], d["budget"]["label"]
    a = d.get("answer")
    state = d["state"]
    if state == "failed":
        return f"xla_lab fit {d['step']}: {d['error']}"
    if state in ("queued", "running"):
        return (f"xla_lab fit {d['step']} {dim} within {budget}: {state}"
                f"{' - ' + d['progress'] if d.get('progress') else ''} (runs while the kernel is idle)")
    if state == "nothing fits":
        low = min((p for p in d["points"]), key=lambda p: p["size"])
        return (f"xla_lab fit {d['step']}: nothing fits {budget}: {dim}={low['size']} already needs "
                f"{fmt_bytes(low['peak'])}")
    if state == "no limit":
        return (f"xla_lab fit {d['step']}: the peak does not grow with {dim} (the line's slope is "
                f"{d['line']['b']:.0f} B per unit): no size limit found within {budget}")
    if a is None:
        return f"xla_lab fit {d['step']} {dim} within {budget}: no size found that fits"
    return (f"xla_lab fit {d['step']}: largest {dim} within {budget}: {a['size']} "
            f"(peak {fmt_bytes(a['peak'])}, headroom {fmt_bytes(a['headroom'])})")


def detail_lines(d: dict) -> list[str]:
    out = []
    nxt = d.get("next_up")
    if nxt:
        out.append(f"next size up: {nxt['size']} needs {fmt_bytes(nxt['peak'])}, over the budget")
    elif d["state"] == "done" and d.get("max_size"):
        out.append(f"every size up to --max {d['max_size']} fits")
    c = d.get("confirm")
    if c:
        out.append(f"the line predicted {fmt_bytes(c['predicted'])} at {c['size']}; compiled: "
                   f"{fmt_bytes(c['peak'])} (off by {_pct(d['prediction_error'])})")
    if d.get("line"):
        out.append(f"fitted: peak = {fmt_bytes(max(d['line']['a'], 0))} + {fmt_bytes(d['line']['b'])} x {d['dimension']}")
    out.append(f"compiles: {d['compiles']}" + (f" (+{d['reused']} remembered)" if d.get("reused") else "")
               + (f", {d['wall_s']:.1f} s" if d.get("wall_s") else ""))
    return out


def to_text(d: dict) -> str:
    lines = [headline(d)]
    if d["state"] in ("queued", "running", "failed"):
        return "\n".join(lines)
    lines += ["  " + x for x in detail_lines(d)]
    if d["points"]:
        lines.append("  size        peak          vs budget   compile")
        for p in d["points"]:
            over = p["peak"] - d["budget"]["bytes"]
            lines.append(f"  {p['size']:<10}  {fmt_bytes(p['peak']):<12}  "
                         f"{'over ' if over > 0 else 'fits '}{fmt_bytes(abs(over)):<10}  {p['role']}"
                         + ("" if p["compiled"] else " (remembered)"))
    if d["buffers"]:
        lines.append(f"  largest buffers at {d['answer']['size'] if d.get('answer') else '?'}:")
        for b in d["buffers"]:
            lines.append(f"    {fmt_bytes(b['bytes']):>10}  {b.get('kind') or '':<9} {b.get('shape') or '':<24} "
                         f"{_where(b)}")
    lines += [f"  note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def _where(b: dict) -> str:
    if b.get("kind") == "parameter":  # an input of the program: no op of the step wrote it
        return "an input of the step (weights, optimizer state or the batch)"
    src = b.get("source")
    if isinstance(src, dict) and str(src.get("file") or "").endswith("shadow.py"):
        return "the step's state (weights, optimizer state)"
    if isinstance(src, dict) and src.get("line") is not None:
        code = src.get("code")
        return ref_text(src) + (f"  {code}" if code else "")
    return b.get("instruction") or ""


# --- the picture ------------------------------------------------------------------------------------

def picture_svg(d: dict) -> str:
    """Peak against the size: the compiled points (filled if they fit), the fitted line, the budget."""
    pts = d["points"]
    if not pts:
        return ""
    budget = d["budget"]["bytes"]
    x_max = max(p["size"] for p in pts) * 1.1
    y_max = max(max(p["peak"] for p in pts), budget) * 1.12
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def X(v: float) -> float:
        return PAD_L + pw * v / x_max

    def Y(v: float) -> float:
        return PAD_T + ph * (1 - v / y_max)

    e = html.escape
    out = [f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'role="img" style="font:11px sans-serif">',
           f"<title>{e(d['step'])}: peak memory against {e(d['dimension'])}</title>",
           f'<line x1="{PAD_L}" y1="{PAD_T + ph}" x2="{PAD_L + pw}" y2="{PAD_T + ph}" stroke="#888"/>',
           f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PAD_T + ph}" stroke="#888"/>']
    for frac in (0.5, 1.0):
        v = y_max / 1.12 * frac
        out.append(f'<text x="{PAD_L - 4}" y="{Y(v) + 4:.1f}" text-anchor="end">{e(fmt_bytes(v))}</text>')
    out.append(f'<text x="{PAD_L + pw}" y="{H - 6}" text-anchor="end">{e(d["dimension"])}</text>')
    out.append(f'<text x="{PAD_L}" y="{H - 6}">0</text>')
    out.append(f'<text x="{X(max(p["size"] for p in pts)):.1f}" y="{H - 18}" text-anchor="middle">'
               f'{max(p["size"] for p in pts)}</text>')
    yb = Y(budget)
    out.append(f'<line x1="{PAD_L}" y1="{yb:.1f}" x2="{PAD_L + pw}" y2="{yb:.1f}" stroke="#c0392b" '
               'stroke-dasharray="5,3"/>')
    out.append(f'<text x="{PAD_L + 4}" y="{yb - 4:.1f}" fill="#c0392b">budget {e(d["budget"]["label"])}</text>')
    line = d.get("line")
    if line and line["b"] > 0:
        x1 = x_max
        y1 = line["a"] + line["b"] * x1
        x0, y0 = 0.0, line["a"]
        if y1 > y_max:  # clip where the line leaves the plot
            x1, y1 = (y_max - line["a"]) / line["b"], y_max
        if y0 < 0:
            x0, y0 = -line["a"] / line["b"], 0.0
        out.append(f'<line class="fit-line" x1="{X(x0):.1f}" y1="{Y(y0):.1f}" x2="{X(x1):.1f}" y2="{Y(y1):.1f}" '
                   'stroke="#2c7fb8" stroke-width="1.5"/>')
    answer = (d.get("answer") or {}).get("size")
    for p in pts:
        fits = p["peak"] <= budget
        fill = "#27ae60" if fits else "#fff"
        stroke = "#27ae60" if fits else "#c0392b"
        r = 6 if p["size"] == answer else 4
        out.append(f'<circle class="fit-point" cx="{X(p["size"]):.1f}" cy="{Y(p["peak"]):.1f}" r="{r}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{e(d["dimension"])}={p["size"]}: '
                   f'{e(fmt_bytes(p["peak"]))} ({e(p["role"])})</title></circle>')
    out.append("</svg>")
    return "".join(out)


def to_html(d: dict) -> str:
    e = html.escape
    parts = ['<div class="xla-lab-fit">', f"<div><b>{e(headline(d))}</b></div>"]
    if d["state"] in ("queued", "running", "failed"):
        return "".join(parts) + "</div>"
    parts.append(picture_svg(d))
    parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in detail_lines(d)) + "</ul>")
    if d["points"]:
        parts.append("<table><tr><th>size</th><th>peak</th><th>vs budget</th><th>compile</th></tr>")
        for p in d["points"]:
            over = p["peak"] - d["budget"]["bytes"]
            parts.append(f"<tr><td>{p['size']}</td><td>{e(fmt_bytes(p['peak']))}</td>"
                         f"<td>{'over' if over > 0 else 'fits'} by {e(fmt_bytes(abs(over)))}</td>"
                         f"<td>{e(p['role'])}{'' if p['compiled'] else ' (remembered)'}</td></tr>")
        parts.append("</table>")
    if d["buffers"]:
        parts.append(f"<div>largest buffers at {d['answer']['size'] if d.get('answer') else '?'}:</div>")
        parts.append("<table><tr><th>bytes</th><th>kind</th><th>shape</th><th>written by</th></tr>")
        for b in d["buffers"]:
            parts.append(f"<tr><td>{e(fmt_bytes(b['bytes']))}</td><td>{e(str(b.get('kind') or ''))}</td>"
                         f"<td><code>{e(str(b.get('shape') or ''))}</code></td><td><code>{e(_where(b))}</code></td></tr>")
        parts.append("</table>")
    parts.append("".join(f'<div class="note">note: {e(n)}</div>' for n in d["notes"]))
    parts.append("</div>")
    return "".join(parts)


def to_rich(d: dict):
    """A rich renderable: the headline, the compiled sizes as a table, the buffers, the notes."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    items = [Text(headline(d), style="bold")]
    if d["state"] not in ("queued", "running", "failed"):
        items += [Text("  " + x) for x in detail_lines(d)]
        table = Table(title=f"peak against {d['dimension']}")
        for col in ("size", "peak", "vs budget", "compile"):
            table.add_column(col)
        for p in d["points"]:
            over = p["peak"] - d["budget"]["bytes"]
            table.add_row(str(p["size"]), fmt_bytes(p["peak"]),
                          Text(f"{'over' if over > 0 else 'fits'} by {fmt_bytes(abs(over))}",
                               style="red" if over > 0 else "green"),
                          p["role"] + ("" if p["compiled"] else " (remembered)"))
        items.append(table)
        if d["buffers"]:
            buffers = Table(title="largest buffers at the answer")
            for col in ("bytes", "kind", "shape", "written by"):
                buffers.add_column(col)
            for b in d["buffers"]:
                buffers.add_row(fmt_bytes(b["bytes"]), str(b.get("kind") or ""), str(b.get("shape") or ""), _where(b))
            items.append(buffers)
        items += [Text(f"note: {n}", style="dim") for n in d["notes"]]
    return Group(*items)


class FitView:
    """A fit's result as Jupyter, terminal IPython and ``repr`` show it; everything else is the result's
    (``.result``: the data, ``precompile/fit.py``)."""

    def __init__(self, result):
        self.result = result

    def __getattr__(self, name: str):
        return getattr(self.result, name)

    def wait(self, timeout: float | None = None) -> "FitView":
        self.result.wait(timeout)
        return self

    def text(self) -> str:
        return to_text(self.result.to_dict())

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text(), "text/html": to_html(self.result.to_dict())}

    def __rich__(self):
        return to_rich(self.result.to_dict())


def live_widget(result, min_interval: float = 0.25):
    """An ipywidgets.HTML that follows a running fit; its bundle keeps static text/plain and text/html
    (what a saved notebook shows)."""
    import ipywidgets

    class FitWidget(ipywidgets.HTML):
        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs) or {}
            bundle.update(FitView(result)._repr_mimebundle_())
            return bundle

        def __repr__(self) -> str:
            return to_text(result.to_dict())

    widget = FitWidget(value=to_html(result.to_dict()))
    lock = threading.Lock()
    state = {"last": 0.0}

    def refresh(_result=None) -> None:
        with lock:
            if time.time() - state["last"] < min_interval and not result.finished:
                return
            state["last"] = time.time()
        widget.value = to_html(result.to_dict())

    result.listeners.append(refresh)
    return widget
