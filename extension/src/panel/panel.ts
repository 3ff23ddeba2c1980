// The per-cell panel: tabs over one panel model, plus live progress while the cell compiles.
import { fmtSeconds, lineRef } from "../core/format";
import { kernelColor, kernelPalette } from "../core/dot";
import { kernelsOf, mainGraphHash, parsePanelModel, type Graph, parseProgress, type PanelModel, type Progress, type SourceRef } from "../core/model";
import { clear, clipped, h } from "./dom";
import { renderFusion, type FusionView } from "./fusion";
import { GraphView } from "./graph";
import { renderHlo } from "./hlo";
import { renderMemory } from "./memory";
import { nodeShardingDetails, renderSharding } from "./spmd";
import { nodeShardings, spmdOf, type NodeSharding, type Spmd } from "../core/spmd";
import { renderSummary } from "./summary";
import { renderTimeline } from "./timeline";
import { renderProfile, type TimelineRow } from "./profile";
import { renderCompile } from "./compile";
import type { VizLike } from "./viz";

/** The DOM event a live cell panel sends for a line link: detail {capture: {cell_id, execution_count}, ref}. */
export const SOURCE_EVENT = "xla-lab-source";

export const TABS = ["summary", "graph", "hlo", "fusion", "profile", "compile", "sharding", "timeline", "memory"] as const;
export type TabName = (typeof TABS)[number];
const TAB_LABEL: Record<TabName, string> = { summary: "Summary", graph: "Graph", hlo: "HLO", fusion: "Fusion map", profile: "Profile", compile: "Compile", sharding: "Sharding", timeline: "Timeline", memory: "Memory" };

export interface PanelOptions {
  getViz: () => Promise<VizLike>; t0?: number;
  /** JupyterLab: line references (node details, kernels, profile) link to the notebook's source line */
  onSource?: (ref: SourceRef) => void;
  /** the side panel: clicking a node or opening a kernel shows its source line too */
  sourceOnClick?: boolean;
}

export class PanelView {
  readonly el: HTMLElement;
  private model: PanelModel | null = null;
  private hash: string | null = null;
  private tab: TabName = "summary";
  private readonly panes = new Map<TabName, HTMLElement>();
  private readonly built = new Set<TabName>();
  private readonly tabButtons = new Map<TabName, HTMLButtonElement>();
  private readonly header: HTMLElement;
  private readonly progressEl: HTMLElement;
  private readonly errorEl: HTMLElement;
  private readonly graphView: GraphView;
  private fusion: FusionView | null = null;
  // the SPMD summary of the current graph (the Sharding tab exists only when there is one)
  private spmd: Spmd | null = null;
  private spmdError: string | null = null;
  private shardings = new Map<number, NodeSharding>();
  private readonly onSource?: (ref: SourceRef) => void;
  private readonly sourceOnClick: boolean;
  private progress: Progress | null = null;
  // distinct colours for the current graph's kernels (every tab of the panel uses the same)
  private colors: (kernel: string | null | undefined) => string = kernelColor;
  private progressAt = 0;
  private ticker: ReturnType<typeof setInterval> | undefined;

  constructor(opts: PanelOptions) {
    const t0 = opts.t0 ?? performance.now();
    const src = opts.onSource, nodeRef = (n: { cell: number | null; line: number | null; code: string | null }) => { if (src && n.line != null) src({ cell: n.cell, line: n.line, code: n.code }); };
    this.onSource = src;
    this.sourceOnClick = !!opts.sourceOnClick;
    this.graphView = new GraphView({ getViz: opts.getViz, t0, onKernel: (k) => this.showKernel(k),
      onNode: opts.sourceOnClick ? src && nodeRef : undefined, onLine: src && nodeRef,
      nodeDetails: (n) => { const ns = this.shardings.get(n.id); return ns ? nodeShardingDetails(ns) : null; },
      color: (k) => this.colors(k), focus: (g) => this.heaviestNode(g) });
    this.header = h("div", { class: "xla-header" });
    this.progressEl = h("div", { class: "xla-progress", hidden: true, role: "status", "aria-live": "polite" });
    this.errorEl = h("div", { class: "xla-warning xla-error", hidden: true, role: "alert" });
    const tabbar = h("div", { class: "xla-tabs", role: "tablist" });
    const body = h("div", { class: "xla-tab-body" });
    for (const t of TABS) {
      const b = h("button", { type: "button", class: "xla-tab", role: "tab", "data-tab": t, "aria-selected": "false", hidden: t === "sharding" || t === "profile" || t === "compile" }, TAB_LABEL[t]);
      b.addEventListener("click", () => this.selectTab(t));
      this.tabButtons.set(t, b);
      tabbar.append(b);
      const pane = h("div", { class: `xla-pane xla-pane-${t}`, role: "tabpanel", "data-pane": t, hidden: true });
      this.panes.set(t, pane);
      body.append(pane);
    }
    this.panes.get("graph")!.append(this.graphView.el);
    this.el = h("div", { class: "xla-panel jp-RenderedHTMLCommon-ignore" }, this.progressEl, this.header, this.errorEl, tabbar, body);
    this.selectTab("summary");
  }

  /** No model to show, and why (e.g. the kernel no longer keeps the capture). */
  showError(message: string) {
    this.model = null;
    clear(this.header);
    this.el.classList.add("xla-no-model");
    this.errorEl.hidden = false;
    this.errorEl.replaceChildren(clipped(message, 2000));
  }

  /** `t`: when this model arrived (performance.now()); the Graph tab's first-render time counts from it.
   * `checked`: `raw` as parsePanelModel returned it, when the caller validated it already (50 ms a MB). */
  setModel(raw: unknown, t: number = performance.now(), checked?: PanelModel) {
    if (raw == null || (typeof raw === "object" && Object.keys(raw as object).length === 0)) {
      this.model = null;
      clear(this.header);
      // a progress-only panel (the cell is still running): no tabs until a capture arrives
      this.el.classList.add("xla-no-model");
      return;
    }
    this.el.classList.remove("xla-no-model");
    try {
      this.model = checked ?? parsePanelModel(raw);
      this.errorEl.hidden = true;
    } catch (e) {
      // one clear message in place of the views (no empty tab bar or graph pane under it)
      this.showError((e as Error).message);
      return;
    }
    this.hash = mainGraphHash(this.model);
    this.colors = kernelPalette(kernelsOf(this.model, this.hash));
    this.built.clear();
    this.tabButtons.get("profile")!.hidden = !this.model.profile;
    if (this.tab === "profile" && !this.model.profile) this.tab = "summary";
    // the Compile tab: only for a run whose compiles were profiled
    this.tabButtons.get("compile")!.hidden = !this.model.compile.length;
    if (this.tab === "compile" && !this.model.compile.length) this.tab = "summary";
    this.drawHeader();
    this.loadSpmd();
    this.graphView.setGraph(this.hash ? this.model.graphs[this.hash] ?? null : null, t);
    this.built.add("graph");
    this.selectTab(this.tab);
  }

  private drawHeader() {
    const m = this.model!;
    const c = m.capture, s = m.summary;
    clear(this.header);
    const name = c.graph_name ? ` "${c.graph_name}"` : "";
    this.header.append(h("span", { class: "xla-title" }, clipped(`xla_lab cell[${c.execution_count ?? "?"}]${name}`, 120)),
      h("span", { class: "xla-muted" }, `: ${plural(s.steps, "step")}, ${s.compiles} compiled, ${plural(s.cache_hits, "cache hit")}` + (s.precompiled ? `, ${s.precompiled} precompiled` : "")));
    const hashes = Object.keys(m.capture.artifacts).length ? Object.keys(m.capture.artifacts) : Object.keys(m.graphs);
    if (hashes.length > 1) {
      const sel = h("select", { class: "xla-graph-select", "aria-label": "graph" });
      for (const hsh of hashes) {
        const steps = c.steps.filter((st) => st.graph_hash === hsh).map((st) => st.index);
        const graphName = m.graphs[hsh]?.name ?? c.artifacts[hsh]?.graph_name ?? "graph";
        const label = `${graphName.length > 60 ? graphName.slice(0, 60) + "\u2026" : graphName} ${hsh.slice(0, 8)} (steps ${compactRanges(steps)})`;
        const opt = h("option", { value: hsh }, label);
        if (hsh === this.hash) opt.selected = true;
        sel.append(opt);
      }
      sel.addEventListener("change", () => this.selectGraph(sel.value));
      this.header.append(h("label", { class: "xla-graph-pick" }, "graph ", sel));
    }
  }

  selectGraph(hash: string) {
    if (!this.model) return;
    this.hash = hash;
    this.colors = kernelPalette(kernelsOf(this.model, hash));
    this.built.clear();
    this.loadSpmd();
    this.graphView.setGraph(this.model.graphs[hash] ?? null);
    this.built.add("graph");
    this.selectTab(this.tab);
  }

  /** The current graph's SPMD summary; shows the Sharding tab only when there is one. */
  private loadSpmd() {
    const m = this.model!;
    const art = this.hash ? m.capture.artifacts[this.hash] : undefined;
    this.spmd = null; this.spmdError = null;
    try { this.spmd = spmdOf(art); } catch (e) { this.spmdError = (e as Error).message; }
    const g = this.hash ? m.graphs[this.hash] : undefined;
    this.shardings = nodeShardings(g, this.spmd, typeof art?.ir_text === "string" ? art.ir_text : null);
    this.tabButtons.get("sharding")!.hidden = !this.spmd && !this.spmdError;
    if (this.tab === "sharding" && this.tabButtons.get("sharding")!.hidden) this.tab = "summary";
  }

  selectTab(t: TabName) {
    this.tab = t;
    for (const [name, b] of this.tabButtons) {
      b.setAttribute("aria-selected", String(name === t));
      b.classList.toggle("xla-active", name === t);
    }
    for (const [name, p] of this.panes) p.hidden = name !== t;
    this.el.dataset.tab = t;
    if (this.model && !this.built.has(t)) this.build(t);
    if (t === "graph") requestAnimationFrame(() => { if (this.graphView.el.dataset.rendered === "svg" && !this.graphView.el.dataset.fitted) { this.graphView.el.dataset.fitted = "1"; this.graphView.firstView(); } });
  }

  private build(t: TabName) {
    const m = this.model!;
    const pane = this.panes.get(t)!;
    const art = this.hash ? m.capture.artifacts[this.hash] : undefined;
    const kernels = kernelsOf(m, this.hash);
    clear(pane);
    if (t === "summary") pane.append(renderSummary(m, this.onSource));
    else if (t === "hlo") pane.append(renderHlo(art?.hlo_before, art?.hlo_after, { kernels: new Set(kernels.map((k) => k.name)), onKernel: (k) => this.showKernel(k) }));
    else if (t === "fusion") { this.fusion = renderFusion(kernels, m.source_lines, this.onSource, m.model_files, this.colors, this.sourceOnClick); pane.append(this.fusion.el); }
    else if (t === "timeline") pane.append(renderTimeline(m.runs.length ? m.runs : [{ execution_count: m.capture.execution_count, started_at: m.capture.started_at,
      steps: m.capture.steps.map((s) => ({ index: s.index, cache: s.cache, trace_s: s.timings.trace_s ?? null, compile_s: s.timings.compile_s ?? null,
        execute_s: s.timings.execute_s ?? null, transfer_s: (s.timings.to_device_s ?? 0) + (s.timings.from_device_s ?? 0),
        execution_wait_s: s.timings.execution_wait_s ?? null })) }]));
    else if (t === "profile") pane.append(m.profile ? renderProfile(m.profile, profileTimeline(m.capture.profile), { onKernel: (k) => this.showKernel(k), onSource: this.onSource, color: this.colors })
      : h("p", { class: "xla-muted xla-empty" }, "Not profiled: run the cell with %%xla --profile."));
    else if (t === "compile") pane.append(renderCompile(m.compile, { onSource: this.onSource,
      hasKernel: (hash, name) => kernelsOf(m, hash).some((k) => k.name === name), onKernel: (hash, name) => this.showKernelOf(hash, name),
      color: (hash, name) => (hash === this.hash ? this.colors(name) : kernelColor(name)) }));
    else if (t === "memory") pane.append(renderMemory(art?.memory, this.spmd?.memory_per_device ? this.spmd.devices : null, this.onSource));
    else if (t === "sharding") pane.append(this.spmd ? renderSharding(this.spmd, { kernels: new Set(kernels.map((k) => k.name)), onKernel: (k) => this.showKernel(k), color: this.colors, onSource: this.onSource })
      : h("p", { class: "xla-warning xla-error" }, this.spmdError ?? "No SPMD summary for this graph."));
    this.built.add(t);
  }

  /** A node of the current graph's heaviest kernel (by flops, then bytes): where a graph too big to read
   * whole opens. */
  private heaviestNode(g: Graph): { node: number; what: string } | null {
    if (!this.model) return null;
    const kernels = [...kernelsOf(this.model, this.hash)].sort((a, b) => (b.flops - a.flops) || (b.bytes - a.bytes));
    for (const k of kernels) {
      const n = g.nodes.find((x) => x.kernel === k.name);
      if (n) return { node: n.id, what: `the heaviest kernel, ${k.name}` };
    }
    const first = g.nodes.find((x) => x.line != null && x.op !== "xla::device_data");
    return first ? { node: first.id, what: lineRef(first) } : null;
  }

  /** Kernel `name` of graph `hash` in the Fusion map (that graph selected first). */
  showKernelOf(hash: string, name: string) {
    if (!this.model) return;
    if (hash !== this.hash && (hash in this.model.capture.artifacts || hash in this.model.graphs)) {
      const sel = this.header.querySelector<HTMLSelectElement>("select.xla-graph-select");
      if (sel) sel.value = hash;
      this.selectGraph(hash);
    }
    this.showKernel(name);
  }

  showKernel(name: string) {
    this.selectTab("fusion");
    this.fusion?.focusKernel(name);
  }

  // --- progress ---------------------------------------------------------------------------
  setProgress(raw: unknown) {
    this.progress = parseProgress(raw);
    this.progressAt = performance.now();
    const live = this.progress && (this.progress.state === "compiling" || this.progress.state === "running");
    if (live && !this.ticker) this.ticker = setInterval(() => this.drawProgress(), 250);
    if (!live && this.ticker) { clearInterval(this.ticker); this.ticker = undefined; }
    this.drawProgress();
  }

  private drawProgress() {
    const p = this.progress;
    const live = p && (p.state === "compiling" || p.state === "running");
    this.progressEl.hidden = !live;
    this.el.dataset.progress = p?.state ?? "idle";
    if (!live) { clear(this.progressEl); return; }
    const elapsed = p.elapsed_s + (performance.now() - this.progressAt) / 1000;
    const verb = p.state === "compiling" ? "compiling" : "running";
    const step = p.step != null && !/\bstep\b/.test(p.what) ? ` (step ${p.step})` : "";
    const text = `${verb} ${p.what || ""}${step} \u00b7 ${fmtSeconds(elapsed)} elapsed` +
      (p.expected_s != null ? ` \u00b7 expected ~${fmtSeconds(p.expected_s)} (from an earlier compile of this cell)` : "");
    const bar = p.expected_s ? h("progress", { max: 1, value: Math.min(1, elapsed / p.expected_s) }) : h("progress", null);
    this.progressEl.replaceChildren(h("span", { class: "xla-spinner", "aria-hidden": "true" }), h("span", { class: "xla-progress-text" }, text), bar);
  }

  destroy() {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = undefined;
  }
}

/** The capture's profile timeline rows, keeping only well-formed ones (the capture is not validated deeply). */
function profileTimeline(raw: unknown): TimelineRow[] {
  const rows = (raw && typeof raw === "object" && Array.isArray((raw as { timeline?: unknown }).timeline)) ? (raw as { timeline: unknown[] }).timeline : [];
  return rows.filter((r): r is TimelineRow => Array.isArray(r) && r.length === 5 && typeof r[0] === "string" && typeof r[1] === "string"
    && typeof r[2] === "number" && typeof r[3] === "number" && typeof r[4] === "number");
}

function compactRanges(xs: number[]): string {
  const out: string[] = [];
  for (let i = 0; i < xs.length; ) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
    out.push(i === j ? `${xs[i]}` : `${xs[i]}-${xs[j]}`);
    i = j + 1;
  }
  return out.slice(0, 4).join(", ") + (out.length > 4 ? ", \u2026" : "");
}

/** "1 step", "3 steps": as the Python headline counts. */
function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}
