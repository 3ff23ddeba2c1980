"""A compile profile joined to the fusion map: compile time per kernel, per aten op and per source line
(cell lines and the model's own lines). Pure functions of a graph's artifacts; every view renders these.

What is measured per kernel is its emission (``FusionCompiler::Compile`` on a codegen thread: the
kernel's HLO to LLVM IR). Machine-code generation afterwards (``Codegen``) compiles the kernels in
parts that XLA does not name per kernel, so it is reported for the compile as a whole, never split.
A kernel's time is split evenly over its lines and ops, as measured run time is (``breakdown.py``):
the lines' times add up to the kernels' times they came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from xla_lab.capture.source_ref import shown_ref

from .breakdown import KernelTime, LineTime, line_times, op_times

# Kernels with no emission event of their own (XLA's CPU ThunkEmitter), by kind: why. Only loop
# fusions go through the fusion emitter that times each kernel; the rest are library calls, or are
# emitted on the compiling thread inside kernel emission and compiled to machine code in LLVM codegen.
LIBRARY_CALL = "a call into a library (Eigen, XNNPACK or oneDNN): no code is generated for it"
ELEMENTAL = ("its own LLVM module, emitted on the compiling thread inside kernel emission and compiled in LLVM "
             "codegen: not timed per kernel")
UNTIMED = {"dot": LIBRARY_CALL, "convolution": LIBRARY_CALL, "custom-call": LIBRARY_CALL, "fft": LIBRARY_CALL,
           "copy": "a copy the runtime does with memcpy: no code is generated for it",
           "sort": "a library sort: only its comparator is compiled, on the compiling thread",
           "while": "control flow: runs the kernels of its body, each compiled as a kernel of its own",
           "conditional": "control flow: runs the kernels of its branches, each compiled as a kernel of its own",
           "call": "a call: runs the kernels it contains, each compiled as a kernel of its own"}
FUSION = ("a fusion with no emission event: identical to another fusion (XLA compiles one and shares the code), "
          "or one the legacy emitter writes on the compiling thread (reductions, dot-rooted fusions)")
COLLECTIVE = "a collective: the runtime's own code, nothing is generated for it"
NO_KERNEL_EVENTS = ("this XLA records no compile event per kernel: it emits the kernels into one LLVM module and "
                    "compiles that in parts (LLVM codegen), not named per kernel")


def untimed_reason(kind: str) -> str:
    if kind in UNTIMED:
        return UNTIMED[kind]
    if kind.startswith("k"):  # a fusion kind: kLoop, kInput, kOutput
        return FUSION
    if kind.startswith(("all-", "reduce-scatter", "collective")):
        return COLLECTIVE
    return ELEMENTAL


@dataclass
class CompileView:
    """One graph's compile, as the views show it."""

    graph_hash: str
    graph_name: str | None
    step: int | None
    profile: dict
    kernels: list[KernelTime]  # kernels with a measured compile time, longest first (total_ns = compile ns)
    untimed: dict[str, list[str]]  # reason -> kernel names without a compile time of their own
    lines: list[LineTime]  # cell lines
    model_lines: list[LineTime]  # the model's own lines (files, or the cell for a model written there)
    ops: list[tuple[str, float, float]]  # (aten op, ns, share)

    @property
    def compile_ns(self) -> float:
        return self.profile["compile_ns"]


def compile_view(art, execution_count: int | None, source: str, prompts=None) -> CompileView | None:
    """``art``: a GraphArtifacts with a compile profile; lines named as the run shown names them. None
    without a profile (a saved one is validated when it loads: ``capture/format.py``)."""
    profile = art.compile_profile
    if not profile:
        return None
    analysed = {k["name"]: k for k in (art.fusions or [])}

    def now(lines: list[dict]) -> list[dict]:
        return [shown_ref(ln, execution_count, source, art.compiled_in, prompts) for ln in lines]

    rows = []
    total_ns = sum(k["ns"] for k in profile.get("kernels") or []) or 0.0
    for k in profile.get("kernels") or []:
        a = analysed.get(k["name"])
        rows.append(KernelTime(art.graph_hash, k["name"], a["kind"] if a else "?", 1, float(k["ns"]), float(k["ns"]),
                               k["ns"] / total_ns if total_ns else 0.0, int(a["flops"]) if a else 0,
                               int(a["bytes"]) if a else 0, now(a["lines"]) if a else [],
                               now(a.get("model_lines") or []) if a else [], list(a["aten_ops"]) if a else [],
                               list(a["sources"]) if a else [], known=a is not None))
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    timed = {r.name for r in rows}
    untimed: dict[str, list[str]] = {}
    for name, a in analysed.items():
        if name not in timed:
            why = untimed_reason(a["kind"]) if profile.get("kernel_events", True) else NO_KERNEL_EVENTS
            untimed.setdefault(why, []).append(name)
    return CompileView(art.graph_hash, art.graph_name, profile.get("step"), profile, rows, untimed,
                       line_times(None, model=False, kernels=rows), line_times(None, model=True, kernels=rows),
                       op_times(None, kernels=rows))


def compile_views(capture, prompts=None) -> list[CompileView]:
    """The compiles of this run (graphs it compiled, with a profile), in step order."""
    out, seen = [], set()
    for step in capture.steps:
        art = step.artifacts
        if step.cache != "miss" or art is None or not art.compile_profile or step.graph_hash in seen:
            continue
        seen.add(step.graph_hash)
        view = compile_view(art, capture.execution_count, capture.source, prompts)
        if view is not None:
            view.step = step.index
            out.append(view)
    return out
