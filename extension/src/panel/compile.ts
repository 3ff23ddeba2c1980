// The Compile tab: where each compile of the run spent its seconds (the panel's `compile` section). Per
// compile, largest first: a headline, the phases as one stacked bar, the HLO passes and pipelines, the
// kernels by emission time (sortable, their lines links), the lines and model lines, the aten ops, the
// kernels without a time of their own, the advice, and the summary as the terminal prints it.
import { kernelColor as hashColor } from "../core/dot";
import {
  compilesBySize, passLabel, phaseSegments, sortCompileKernels, threadNote, topPasses, type CompileKernelSortKey,
} from "../core/compile";
import { fmtNs, fmtShare, lineRef } from "../core/format";
import type { CompileEntry, CompileLine, SourceRef } from "../core/model";
import { breakable, clipped, h, kernelLineLinks, lineLink } from "./dom";
import { bar } from "./profile";

export interface CompileOptions {
  /** JupyterLab: line references link to the notebook's source line */
  onSource?: (ref: SourceRef) => void;
  /** open a kernel of graph `hash` in the Fusion map (rows are links only where `hasKernel` says it is there) */
  onKernel?: (hash: string, name: string) => void;
  hasKernel?: (hash: string, name: string) => boolean;
  color?: (hash: string, kernel: string) => string;
}

/** the compiles shown open (the others folded to their headline), and the kernel rows shown before "show all" */
const OPEN_COMPILES = 2;
const KERNEL_ROWS = 50;

export function renderCompile(compiles: readonly CompileEntry[], opts: CompileOptions = {}): HTMLElement {
  const el = h("div", { class: "xla-compile" });
  if (!compiles.length) {
    el.append(h("p", { class: "xla-muted xla-empty" }, "No compile profile: this run compiled no graph, or was run before xla_lab recorded where compile time goes."));
    return el;
  }
  const sorted = compilesBySize(compiles);
  if (sorted.length > 1) el.append(h("p", { class: "xla-muted" }, `${sorted.length} compiles, largest first.`));
  sorted.forEach((c, i) => el.append(renderEntry(c, i < OPEN_COMPILES, opts)));
  return el;
}

function title(c: CompileEntry): string {
  return `Compile of step ${c.step ?? "?"} (${c.graph_name || c.graph_hash.slice(0, 12)}): ${fmtNs(c.compile_ns)} CompileTime`;
}

function renderEntry(c: CompileEntry, open: boolean, opts: CompileOptions): HTMLElement {
  const body = h("div", { class: "xla-compile-body" },
    headline(c), phaseBar(c), h("p", { class: "xla-muted xla-compile-threads" }, threadNote(c)),
    passesBlock(c), adviceBlock(c, opts), kernelsBlock(c, opts),
    linesBlock("Kernel compile time per cell line", c.lines, opts),
    modelLinesBlock(c, opts), opsBlock(c), untimedBlock(c), textBlock(c));
  return h("details", { class: "xla-compile-entry", "data-graph": c.graph_hash, open },
    h("summary", { class: "xla-compile-title" }, clipped(title(c), 200)), body);
}

function stat(label: string, value: string, tip?: string): HTMLElement {
  return h("div", { class: "xla-stat", title: tip }, h("div", { class: "xla-stat-value" }, value), h("div", { class: "xla-stat-label" }, label));
}

function headline(c: CompileEntry): HTMLElement {
  const n = (x: number | null | undefined) => (x == null ? "-" : x.toLocaleString("en-US"));
  const k = c.counts;
  return h("div", null,
    h("div", { class: "xla-stats" },
      stat("CompileTime", fmtNs(c.compile_ns), "torch_xla's CompileTime of this compile"),
      c.lowering_ns != null ? stat("lowering (before it)", fmtNs(c.lowering_ns), "lowering to HLO in torch_xla, before the XLA compile") : null,
      c.execution_wait_ns != null && c.execution_wait_ns >= 1e6
        ? stat("then waited for its execution", fmtNs(c.execution_wait_ns), "after the compile, the sync waited for the step's own execution: torch_xla freed the step's donated inputs on the syncing thread, which source lines make likely (README, Benchmarks)") : null,
      stat("HLO before", n(k.hlo_before), "HLO instructions before optimization"),
      stat("HLO after", n(k.hlo_after), "HLO instructions after optimization (fused computations included)"),
      stat("kernels", n(k.kernels)), stat("functions compiled", n(k.functions)),
      stat("explained", fmtShare(c.explained), "share of CompileTime inside traced compiler steps")),
    h("div", { class: "xla-muted" }, `graph ${c.graph_hash.slice(0, 12)}`, c.module ? h("span", null, " \u00b7 module ", h("code", null, clipped(c.module, 120))) : ""));
}

function phaseBar(c: CompileEntry): HTMLElement {
  const segs = phaseSegments(c);
  const barEl = h("div", { class: "xla-phase-bar", role: "img", "aria-label": "compile time by phase" },
    segs.map((sg) => h("div", { class: `xla-phase-seg xla-phase-${sg.tone}`, "data-phase": sg.name, style: `width:${sg.width.toFixed(2)}%`, title: sg.label },
      sg.width >= 12 ? h("span", { class: "xla-phase-seg-label" }, `${sg.name} ${(sg.share * 100).toFixed(0)}%`) : "")));
  const legend = h("div", { class: "xla-mem-legend xla-phase-legend" },
    segs.map((sg) => h("span", { "data-phase": sg.name }, h("span", { class: `xla-swatch xla-phase-${sg.tone}` }), sg.label)));
  return h("div", { class: "xla-compile-phases" }, barEl, legend);
}

function passesBlock(c: CompileEntry): HTMLElement | null {
  const passes = topPasses(c);
  const pipelines = [...c.pipelines].sort((a, b) => b.ns - a.ns).slice(0, 8);
  if (!passes.length && !pipelines.length) return null;
  const share = (ns: number) => (c.compile_ns ? fmtShare(ns / c.compile_ns) : "-");
  return h("div", { class: "xla-compile-passes" },
    passes.length ? h("div", null, h("h4", null, "HLO passes by own time"), h("table", { class: "xla-table xla-compile-pass-table" },
      h("thead", null, h("tr", null, ["pass", "time", "runs", "of CompileTime"].map((t) => h("th", null, t)))),
      h("tbody", null, passes.map((p) => h("tr", { "data-pass": p.name }, h("td", null, h("code", null, passLabel(p.name))),
        h("td", { class: "xla-num" }, fmtNs(p.ns)), h("td", { class: "xla-num" }, String(p.count)), h("td", { class: "xla-num" }, share(p.ns))))))) : null,
    pipelines.length ? h("div", null, h("h4", null, "Pass pipelines"), h("table", { class: "xla-table xla-compile-pipeline-table" },
      h("thead", null, h("tr", null, ["pipeline", "time", "of CompileTime"].map((t) => h("th", null, t)))),
      h("tbody", null, pipelines.map((p) => h("tr", null, h("td", null, p.name), h("td", { class: "xla-num" }, fmtNs(p.ns)),
        h("td", { class: "xla-num" }, share(p.ns))))))) : null);
}

const KERNEL_COLS: [CompileKernelSortKey | null, string][] = [["name", "kernel"], ["kind", "kind"], ["ns", "compile time"], [null, "share"], ["op_count", "ops"], [null, "lines"]];

function kernelsBlock(c: CompileEntry, opts: CompileOptions): HTMLElement {
  const out = h("div", { class: "xla-compile-kernels" });
  const total = c.counts.kernels;
  out.append(h("h4", null, `Kernels by compile time (${c.kernels.length} timed${total != null ? ` of ${total}` : ""})`));
  if (!c.kernels.length) {
    out.append(h("p", { class: "xla-muted xla-empty" }, "No kernel has an emission time of its own."));
    return out;
  }
  let key: CompileKernelSortKey = "ns", desc = true, all = false;
  const color = opts.color ?? ((_: string, k: string) => hashColor(k));
  const table = h("table", { class: "xla-table xla-kernels xla-compile-kernel-table" });
  const more = h("p", { class: "xla-muted" });
  const draw = () => {
    const head = h("tr", null, KERNEL_COLS.map(([k, label]) => {
      const th = h("th", k ? { class: "xla-sortable", "data-sort": k, "aria-sort": k === key ? (desc ? "descending" : "ascending") : "none" } : null,
        label + (k === key ? (desc ? " \u25be" : " \u25b4") : ""));
      if (k) th.addEventListener("click", () => { if (key === k) desc = !desc; else { key = k; desc = k === "ns" || k === "op_count"; } draw(); });
      return th;
    }));
    const rows = sortCompileKernels(c.kernels, key, desc);
    const shown = all ? rows : rows.slice(0, KERNEL_ROWS);
    const body = h("tbody", null, shown.map((k) => {
      const linked = !!opts.onKernel && (opts.hasKernel?.(c.graph_hash, k.name) ?? false);
      const tr = h("tr", { class: linked ? "xla-kernel-row" : "xla-compile-kernel-row", "data-kernel": k.name, title: linked ? "open in the Fusion map" : null },
        h("td", { title: k.aten_ops.length ? `aten ops: ${k.aten_ops.join(", ")}` : null },
          h("span", { class: "xla-swatch", style: `background:${color(c.graph_hash, k.name)}` }), h("code", null, breakable(k.name))),
        h("td", null, k.kind), h("td", { class: "xla-num" }, fmtNs(k.ns)),
        h("td", { class: "xla-nowrap" }, bar(k.share), " ", fmtShare(k.share)),
        h("td", { class: "xla-num" }, k.op_count == null ? "-" : String(k.op_count)),
        h("td", null, k.lines.length || k.model_lines.length ? kernelLineLinks({ lines: k.lines, model_lines: k.model_lines, sources: [] }, opts.onSource) : "-"));
      if (linked) tr.addEventListener("click", () => opts.onKernel!(c.graph_hash, k.name));
      return tr;
    }));
    table.replaceChildren(h("thead", null, head), body);
    more.replaceChildren();
    if (rows.length > shown.length) {
      const b = h("button", { type: "button", class: "xla-link xla-show-all" }, `show all ${rows.length} kernels`);
      b.addEventListener("click", () => { all = true; draw(); });
      more.append(`${rows.length - shown.length} more kernels, each shorter than the last one listed: `, b);
    }
  };
  draw();
  out.append(h("p", { class: "xla-muted" }, "A kernel's time is its emission (its HLO to LLVM IR) on a codegen thread; machine code is generated for all kernels together (LLVM codegen) and not split per kernel. Click a column to sort."),
    h("div", { class: "xla-scroll" }, table), more);
  return out;
}

function linesBlock(heading: string, lines: readonly CompileLine[], opts: CompileOptions): HTMLElement | null {
  if (!lines.length) return null;
  const top = lines[0].share || 1;
  return h("div", { class: "xla-compile-lines" }, h("h4", null, heading), h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-profile-lines" },
    h("thead", null, h("tr", null, ["line", "compile time", "share", "kernels", "code", "longest kernels"].map((t) => h("th", null, t)))),
    h("tbody", null, lines.map((ln) => h("tr", { class: "xla-compile-line", "data-line": ln.ref ? lineRef(ln.ref) : ln.label,
      style: `background:rgba(214,69,65,${(0.35 * Math.max(0, Math.min(1, ln.share / top))).toFixed(3)})` },
      h("td", null, ln.ref ? lineLink(ln.ref, opts.onSource) : ln.label || "-"), h("td", { class: "xla-num" }, fmtNs(ln.ns)),
      h("td", { class: "xla-nowrap" }, bar(ln.share), " ", fmtShare(ln.share)), h("td", { class: "xla-num" }, String(ln.kernels)),
      h("td", null, h("code", null, clipped((ln.ref?.code ?? "").trim(), 200))),
      h("td", null, topKernels(ln))))))));
}

/** a line's longest kernels (three), and how many more it fed */
function topKernels(ln: CompileLine): string {
  const shown = ln.top_kernels.slice(0, 3), rest = ln.kernels - shown.length;
  return shown.join(", ") + (rest > 0 ? ` +${rest}` : "");
}

/** The model's own lines: a table of their own when some are in files; otherwise they are the cell's lines above. */
function modelLinesBlock(c: CompileEntry, opts: CompileOptions): HTMLElement | null {
  if (!c.model_lines.length) return null;
  if (!c.model_lines.some((ln) => ln.ref?.file)) {
    return h("p", { class: "xla-muted" }, "The model's own lines (the innermost frames outside torch) are the cell's lines above.");
  }
  return linesBlock("Kernel compile time per model line (innermost outside torch)", c.model_lines, opts);
}

function opsBlock(c: CompileEntry): HTMLElement | null {
  if (!c.ops.length) return null;
  return h("div", null, h("h4", null, "Kernel compile time per aten op"), h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-profile-ops" },
    h("thead", null, h("tr", null, h("th", null, "aten op"), h("th", null, "compile time"), h("th", null, "share"))),
    h("tbody", null, c.ops.slice(0, 15).map((o) => h("tr", null, h("td", null, h("code", null, o.op)), h("td", { class: "xla-num" }, fmtNs(o.ns)),
      h("td", { class: "xla-nowrap" }, bar(o.share), " ", fmtShare(o.share))))))));
}

function untimedBlock(c: CompileEntry): HTMLElement | null {
  const n = c.untimed.reduce((a, u) => a + u.kernels.length, 0);
  if (!n) return null;
  return h("div", { class: "xla-compile-untimed" }, h("h4", null, `Kernels without a compile time of their own (${n})`),
    h("ul", null, c.untimed.map((u) => h("li", { "data-reason": u.reason },
      h("details", null, h("summary", null, h("b", null, `${u.kernels.length} kernel${u.kernels.length === 1 ? "" : "s"}: `), clipped(u.reason, 400)),
        h("code", null, clipped(u.kernels.join(", "), 2000)))))));
}

function adviceBlock(c: CompileEntry, opts: CompileOptions): HTMLElement | null {
  if (!c.advice.length) return null;
  return h("div", { class: "xla-compile-advice" }, h("h4", null, "Advice"),
    h("ul", null, c.advice.map((a) => h("li", { class: "xla-advice", "data-kind": a.kind }, clipped(a.text, 1500),
      a.line && opts.onSource ? h("span", null, " \u2192 ", lineLink(a.line, opts.onSource)) : ""))));
}

function textBlock(c: CompileEntry): HTMLElement | null {
  if (!c.text.length) return null;
  return h("details", { class: "xla-compile-text" }, h("summary", null, "As text (what the terminal prints)"),
    h("pre", null, c.text.join("\n")));
}
