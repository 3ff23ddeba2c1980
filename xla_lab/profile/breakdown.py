"""Measured time, broken down: per kernel (with its estimated flops and bytes and a roofline
reading), per aten op, per source line (cell lines and the model's own lines in files), per step.
Pure functions of a profiled capture; every view renders these.

A kernel's time is its *compute* time (``join.py``: each instant of its runs shared with its execution's
runs going on beside it, without a one-time warm-up or runs beside a compile, which are shown apart),
split evenly over its lines (and over its aten ops): XLA runs a fused kernel as one piece of code, so no
finer split is measured. The shares of a kernel's lines add up to the kernel's time, and all lines to
all kernels. A kernel's roofline reading is its achieved rate as a share of the roof it sits under at
its arithmetic intensity ("0.01% of the compute roof"): the roof names where the ceiling is, the share
whether the kernel is anywhere near it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xla_lab.capture.source_ref import ref_text, shown_ref

OVERHEAD_NS = 5_000  # a kernel whose mean time is below this is mostly launch cost: "overhead-bound"
NO_LINE = "(no source line)"


@dataclass
class KernelTime:
    graph_hash: str
    name: str
    kind: str
    count: int
    total_ns: float  # compute time of its counted runs (each instant shared with the kernels beside it)
    longest_ns: float
    share: float  # of the cell's measured kernel time
    flops: int  # of one run (a kernel in a while loop's body runs trip-count times per execution)
    bytes: int
    lines: list[dict] = field(default_factory=list)  # cell lines (Kernel.lines)
    model_lines: list[dict] = field(default_factory=list)  # the model's own lines (Kernel.model_lines)
    aten_ops: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    known: bool = True  # the kernel is in the graph's analysis (flops, bytes and lines are known)
    runs: int = 0  # every recorded run, those left out of its time included
    shared_ns: float = 0.0  # of its counted runs' intervals, the time other kernels ran beside them
    left_out: dict[str, tuple[int, float]] = field(default_factory=dict)  # reason -> (runs, ns): not its time
    median_ns: float | None = None  # its counted runs' median duration (None: a profile saved before it)
    # roofline (None without peaks or analysis): achieved rates per run, the roof at the kernel's
    # arithmetic intensity, and what bounds it ("compute", "memory", "overhead")
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    roof_share: float | None = None  # achieved / attainable at this intensity
    bound: str | None = None
    roof: str | None = None  # the roof at its intensity: "compute" or "memory" (None without peaks)

    @property
    def mean_ns(self) -> float:
        """How long a counted run took on average (its whole interval, kernels beside it or not).
        ``total_ns`` is the runs' compute time, each instant shared with the kernels of the same
        execution running beside it: what the kernel's share of the steps' time is made of."""
        return (self.total_ns + self.shared_ns) / self.count if self.count else 0.0

    @property
    def run_ns(self) -> float:
        """A typical run's duration: the median of the counted runs (one slow run, a cold start after
        Python's work, moves a few runs' mean by 5x), the mean where the median was not recorded. The
        roofline's rates are made of it."""
        return self.median_ns if self.median_ns is not None else self.mean_ns

    @property
    def roof_text(self) -> str:
        """``0.01% of the compute roof``, ``35% of the memory roof``, ``launch overhead`` (a few µs a run):
        the achieved rate against the roof the kernel sits under, never a verdict on its own."""
        roof = self.roof or self.bound
        share = f"{fmt_share(self.roof_share)} of the {roof} roof" if self.roof_share is not None and roof else ""
        if self.bound == "overhead":
            return "launch overhead" + (f", {share}" if share else "")
        return share or (f"{self.bound}-bound" if self.bound else "")

    @property
    def left_out_text(self) -> str:
        """What the kernel's time leaves out, e.g. ``first run 30.1 ms: a one-time warm-up, left out``."""
        parts = []
        for reason, (runs, ns) in self.left_out.items():
            if reason == "warm-up":
                tail = f" and {runs - 1} slow run{'s' if runs > 2 else ''} after it" if runs > 1 else ""
                parts.append(f"first run{tail} {fmt_ns(ns)}: a one-time warm-up, left out")
            else:
                parts.append(f"{runs} run{'s' if runs != 1 else ''} {reason} ({fmt_ns(ns)}), left out")
        return "; ".join(parts)


@dataclass
class LineTime:
    key: tuple  # (cell, line) for a cell line, (file, line) for a line in a file; () for no line
    label: str  # "[5]:3" / "modeling_bert.py:413" / NO_LINE
    code: str | None
    total_ns: float
    share: float
    kernels: list[tuple[str, float]]  # (kernel name, the ns it gave this line), largest first
    file: str | None = None
    cell: int | None = None
    line: int | None = None

    @property
    def ref(self) -> dict | None:
        """The line as a source reference (``capture/source_ref.py``); None for NO_LINE."""
        if self.line is None:
            return None
        if self.file is None:
            return {"cell": self.cell, "line": self.line, "code": self.code}
        return {"file": self.file, "line": self.line, "code": self.code}


def kernel_times(capture, prompts=None) -> list[KernelTime]:
    """Every kernel that ran in the profiled cell, longest total first, its lines as the run shown
    names them (``prompts``: ``capture/source_ref.py`` ``shown_ref``)."""
    profile = capture.profile or {}
    artifacts = capture.artifacts()
    peaks = profile.get("peaks") or None
    rows: list[KernelTime] = []
    for graph_hash, graph in (profile.get("graphs") or {}).items():
        art = artifacts.get(graph_hash)
        analysed = {k["name"]: k for k in (art.fusions or [])} if art is not None else {}
        compute = graph.get("compute") or {}
        for name, (count, total, longest) in graph.get("kernels", {}).items():
            k = analysed.get(name)
            measured = compute.get(name)  # (None: a profile saved before compute time was measured)
            recorded = int(count)
            if measured is not None:
                count, total = measured["runs"], measured["compute_ns"]
            compiled_in = art.compiled_in if art is not None else None

            def now(lines: list[dict], compiled_in=compiled_in) -> list[dict]:  # as this run names them
                return [shown_ref(ln, capture.execution_count, capture.source, compiled_in, prompts) for ln in lines]

            runs = (k.get("runs") or 1) if k else 1  # a loop body's kernel: per run, as its measured events are
            row = KernelTime(graph_hash, name, k["kind"] if k else "?", int(count), float(total), float(longest), 0.0,
                             int(k["flops"]) // runs if k else 0, int(k["bytes"]) // runs if k else 0,
                             now(k["lines"]) if k else [], now(k.get("model_lines") or []) if k else [],
                             list(k["aten_ops"]) if k else [], list(k["sources"]) if k else [], known=k is not None,
                             runs=recorded, shared_ns=float(measured["shared_ns"]) if measured else 0.0,
                             median_ns=float(measured["median_ns"]) if measured and "median_ns" in measured else None,
                             left_out={r: (int(v[0]), float(v[1])) for r, v in (measured or {}).get("left_out", {}).items()})
            _roofline(row, peaks)
            rows.append(row)
    whole = sum(r.total_ns for r in rows)
    for r in rows:
        r.share = r.total_ns / whole if whole else 0.0
    rows.sort(key=lambda r: (-r.total_ns, r.name))
    return rows


def _roofline(row: KernelTime, peaks: dict | None) -> None:
    if row.run_ns <= 0 or not row.known:
        return
    seconds = row.run_ns / 1e9
    row.flops_per_s = row.flops / seconds
    row.bytes_per_s = row.bytes / seconds
    if row.run_ns < OVERHEAD_NS:
        row.bound = "overhead"
    if not peaks or peaks["flops_per_s"] <= 0 or peaks["bytes_per_s"] <= 0:
        return
    peak_flops, peak_bytes = peaks["flops_per_s"], peaks["bytes_per_s"]
    intensity = row.flops / row.bytes if row.bytes else float("inf")
    attainable = min(peak_flops, intensity * peak_bytes)
    row.roof = "compute" if intensity * peak_bytes >= peak_flops else "memory"
    if row.bound is None:
        row.bound = row.roof
    if row.flops and attainable:
        row.roof_share = row.flops_per_s / attainable
    elif row.bytes:  # a kernel that only moves data: measured against the memory roof
        row.roof, row.roof_share = "memory", row.bytes_per_s / peak_bytes


def _line_key(ln: dict) -> tuple:
    return ("cell", ln.get("cell"), ln["line"]) if ln.get("cell") is not None or not ln.get("file") \
        else ("file", ln["file"], ln["line"])


def line_times(capture, model: bool = False, kernels: list[KernelTime] | None = None) -> list[LineTime]:
    """Measured time per source line, longest first. ``model=False``: the cell lines each kernel
    came from; ``model=True``: the model's own lines (innermost outside torch: a cell line for a
    model written in the notebook, a line of the user's module or of a library otherwise)."""
    kernels = kernel_times(capture) if kernels is None else kernels
    table: dict[tuple, LineTime] = {}
    for k in kernels:
        lines = (k.model_lines or k.lines) if model else k.lines
        unique = list({_line_key(ln): ln for ln in lines}.values())
        if not unique:
            unique = [None]
        part = k.total_ns / len(unique)
        for ln in unique:
            if ln is None:
                key, label, code, extra = (), NO_LINE, None, {}
            else:
                key, label, code = _line_key(ln), ref_text(ln), ln.get("code")
                extra = {"file": ln.get("file"), "cell": ln.get("cell"), "line": ln["line"]}
            row = table.setdefault(key, LineTime(key, label, code, 0.0, 0.0, [], **extra))
            row.total_ns += part
            row.kernels.append((k.name, part))
    whole = sum(r.total_ns for r in table.values())
    for r in table.values():
        r.share = r.total_ns / whole if whole else 0.0
        merged: dict[str, float] = {}
        for name, ns in r.kernels:
            merged[name] = merged.get(name, 0.0) + ns
        r.kernels = sorted(merged.items(), key=lambda kv: -kv[1])
    return sorted(table.values(), key=lambda r: (-r.total_ns, r.label))


def op_times(capture, kernels: list[KernelTime] | None = None) -> list[tuple[str, float, float]]:
    """(aten op, ns, share) longest first; a kernel's time split evenly over its distinct ops."""
    kernels = kernel_times(capture) if kernels is None else kernels
    table: dict[str, float] = {}
    for k in kernels:
        ops = list(dict.fromkeys(k.aten_ops)) or ["(no aten op)"]
        for op in ops:
            table[op] = table.get(op, 0.0) + k.total_ns / len(ops)
    whole = sum(table.values())
    return sorted(((op, ns, ns / whole if whole else 0.0) for op, ns in table.items()), key=lambda t: -t[1])


def step_rows(capture) -> list[dict]:
    """The profile's steps, each with the step's cache state and graph name added."""
    by_index = {s.index: s for s in capture.steps}
    out = []
    for row in (capture.profile or {}).get("steps", []):
        step = by_index.get(row["step"])
        out.append({**row, "cache": step.cache if step else "?", "graph_name": step.graph_name if step else None,
                    "execute_s": (step.timings.get("execute_s") if step else None)})
    return out


def compare(before, after, top: int = 30, after_kernels: list[KernelTime] | None = None) -> dict:
    """Kernels of two profiled runs side by side (by graph and name; a recompiled graph's kernels
    pair by name): mean time before and after, largest changes of total time first.
    ``after_kernels``: ``kernel_times(after)`` when the caller has it."""
    old = {k.name: k for k in kernel_times(before)}
    new = {k.name: k for k in (kernel_times(after) if after_kernels is None else after_kernels)}
    rows = []
    for name in dict.fromkeys(list(new) + list(old)):
        a, b = old.get(name), new.get(name)
        rows.append({"name": name, "before_mean_ns": a.mean_ns if a else None, "after_mean_ns": b.mean_ns if b else None,
                     "before_total_ns": a.total_ns if a else 0.0, "after_total_ns": b.total_ns if b else 0.0})
    rows.sort(key=lambda r: -abs(r["after_total_ns"] - r["before_total_ns"]))

    def busy(c) -> float:
        return sum(s["busy_ns"] for s in c.profile.get("steps", []))

    def per_step(c) -> float:
        n = len(c.profile.get("steps", []))
        return busy(c) / n if n else 0.0

    return {"with": before.execution_count, "before_step_ns": per_step(before), "after_step_ns": per_step(after),
            "rows": rows[:top]}


def fmt_share(x: float) -> str:
    """A share with the digits a small one needs: 35%, 3.5%, 0.012%."""
    if x >= 0.1:
        return f"{x:.0%}"
    if x >= 0.01:
        return f"{x:.1%}"
    return f"{x * 100:.2g}%"


def fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"
