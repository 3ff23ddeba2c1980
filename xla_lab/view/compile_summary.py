"""A compile profile in a few lines of text (the terminal, the HTML summary, the static report) and the
one-line comparison of two compiles (the side panel's Compare). Renders ``profile/compile_breakdown.py``."""

from __future__ import annotations

from xla_lab.profile.breakdown import fmt_ns
from xla_lab.profile.compile_breakdown import CompileView


def _s(ns: float | None) -> str:
    return "?" if ns is None else f"{ns / 1e9:.2f} s"


WAIT_SHOWN_FROM_NS = 1e6  # a compiling sync's wait for its own step's execution is worth a word from a millisecond


def headline(v: CompileView) -> str:
    p, counts = v.profile, v.profile.get("counts") or {}
    lowering = f" (+{_s(p['lowering_ns'])} lowering in torch_xla before it)" if p.get("lowering_ns") else ""
    waited = "" if (p.get("execution_wait_ns") or 0) < WAIT_SHOWN_FROM_NS else (
        f"; then the sync waited {_s(p['execution_wait_ns'])} for the step's own execution (torch_xla freed "
        "its donated inputs on the syncing thread)")
    sizes = []
    if counts.get("hlo_before") is not None:
        sizes.append(f"{counts['hlo_before']} HLO instructions before optimization")
    if counts.get("hlo_after") is not None:
        after = "after" if sizes else "HLO instructions after optimization"  # (lean capture has no before)
        sizes.append(f"{counts['hlo_after']} {after} (fused computations included)")
    if counts.get("kernels") is not None:
        sizes.append(f"{counts['kernels']} kernels")
    if counts.get("functions") is not None:
        sizes.append(f"{counts['functions']} functions compiled")
    name = v.graph_name or v.graph_hash[:12]
    return (f"compile of step {v.step} ({name}): {_s(v.compile_ns)} CompileTime{lowering}{waited}; "
            + ", ".join(sizes)).rstrip("; ")


def phase_lines(v: CompileView, top: int = 3) -> list[str]:
    p = v.profile
    out = []
    for ph in p["phases"]:
        detail = ""
        if ph["name"] == "HLO passes":
            passes = [x for x in p.get("passes") or [] if x["name"] != "RunInvariantCheckers"][:top]
            verifier = next((x for x in p.get("passes") or [] if x["name"] == "RunInvariantCheckers"), None)
            detail = ", ".join(f"{x['name']} {_s(x['ns'])}" for x in passes)
            if verifier:
                detail += f"; HLO verifier {_s(verifier['ns'])} ({verifier['count']} runs)"
        elif ph["name"] == "kernel emission" and not p.get("kernel_events", True):
            detail = "on the compiling thread; this XLA records no compile event per kernel"
        elif ph["name"] == "kernel emission":
            n_untimed = sum(len(names) for names in v.untimed.values())
            detail = (f"{len(v.kernels)} kernels timed on {p.get('kernel_threads', 0)} codegen thread(s): "
                      f"{_s(p.get('kernel_thread_ns'))} of thread time in this wall time; {n_untimed} without "
                      "a time of their own")
        elif ph["name"] == "LLVM codegen":
            cg = p.get("codegen") or {}
            detail = (f"{cg.get('functions')} functions in {cg.get('parts')} parts on {cg.get('threads')} thread(s), "
                      f"{_s(cg.get('thread_ns'))} of thread time; XLA does not time it per kernel")
        if not ph.get("traced", True) and not detail:
            detail = "untraced: placed by where it falls between XLA's traced steps"
        out.append(f"  {ph['name']:<33} {_s(ph['ns']):>8} {ph['share']:6.1%}" + (f"  {detail}" if detail else ""))
    traced = p.get("traced")
    out.append(f"  named phases: {p['explained']:.0%} of CompileTime"
               + (f"; inside XLA's traced steps: {traced:.0%}" if traced is not None else ""))
    return out


def line_rows(v: CompileView, top: int = 3, model: bool = False) -> list[str]:
    rows = v.model_lines if model else v.lines
    out = []
    for ln in rows[:top]:
        code = f"  {ln.code.strip()[:60]}" if ln.code else ""
        out.append(f"  {ln.label}: {fmt_ns(ln.total_ns)} ({ln.share:.0%} of kernel compile time, "
                   f"{len(ln.kernels)} kernels){code}")
    return out


def phases_in_one_line(v: CompileView) -> str:
    parts = [f"{ph['name']} {_s(ph['ns'])} ({ph['share']:.0%})" for ph in v.profile["phases"] if ph["share"] >= 0.05]
    threads = v.profile.get("kernel_threads") or (v.profile.get("codegen") or {}).get("threads")
    where = f"; emission and codegen on {threads} threads" if threads else ""
    return "  " + " | ".join(parts) + where


def compile_lines(v: CompileView, advice: list[dict] | None = None, top: int = 3, compact: bool = False) -> list[str]:
    """The compile in text: headline, phases, the lines that cost most, the advice. ``compact``: the
    phases in one line and the top line only (a cell's summary; ``%xla show`` has it all)."""
    if compact:
        out = [headline(v), phases_in_one_line(v)]
        out.extend("  most kernel compile time:" + ln[1:] for ln in line_rows(v, 1))
        out.extend(f"  advice: {a['text']}" for a in advice or [])
        return out
    out = [headline(v)] + phase_lines(v, top)
    if v.kernels:
        out.append("  kernel compile time by cell line:")
        out.extend("  " + ln for ln in line_rows(v, top))
        model = [ln for ln in v.model_lines[:top] if ln.file]
        if model:
            out.append("  by the model's own lines:")
            out.extend("  " + ln for ln in line_rows(v, top, model=True))
    for a in advice or []:
        out.append(f"  advice: {a['text']}")
    return out


def compare_line(a: CompileView, b: CompileView) -> str:
    """"B compiled 2.1x longer than A: 180 more kernels, most from [7]:12"."""
    ratio = b.compile_ns / a.compile_ns if a.compile_ns else float("inf")
    ka, kb = (a.profile.get("counts") or {}).get("kernels"), (b.profile.get("counts") or {}).get("kernels")
    text = f"B compiled {ratio:.1f}x {'longer' if ratio >= 1 else 'shorter'} than A ({_s(b.compile_ns)} vs {_s(a.compile_ns)})"
    if ka is not None and kb is not None and ka != kb:
        more = kb - ka
        text += f": {abs(more)} {'more' if more > 0 else 'fewer'} kernels"
        grown = _grown_line(a, b) if more > 0 else None
        if grown:
            text += f", most from {grown}"
    return text


def _grown_line(a: CompileView, b: CompileView) -> str | None:
    """The line whose kernel count grew most from A to B (by label)."""
    count_a = {ln.label: len(ln.kernels) for ln in a.lines}
    best = max(b.lines, key=lambda ln: len(ln.kernels) - count_a.get(ln.label, 0), default=None)
    if best is None or len(best.kernels) - count_a.get(best.label, 0) <= 0:
        return None
    return best.label
