"""Rows for what the analysis found: recompile reasons, the kernels of a graph, its loops, its memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from xla_lab.capture.source_ref import ref_text
from xla_lab.capture.records import CellCapture, StepRecord


@dataclass
class KernelRow:
    name: str
    kind: str
    flops: str
    bytes: str
    ops: str
    lines: str


MAX_NOTES, MAX_TEXT = 30, 2000  # what a view shows of a capture's notes (untrusted notebooks can hold any)


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut at ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def clip_list(items: list[str], limit: int = MAX_NOTES) -> list[str]:
    """The first ``limit`` items, each clipped, and a line saying how many were left out."""
    out = [clip(i) for i in items[:limit]]
    if len(items) > limit:
        out.append(f"... {len(items) - limit:,} more (xla_lab.last().notes has them all)")
    return out


def fmt_count(n: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f} {prefix}{unit}"
    return f"{int(n)} {unit}"


def fmt_bytes(n: float) -> str:
    for scale, prefix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {prefix}"
    return f"{int(n)} B"


def fmt_lines(lines: list[dict], limit: int = 4) -> str:
    out = [ref_text(ln) for ln in lines[:limit]]
    if len(lines) > limit:
        out.append(f"+{len(lines) - limit}")
    return " ".join(out)


def file_lines(kernel: dict) -> list[dict]:
    """The kernel's model lines that are in files (a module, a library), not in cells: where inside
    the model the cell line's call led."""
    return [ln for ln in kernel.get("model_lines") or [] if ln.get("cell") is None and ln.get("file")]


def kernel_lines_text(kernel: dict, limit: int = 2) -> str:
    """Cell lines, then the model's own lines in files: ``[5]:3 (modeling_bert.py:413)``."""
    text = fmt_lines(kernel["lines"])
    inside = file_lines(kernel)
    if inside:
        more = f", +{len(inside) - limit}" if len(inside) > limit else ""
        inner = ", ".join(ref_text(ln) for ln in inside[:limit]) + more
        text = f"{text} ({inner})" if text else inner
    return text or ", ".join(kernel["sources"][:2])


def main_step(c: CellCapture) -> StepRecord | None:
    """The step whose graph the cell ran most (its steady state); ties go to the later one."""
    if not c.steps:
        return None
    counts = Counter(s.graph_hash for s in c.steps)
    best = max(counts.values())
    return [s for s in c.steps if counts[s.graph_hash] == best][-1]


def recompile_lines(c: CellCapture) -> list[str]:
    return [f"step {s.index} compiled: {s.recompile_reason}" for s in c.steps
            if s.cache == "miss" and s.recompile_reason]


Shown = Callable[[dict, StepRecord], dict]  # a recorded line as the run shown names it (report.Report.shown)


def _as_recorded(ln: dict, step: StepRecord) -> dict:
    return ln


def kernel_rows(step: StepRecord, top: int | None = 6, shown: Shown = _as_recorded) -> list[KernelRow]:
    """The heaviest kernels of the step's graph, their lines as ``shown`` names them."""
    kernels = sorted(step.fusions or [], key=lambda k: (-k["flops"], -k["bytes"], k["name"]))
    rows = []
    for k in kernels[:top]:
        k = {**k, "lines": [shown(ln, step) for ln in k["lines"]],
             "model_lines": [shown(ln, step) for ln in k.get("model_lines") or []]}
        ops = ", ".join(op.removeprefix("aten::") for op in k["aten_ops"][:4])
        if len(k["aten_ops"]) > 4:
            ops += f" +{len(k['aten_ops']) - 4}"
        rows.append(KernelRow(k["name"], k["kind"], fmt_count(k["flops"], "FLOP"), fmt_bytes(k["bytes"]),
                              ops, kernel_lines_text(k)))
    return rows


_LOOP_OPS = {"xla__scan": "scan", "xla___op_test_while": "while_loop"}  # torch_xla's op names


def loop_lines(step: StepRecord, shown: Shown = _as_recorded) -> list[str]:
    """One line per while loop of the step's graph (scan, scan_layers, while_loop): the call that made
    it and how many times its body runs per execution."""
    art = step.artifacts
    out = []
    for lp in (art.loops or []) if art is not None else []:
        what = _LOOP_OPS.get(lp.get("op") or "", lp.get("op") or "while loop")
        what = f"the backward of {what}" if lp.get("backward") else what
        where = kernel_lines_text({"lines": [shown(ln, step) for ln in lp["lines"]], "sources": [],
                                   "model_lines": [shown(ln, step) for ln in lp.get("model_lines") or []]})
        n = len(lp["kernels"])
        kernels = f"{n} kernel{'s' if n != 1 else ''}"
        inside = f" inside {lp['parent']}" if lp.get("parent") else ""
        if lp["trip_count"] is None:
            runs = (f"trip count not known before it runs (its bound is an input of the graph): its {kernels}"
                    " are counted once")
        elif lp.get("runs") is None:  # inside a loop whose trip count is not known
            runs = (f"{lp['trip_count']} iterations each time {lp['parent']} runs its body, whose trip count is not "
                    f"known: its {kernels} are counted once")
        else:
            runs = f"{lp['trip_count']} iterations: its {kernels} run {lp['runs']}x per execution"
        out.append(f"loop {lp['instruction']}{inside}: {what}{' at ' + where if where else ''}, {runs}")
    return out


def memory_line(step: StepRecord, shown: Shown = _as_recorded) -> str | None:
    m = step.memory
    if not m or "peak_bytes" not in m:
        return None
    text = (f"peak {fmt_bytes(m['peak_bytes'])} | parameters {fmt_bytes(m.get('parameter_bytes', 0))} | "
            f"outputs {fmt_bytes(m.get('output_bytes', 0))} | temporaries {fmt_bytes(m.get('temp_bytes', 0))}")
    largest = (m.get("largest") or [None])[0]
    if largest:
        src = shown(largest["source"], step) if largest.get("source") else None
        where = f", {ref_text(src)}" if src else ""
        what = largest.get("instruction") or "no single instruction"
        text += f" | largest {fmt_bytes(largest['bytes'])} {largest['kind']} ({what}{where})"
    return text
