"""What would cut a cell's compile time, each piece of advice with the evidence it rests on (measured
numbers of this cell's compiles), never a guess. Pure: a capture (with its compile profiles) and the
layer stacks found in the notebook (``precompile/scan_whatif.py``) in, JSON-ready advice out
(``CellCapture.advice``).

- A stack of identical layers compiled unrolled: every layer's kernels are emitted and compiled
  again. ``scan_layers`` compiles one layer and loops over it, but is not always faster (its While
  loop and the layer's backward have costs of their own), so the advice is to measure it first
  (``%xla whatif scan``), which compiles the scanned stack beside the unrolled one.
- Recompiles for new input shapes: each new shape is a whole compile.
- Many graphs cut by value reads: each read cuts the step into another graph to compile.
- One line that holds most of the kernel compile time with many kernels: a Python loop unrolled
  into the graph.
- A long compile under full capture: XLA's dump (LLVM IR, MLIR and an object file per kernel, which
  full capture cannot narrow) is written during the compile; lean capture does not write it.
"""

from __future__ import annotations

from xla_lab.capture.source_ref import cell_ref

from .compile_breakdown import compile_views

LAYER_SHARE = 0.25  # a stack's lines hold at least this share of a compile's kernel compile time
HEAVY_LINE_SHARE = 0.4
HEAVY_LINE_KERNELS = 10
LONG_COMPILE_S = 20.0  # a full-capture compile this long is told what the dump cost and that lean capture exists
# Full capture's compile time over plain torch_xla's, as benchmarks/bench_capture_overhead.py measured it
# here (README: "Capture modes"); lean capture's 0.95-1.12 in noisy runs (README: "Benchmarks")
DUMP_SLOWDOWN = "1.1-1.4x"


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def advise(capture, stacks: list[dict] = ()) -> list[dict]:
    """``stacks``: [{"expr", "count", "cls", "file", "first", "last"}] (``scan_whatif.layer_stacks``)."""
    out: list[dict] = []
    views = compile_views(capture)
    for v in views:
        for st in stacks:
            advice = _scan_advice(capture, v, st)
            if advice is not None:
                out.append(advice)
        top = v.lines[0] if v.lines else None
        if top is not None and top.share >= HEAVY_LINE_SHARE and len(top.kernels) >= HEAVY_LINE_KERNELS \
                and top.file is None and top.cell == capture.execution_count and top.line \
                and _in_unrolled_loop(capture.source, top.line):
            out.append({
                "kind": "heavy_line", "graph_hash": v.graph_hash, "line": top.ref, "compiled_in": capture.execution_count,
                "evidence": {"share": top.share, "kernels": len(top.kernels), "ns": top.total_ns},
                "text": (f"one line holds {top.share:.0%} of this compile's kernel compile time in {len(top.kernels)} "
                         "kernels: a Python loop there is unrolled into the graph, each pass compiled again; "
                         "torch_xla.experimental.fori_loop or scan compiles the body once"),
            })
    out.extend(_shape_recompiles(capture))
    out.extend(_small_graphs(capture))
    out.extend(_dump_cost(capture))
    return out


def _dump_cost(capture) -> list[dict]:
    """Full capture's long compiles: what XLA's dump wrote during each, and that lean capture exists."""
    out = []
    for step in capture.steps:
        art = step.artifacts
        seconds = step.timings.get("compile_s") or 0.0
        if step.cache != "miss" or art is None or art.lean or not art.dump_files or seconds < LONG_COMPILE_S:
            continue
        out.append({
            "kind": "dump_cost", "graph_hash": art.graph_hash, "line": None, "compiled_in": capture.execution_count,
            "evidence": {"compile_s": seconds, "dump_files": art.dump_files, "dump_bytes": art.dump_bytes},
            "text": (f"full capture: XLA's dump wrote {art.dump_files:,} files ({art.dump_bytes / 2**20:.0f} MiB of LLVM IR, "
                     f"MLIR and object code) during this {_s(seconds)} compile; with it, compiles took {DUMP_SLOWDOWN} "
                     "as long as plain torch_xla's in xla_lab's benchmark. Lean capture writes no dump and keeps the "
                     "kernels, lines, memory, optimized HLO and this compile profile (not the graph before "
                     "optimization): `%xla mode lean` first thing in a fresh kernel, or XLA_LAB_CAPTURE=lean"),
        })
    return out


def _scan_advice(capture, v, st: dict) -> dict | None:
    """A stack of identical layers that this compile unrolled: the graph takes each layer's largest
    weight as an input of its own (so at least ``count`` inputs of that shape), and the layer's code
    holds a share of the kernel compile time (for a layer class of torch's own, whose kernels name the
    line that called the model, or an XLA that times no kernel, the share is not known)."""
    art = next((s.artifacts for s in capture.steps if s.graph_hash == v.graph_hash and s.artifacts), None)
    params = ((art.signature or {}).get("params") or []) if art is not None else []
    dims = tuple(st.get("largest_param") or ())
    if sum(1 for p in params if _dims(p.get("shape")) == dims) < st["count"]:
        return None
    whole = sum(k.total_ns for k in v.kernels)
    measured = bool(st.get("spans")) and v.profile.get("kernel_events", True)  # a share can be read
    share = sum(ln.total_ns for ln in v.model_lines if _in_stack(ln, st)) / whole if whole else 0.0
    if measured and share < LAYER_SHARE:
        return None
    holds = (f"their code holds {share:.0%} of this compile's kernel compile time ({_s(v.compile_ns / 1e9)} in all)"
             if measured else f"this compile took {_s(v.compile_ns / 1e9)}")
    return {
        "kind": "scan_layers", "graph_hash": v.graph_hash, "line": None, "compiled_in": capture.execution_count,
        "evidence": {"expr": st["expr"], "layers": st["count"], "share": share if measured else None,
                     "compile_s": v.compile_ns / 1e9},
        "text": (f"{st['expr']} is {st['count']} identical {st['cls']} layers compiled unrolled: {holds}. "
                 "torch_xla.experimental.scan_layers would compile one layer and loop over it, but is not always "
                 f"faster: measure it first with %xla whatif scan {st['expr']} (on the inputs this step gave its "
                 "first layer)"),
    }


def _dims(shape: str | None) -> tuple:
    from xla_lab.hlo.shapes import parse_shape

    try:
        return tuple(parse_shape(shape).dims) if shape else ()
    except Exception:  # a shape this parser does not read (a tuple): not a weight
        return ()


def _in_stack(ln, stack: dict) -> bool:
    """A model line inside the source of one of the layer's classes: the same cell, or a file whose
    path (as imported, e.g. ``transformers/models/bert/modeling_bert.py``) ends the class's file path."""
    return any(_in_span(ln, span) for span in stack.get("spans") or ())


def _in_span(ln, span: dict) -> bool:
    if ln.line is None or not span["first"] <= ln.line <= span["last"]:
        return False
    if span.get("cell") is not None:
        return ln.file is None and ln.cell == span["cell"]
    return bool(ln.file and span.get("file") and span["file"].endswith(ln.file))


SYNCS = ("sync(", "mark_step(", ".item(", "torch_xla.compile")


def _in_unrolled_loop(source: str, line: int) -> bool:
    """The cell's line is in a for/while loop whose body never syncs: the loop runs while the graph is
    traced, and each pass adds its ops to the same graph (a training loop that syncs each step does not)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While)) and node.lineno < line <= (node.end_lineno or node.lineno):
            body = "\n".join(lines[node.lineno - 1:node.end_lineno])
            if not any(s in body for s in SYNCS):
                return True
    return False


def _shape_recompiles(capture) -> list[dict]:
    by_line: dict[tuple, list] = {}
    for s in capture.steps:
        if s.cache == "miss" and s.recompile_reason and "changed shape" in s.recompile_reason:
            by_line.setdefault((s.sync_line, s.sync_code), []).append(s)
    out = []
    for (line, code), steps in by_line.items():
        seconds = sum(s.timings.get("compile_s") or 0.0 for s in steps)
        out.append({
            "kind": "shapes", "graph_hash": None, "line": cell_ref(capture.execution_count, line, code),
            "compiled_in": capture.execution_count,
            "evidence": {"compiles": len(steps), "compile_s": seconds, "steps": [s.index for s in steps]},
            "text": (f"{len(steps)} compile(s) of this cell ({_s(seconds)}) were for inputs of a new shape: every "
                     "shape is a compile of its own; pad or bucket the varying dimension to a few sizes (e.g. round "
                     "sequence lengths up to a multiple of 64) so each size compiles once"),
        })
    return out


def _small_graphs(capture) -> list[dict]:
    misses = [s for s in capture.steps if s.cache == "miss"]
    cut = [s for s in misses if s.sync_cause.startswith("implicit")]
    if len(misses) < 3 or len(cut) < 2:
        return []
    seconds = sum(s.timings.get("compile_s") or 0.0 for s in misses)
    first = cut[0]
    return [{
        "kind": "small_graphs", "graph_hash": None, "line": cell_ref(capture.execution_count, first.sync_line, first.sync_code),
        "compiled_in": capture.execution_count,
        "evidence": {"compiles": len(misses), "cut_by_reads": len(cut), "compile_s": seconds},
        "text": (f"{len(misses)} graphs compiled in this cell ({_s(seconds)}), {len(cut)} of them cut by value reads: "
                 "each read ends the graph there and the rest compiles as another; read values after "
                 "torch_xla.sync(), or wrap the step in torch_xla.compile"),
    }]
