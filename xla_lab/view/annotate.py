"""Source lines annotated with the kernels they feed (the way ``%%cython -a`` annotates lines)."""

from __future__ import annotations

from xla_lab.capture.records import CellCapture, StepRecord
from xla_lab.capture.source_ref import ref_text

from .details import file_lines, fmt_count, main_step


def line_kernels(step: StepRecord) -> list[tuple[dict, list[dict]]]:
    """(line, kernels) for every cell line that feeds a kernel of the step's optimized graph,
    ordered by where the line first appears in the program."""
    by_line: dict[tuple, tuple[dict, list[dict]]] = {}
    for k in step.fusions or []:
        for ln in k["lines"]:
            entry = by_line.setdefault((ln.get("cell"), ln["line"]), (ln, []))
            entry[1].append(k)
    return list(by_line.values())


def file_line_kernels(step: StepRecord) -> dict[str, list[tuple[dict, list[dict]]]]:
    """File -> (line, kernels) for every line of a model file (a local module, a library such as
    transformers) that feeds a kernel of the step's graph, by line number; the files that feed the
    most work (flops + bytes of their kernels) first."""
    by_file: dict[str, dict[int, tuple[dict, list[dict]]]] = {}
    for k in step.fusions or []:
        for ln in file_lines(k):
            entry = by_file.setdefault(ln["file"], {}).setdefault(ln["line"], (ln, []))
            entry[1].append(k)
    def work(item):  # the files whose lines feed the most work first
        return -sum(k["flops"] + k["bytes"] for _, ks in item[1].values() for k in ks), item[0]

    return {f: [by_line[n] for n in sorted(by_line)] for f, by_line in sorted(by_file.items(), key=work)}


def annotate(target: CellCapture | StepRecord) -> str:
    """Text: each line with the kernels it feeds, their kinds, aten ops and estimated flops."""
    step = main_step(target) if isinstance(target, CellCapture) else target
    if step is None or not step.fusions:
        return "no compiled graph with a fusion map in this capture"
    out = []
    for ln, kernels in line_kernels(step):
        out.append(f"{ref_text(ln)}: {ln.get('code') or ''}")
        for k in sorted(kernels, key=lambda k: (-k["flops"], k["name"])):
            inferred = " (via data flow)" if k.get("lines_inferred") else ""
            ops = ", ".join(op.removeprefix("aten::") for op in k["aten_ops"])
            out.append(f"    {k['name']:<28} {k['kind']:<10} {fmt_count(k['flops'], 'FLOP'):>12}  {ops}{inferred}")
    for file, rows in file_line_kernels(step).items():
        out.append(f"{file}:")
        for ln, kernels in rows:
            out.append(f"  {ref_text(ln)} ({ln.get('function') or '?'}): {ln.get('code') or ''}")
            for k in sorted(kernels, key=lambda k: (-k["flops"], k["name"])):
                ops = ", ".join(op.removeprefix("aten::") for op in k["aten_ops"])
                out.append(f"    {k['name']:<28} {k['kind']:<10} {fmt_count(k['flops'], 'FLOP'):>12}  {ops}")
    return "\n".join(out)
