"""The per-cell panel's data: one JSON-able dict built from a ``CellCapture`` (and the earlier runs of
the same cell), read by the browser side (``extension/``, ``xla_lab/view/static/panel.js``) and by the
static HTML. Its contract (schema ``xla_lab.panel/1``) is ``panel_format.py``: its types, the JSON Schema
made from them (``panel_schema.py``), and the TypeScript types and validator the extension generates
from that schema.

Graph nodes come from the graph's IR text; the kernel each node ended in, its scope and its cell line
come from ``GraphArtifacts.node_info`` (computed once per compile by ``capture/analysis.py``).

A node's ``scope`` is the path of library frames between the cell line and the op, outermost first,
joined by " > " (``transformer.py:forward > transformer.py:_sa_block > activation.py:forward``; torch's
module-call plumbing left out); backward ops, which run without a Python stack, get the scope of the
forward op whose values they read, prefixed ``autograd > ``; ops written directly in a cell have no
scope (their ``cell``/``line`` say where they are); a node with no call stack at all has its innermost
frame (``linear.py:134``). Added to the contract: per graph ``ir_source``, ``steps`` (indices of the
steps that ran it) and ``kernel_share`` (share of non-input nodes mapped to a kernel); per source line
``flops`` (estimated flops of the kernels it feeds). ``source_lines`` kernels are the main graph's;
``model_files`` lists the lines of model files (outside the cell) that feed them.
"""

from __future__ import annotations


from xla_lab.capture.ir_graph import parse_ir_text
from xla_lab.capture.records import CellCapture, GraphArtifacts

from .annotate import file_line_kernels, line_kernels
from .details import file_lines, main_step
from .panel_format import SCHEMA
from .ranks import rank_rows
from .report import Report

MIME = "application/vnd.xla-lab.capture+json"  # the panel model in an output (the JupyterLab extension renders it)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"  # a widget's view in an output


def panel_model(capture: CellCapture, runs: list[CellCapture] | tuple = (), prompts=None) -> dict:
    """``runs``: earlier captures of the same cell (same ``cell_id``), oldest first; captures of other
    cells and ``capture`` itself are ignored if present; ``prompts``: see ``Report``."""
    return of_report(Report(capture, runs, prompts))


def of_report(report: Report) -> dict:
    """The panel's JSON of a report: its step rows and warnings as every renderer shows them."""
    capture = report.capture
    arts = capture.artifacts()
    step = report.main
    main = step.graph_hash if step is not None and step.graph_hash in arts else None
    data = capture.to_dict()
    _current_lines(data, report)
    return {
        "schema": SCHEMA,
        "capture": data,
        "summary": summary(report),
        "main_graph": main,
        "graphs": {h: graph_model(a, [s.index for s in capture.steps if s.graph_hash == h], report)
                   for h, a in arts.items()},
        "source_lines": source_lines(capture),
        "model_files": model_files(capture),
        "runs": [run_model(r) for r in report.earlier + [capture]],
        # added to the contract: measured time (%%xla --profile), None when the cell was not profiled
        "profile": profile_model(report),
        # added to the contract: where each compile of this run went (compile_model), [] if none
        "compile": compile_model(report),
        "partial": False,  # (a quiet run's message: steps and summary only, panel.quiet_message)
    }


def _line_row(ln) -> dict:
    return {"ref": ln.ref, "label": ln.label, "ns": ln.total_ns, "share": ln.share, "kernels": len(ln.kernels),
            "top_kernels": [name for name, _ in ln.kernels[:5]]}


def compile_model(report: Report, top: int = 200) -> list[dict]:
    """Per compile of the run: the profile's phases, passes and counts, the kernels with their compile
    time and lines (as the report names them), the lines and aten ops by compile time, the kernels
    without a time and why, the advice, and the text lines every other renderer shows."""
    from xla_lab.view.compile_summary import compile_lines

    out = []
    for v in report.compile_views:
        p = v.profile
        op_counts = {x["name"]: x.get("op_count") for x in p["kernels"]}
        advice = report.advice(v.graph_hash)
        out.append({
            "graph_hash": v.graph_hash, "graph_name": v.graph_name, "step": v.step, "module": p.get("module"),
            "compile_ns": p["compile_ns"], "lowering_ns": p.get("lowering_ns"),
            "execution_wait_ns": p.get("execution_wait_ns"), "explained": p["explained"],
            "phases": p["phases"], "pipelines": p.get("pipelines") or [], "passes": (p.get("passes") or [])[:40],
            "counts": p.get("counts") or {}, "codegen": p.get("codegen") or {},
            "kernel_threads": p.get("kernel_threads"), "kernel_thread_ns": p.get("kernel_thread_ns"),
            "kernels": [{"name": k.name, "kind": k.kind, "ns": k.total_ns, "share": k.share,
                         "op_count": op_counts.get(k.name),
                         "lines": k.lines, "model_lines": k.model_lines, "aten_ops": k.aten_ops}
                        for k in v.kernels[:top]],
            "untimed": [{"reason": why, "kernels": names} for why, names in v.untimed.items()],
            "lines": [_line_row(ln) for ln in v.lines[:50]],
            "model_lines": [_line_row(ln) for ln in v.model_lines[:50]],
            "ops": [{"op": op, "ns": ns, "share": share} for op, ns, share in v.ops[:50]],
            "advice": [{"kind": a["kind"], "text": a["text"], "where": a.get("where"), "line": a.get("line")}
                       for a in advice],
            "text": compile_lines(v, advice),
        })
    return out


# --- summary ------------------------------------------------------------------------------------
def summary(report: Report) -> dict:
    c = report.capture
    return {
        "steps": len(c.steps), "compiles": c.compiles, "cache_hits": c.cache_hits, "precompiled": c.precompiled,
        "trace_s": c.total("trace_s"), "compile_s": c.total("compile_s"), "execute_s": c.total("execute_s"),
        "transfer_s": c.total("to_device_s") + c.total("from_device_s") + sum(c.outside_steps.values()),
        # added to the contract: what compiling syncs then waited for their own step's execution
        "execution_wait_s": c.total("execution_wait_s"),
        "recompiles": [{"step": s.index, "reason": s.recompile_reason} for s in c.steps
                       if s.cache == "miss" and s.recompile_reason],
        # added to the contract: the step table's rows (folded as every renderer shows them) and the
        # one list of warnings (view/report.py)
        "rows": [r.to_dict() for r in report.rows],
        "warnings": list(report.warnings),
        # added to the contract: the ranks of the cell's multi-process launches (view/ranks.py), [] if none
        "ranks": [r.to_dict() for r in rank_rows(c)],
    }


# --- graphs -------------------------------------------------------------------------------------
def _current_lines(data: dict, report: Report) -> None:
    """In the capture's copy: kernel lines and buffer sources as the report names them (the run that
    compiled a graph as this run, other cells by their newest prompt)."""
    for art in (data.get("artifacts") or {}).values():
        compiled_in = art.get("compiled_in")
        for k in art.get("fusions") or []:
            for key in ("lines", "model_lines"):
                if k.get(key):
                    k[key] = [report.shown_in(ln, compiled_in) for ln in k[key]]
        for buffer in (art.get("memory") or {}).get("largest") or []:
            if isinstance(buffer, dict) and isinstance(buffer.get("source"), dict):
                buffer["source"] = report.shown_in(buffer["source"], compiled_in)


LEAN_GRAPH = ("Lean capture records no graph before optimization (XLA's dump is off), so the lazy graph "
              "cannot be drawn. The kernels, HLO after optimization, memory and compile profile are in the other "
              "tabs. For the graph, run the cell in full capture (a kernel without %xla mode lean).")


def graph_model(art: GraphArtifacts, steps: list[int] | None = None, report: Report | None = None) -> dict:
    """Nodes, edges and roots of one graph, each node with its kernel, scope and cell line (as the
    ``report`` names it, when given)."""
    info = art.node_info if art.ir_source == "hlo-before" and art.node_info and "ids" in art.node_info else None
    at = {node_id: i for i, node_id in enumerate(info["ids"])} if info else {}
    nodes, edges, roots = [], [], []
    for n in parse_ir_text(art.ir_text or ""):
        cell = line = code = scope = kernel = None
        i = at.get(n.id)
        if i is not None:
            kernel = info["kernel"][i]
            if info["scope"][i] >= 0:
                scope = info["scopes"][info["scope"][i]]
            if info["line"][i] >= 0:
                ln = info["lines"][info["line"][i]]
                if report is not None:
                    ln = report.shown(ln, art)
                cell, line, code = ln.get("cell"), ln.get("line"), ln.get("code")
        elif n.location:
            scope = n.location
        nodes.append({"id": n.id, "op": n.op, "shape": n.shape, "cell": cell, "line": line,
                      "code": code, "scope": scope, "kernel": kernel})
        edges.extend([src, n.id] for src in n.operands)
        if n.root is not None:
            roots.append(n.id)
    with_kernel = sum(1 for n in nodes if n["kernel"])
    computing = sum(1 for n in nodes if n["op"] != "xla::device_data")
    return {"name": art.graph_name or art.graph_hash[:12], "hash": art.graph_hash, "nodes": nodes, "edges": edges,
            "roots": roots,
            # added to the contract: where the nodes come from, the steps that ran this graph, and the
            # share of (non-input) nodes mapped to a kernel
            "ir_source": art.ir_source, "steps": list(steps or []),
            "kernel_share": round(with_kernel / computing, 4) if computing else None,
            # (why there are no nodes: lean capture records no graph before optimization)
            "absent": LEAN_GRAPH if art.lean and not nodes else None}


# --- source lines -------------------------------------------------------------------------------
def source_lines(c: CellCapture) -> list[dict]:
    """Every line of the cell with the kernels of the main graph it feeds (the way ``%%cython -a``
    annotates lines); ``flops`` sums those kernels' estimated flops."""
    step = main_step(c)
    by_line: dict[int, list[dict]] = {}
    source = c.source.splitlines()
    if step is not None and step.fusions:
        # A graph compiled by an earlier run of this cell names that run's execution count; and
        # execution counts are not unique (nbval runs every cell as count 1): the text must match too.
        compiled_in = step.artifacts.compiled_in if step.artifacts else None
        for ln, kernels in line_kernels(step):
            number = ln["line"]
            if ln.get("cell") not in (c.execution_count, compiled_in) or not 1 <= number <= len(source):
                continue
            code = ln.get("code")
            if code == source[number - 1].strip() or (code is None and ln.get("cell") == c.execution_count):
                by_line.setdefault(number, []).extend(kernels)
    out = []
    for number, code in enumerate(source, start=1):
        kernels = by_line.get(number, [])
        out.append({"line": number, "code": code, "kernels": [k["name"] for k in kernels],
                    "flops": sum(k["flops"] for k in kernels)})
    return out


MAX_MODEL_FILES, MAX_FILE_LINES = 40, 400  # bounds what an untrusted or huge capture can draw


def model_files(c: CellCapture) -> list[dict]:
    """The lines of model files (local modules, libraries such as transformers) that feed kernels of
    the main graph, per file, each with its kernels: the annotated source of code outside the cell."""
    step = main_step(c)
    if step is None or not step.fusions:
        return []
    out = []
    for file, rows in list(file_line_kernels(step).items())[:MAX_MODEL_FILES]:
        out.append({"file": file, "lines": [
            {"line": ln["line"], "code": ln.get("code") or "", "function": ln.get("function") or "",
             "kernels": [k["name"] for k in kernels], "flops": sum(k["flops"] for k in kernels)}
            for ln, kernels in rows[:MAX_FILE_LINES]]})
    return out


# --- runs ---------------------------------------------------------------------------------------
def run_model(c: CellCapture) -> dict:
    def transfer(t: dict):
        parts = [t.get("to_device_s"), t.get("from_device_s")]
        return None if all(p is None for p in parts) else sum(p or 0.0 for p in parts)

    return {"execution_count": c.execution_count, "started_at": c.started_at,
            "steps": [{"index": s.index, "cache": s.cache, "trace_s": s.timings.get("trace_s"),
                       "compile_s": s.timings.get("compile_s"), "execute_s": s.timings.get("execute_s"),
                       "transfer_s": transfer(s.timings), "execution_wait_s": s.timings.get("execution_wait_s")}
                      for s in c.steps]}


# --- measured time ------------------------------------------------------------------------------
MAX_PROFILE_ROWS = 300  # kernels / lines listed in the Profile tab (the rest are counted)


def profile_model(report: Report) -> dict | None:
    """The Profile tab: kernels by measured time beside their estimates and roofline reading, time
    per cell line, per model line and per aten op, the steps' device and host time, and the
    comparison with the latest earlier profiled run of the cell."""
    c = report.capture
    if not c.profile:
        return None
    from xla_lab.profile import breakdown

    kernels = report.profile_kernels

    def lines(model: bool) -> list[dict]:
        return [{"label": ln.label, "cell": ln.cell, "line": ln.line, "file": ln.file, "code": ln.code,
                 "total_ns": ln.total_ns, "share": ln.share, "kernels": [k for k, _ in ln.kernels[:6]]}
                for ln in report.profile_lines(model=model)[:MAX_PROFILE_ROWS]]

    before = next((r for r in reversed(report.earlier) if r.profile), None)
    steps = breakdown.step_rows(c)
    return {
        "peaks": c.profile.get("peaks"),
        # each kernel's lines as source references (cell lines, then the model's lines in files)
        "kernels": [{"graph_hash": k.graph_hash, "name": k.name, "kind": k.kind, "count": k.count,
                     "total_ns": k.total_ns, "mean_ns": k.mean_ns, "median_ns": k.median_ns, "longest_ns": k.longest_ns,
                     "share": k.share,
                     "flops": k.flops, "bytes": k.bytes, "flops_per_s": k.flops_per_s, "bytes_per_s": k.bytes_per_s,
                     "roof_share": k.roof_share, "bound": k.bound, "roof_text": k.roof_text, "runs": k.runs,
                     "left_out_text": k.left_out_text, "lines": k.lines,
                     "model_lines": file_lines({"model_lines": k.model_lines}), "sources": k.sources}
                    for k in kernels[:MAX_PROFILE_ROWS]],
        "kernels_more": max(0, len(kernels) - MAX_PROFILE_ROWS),
        "lines": lines(False),
        "model_lines": lines(True),
        "ops": [{"op": op, "total_ns": ns, "share": share} for op, ns, share in breakdown.op_times(c, kernels)[:100]],
        "steps": [{**{k: row[k] for k in ("step", "cache", "start_ns", "span_ns", "busy_ns", "kernel_ns",
                                          "idle_before_ns", "host", "execute_s")},
                   "compute_ns": row.get("compute_ns"), "left_out_ns": row.get("left_out_ns")} for row in steps],
        "compare": breakdown.compare(before, c, after_kernels=kernels) if before is not None else None,
        # the steps the session recorded (--profile-steps): the cell's first ones
        "recorded_steps": c.profile.get("recorded_steps", len(c.steps)), "cell_steps": len(c.steps),
    }
