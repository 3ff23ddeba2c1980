// The Graph tab: the captured graph laid out by Graphviz (WASM), pan / zoom, search, node details,
// big graphs collapsed into groups that open on click.
import { collapseGraph, collapseGroup, expandGroup, parentGroupOf, revealNode, DEFAULT_COLLAPSE, type CollapseOptions, type Unit, type VisibleGraph } from "../core/collapse";
import { lineRef } from "../core/format";
import { kernelColor, toDot, unitDotId, type DotOptions } from "../core/dot";
import type { Graph, GraphNode } from "../core/model";
import { searchNodes } from "../core/search";
import { clear, h } from "./dom";
import type { VizLike } from "./viz";

export interface GraphViewOptions {
  getViz: () => Promise<VizLike>;
  onKernel: (name: string) => void;
  /** performance.now() when the widget's render() started, for the first-render time */
  t0: number;
  collapse?: CollapseOptions;
  /** colours / classes of units instead of the kernel colours (the side panel's graph diff) */
  dot?: Pick<DotOptions, "fill" | "className">;
  /** a node was clicked (the side panel scrolls the notebook to its line) */
  onNode?: (node: GraphNode) => void;
  /** when set, a node's line in its details is a link that calls this */
  onLine?: (node: GraphNode) => void;
  /** extra details of a clicked node (the Sharding block of SPMD graphs), null for none */
  nodeDetails?: (n: GraphNode) => Node | null;
  /** the colour of a kernel (the panel's kernelPalette); default kernelColor */
  color?: (kernel: string | null | undefined) => string;
  /** where the first view of a graph too big to read whole starts: a node id (the panel gives a node of
   * the heaviest kernel) and what to call it */
  focus?: (g: Graph) => { node: number; what: string } | null;
}

/** Graphviz draws labels at 10 units: below this scale they are under 9 CSS px, too small to read. */
export const MIN_LEGIBLE_SCALE = 0.9;
const LEGEND = "Colour = the kernel a node ended in (white: none). Drag to pan, wheel to zoom.";

export class GraphView {
  readonly el: HTMLElement;
  private graph: Graph | null = null;
  private expanded = new Set<string>();
  private visible: VisibleGraph | null = null;
  private matches: number[] = [];
  private matchCursor = -1;
  private selected: number | null = null;
  private tx = 0; private ty = 0; private scale = 1;
  private svg: SVGSVGElement | null = null;
  private renderSeq = 0;
  private firstRendered = false;
  private readonly viewport: HTMLElement;
  private readonly canvas: HTMLElement;
  private readonly status: HTMLElement;
  private readonly hint: HTMLElement;
  private readonly details: HTMLElement;
  private readonly search: HTMLInputElement;
  private readonly searchInfo: HTMLElement;
  private readonly opts: GraphViewOptions;
  private readonly copts: CollapseOptions;
  private searchTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(opts: GraphViewOptions) {
    this.opts = opts;
    this.t0 = opts.t0;
    this.copts = opts.collapse ?? DEFAULT_COLLAPSE;
    this.search = h("input", { type: "search", class: "xla-search", placeholder: "search op, kernel or line (12, \"sin\", code:x)", "aria-label": "search the graph" });
    this.searchInfo = h("span", { class: "xla-muted xla-search-info" });
    this.status = h("span", { class: "xla-muted xla-graph-status" });
    this.canvas = h("div", { class: "xla-graph-canvas" });
    this.viewport = h("div", { class: "xla-graph-viewport", tabindex: 0 }, this.canvas);
    this.details = h("div", { class: "xla-graph-details" }, h("p", { class: "xla-muted" }, "Click a node for its details; click a group to open it."));
    const fit = h("button", { class: "xla-btn", type: "button", title: "fit the graph to the view" }, "Fit");
    fit.addEventListener("click", () => { this.fit(); this.el.dataset.view = "fit"; this.hint.textContent = LEGEND; });
    const collapseAll = h("button", { class: "xla-btn", type: "button", title: "close every open group" }, "Collapse all");
    collapseAll.addEventListener("click", () => { this.expanded = new Set(); this.selected = null; void this.render(); });
    this.el = h("div", { class: "xla-graph" },
      h("div", { class: "xla-toolbar" }, this.search, this.searchInfo, fit, collapseAll, this.status),
      h("div", { class: "xla-graph-body" }, this.viewport, this.details),
      this.hint = h("div", { class: "xla-muted xla-legend" }, LEGEND));
    this.search.addEventListener("input", () => {
      clearTimeout(this.searchTimer);
      this.searchTimer = setTimeout(() => this.runSearch(), 120);
    });
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); this.runSearch(); void this.nextMatch(); }
    });
    this.installPanZoom();
  }

  /** Start of the first-render measure: render() start, or when the first model arrived later. */
  t0: number;

  setGraph(graph: Graph | null, t0?: number) {
    if (t0 !== undefined && !this.firstRendered) this.t0 = t0;
    this.graph = graph;
    this.expanded = new Set();
    this.selected = null;
    this.matches = [];
    this.search.value = "";
    this.searchInfo.textContent = "";
    void this.render();
  }

  /** Lay out and draw the current view. */
  async render(focusNode?: number): Promise<void> {
    const seq = ++this.renderSeq;
    const start = performance.now();
    const g = this.graph;
    if (!g || g.nodes.length === 0) {
      clear(this.canvas);
      this.canvas.append(h("p", { class: "xla-muted xla-empty" }, g ? (g.absent ?? "The graph has no nodes.") : "No graph was captured for this step."));
      this.status.textContent = "";
      this.el.dataset.rendered = "empty";
      return;
    }
    const visible = collapseGraph(g, this.expanded, this.copts);
    this.visible = visible;
    this.status.textContent = visible.collapsed
      ? `${g.nodes.length.toLocaleString()} nodes shown as ${visible.units.length} units (groups by scope / line); click a group to open it`
      : `${g.nodes.length.toLocaleString()} nodes`;
    let viz: VizLike;
    try {
      if (!this.svg) this.status.textContent = "loading Graphviz\u2026 " + this.status.textContent;
      viz = await this.opts.getViz();
    } catch (e) {
      this.status.textContent = `Graphviz could not be loaded: ${(e as Error).message}`;
      return;
    }
    if (seq !== this.renderSeq) return;
    this.status.textContent = this.status.textContent!.replace(/^loading Graphviz\u2026 /, "");
    const dot = toDot(visible, { name: g.name, highlight: this.matchUnits(), color: this.opts.color, ...this.opts.dot });
    let svg: SVGSVGElement;
    try {
      svg = viz.renderSVGElement(dot);
    } catch (e) {
      this.status.textContent = `layout failed: ${(e as Error).message}`;
      return;
    }
    if (seq !== this.renderSeq) return;
    const vb = svg.viewBox?.baseVal;
    if (vb && vb.width) {
      svg.setAttribute("width", String(vb.width));
      svg.setAttribute("height", String(vb.height));
    }
    svg.classList.add("xla-graph-svg");
    clear(this.canvas);
    this.canvas.append(svg);
    this.svg = svg;
    this.el.dataset.units = String(visible.units.length);
    this.el.dataset.nodes = String(g.nodes.length);
    this.el.dataset.rendered = "svg";
    this.el.dataset.lastRenderMs = (performance.now() - start).toFixed(1);
    if (!this.firstRendered) {
      this.firstRendered = true;
      const ms = performance.now() - this.t0;
      this.el.dataset.firstRenderMs = ms.toFixed(1);
    }
    this.markSelection();
    if (focusNode !== undefined) this.centerOn(focusNode);
    else if (!this.restoreView) this.firstView();
    this.restoreView = false;
  }

  private restoreView = false;

  private matchUnits(): Set<number> {
    const out = new Set<number>();
    if (!this.visible) return out;
    for (const id of this.matches) {
      const u = this.visible.unitOf.get(id);
      if (u !== undefined) out.add(u);
    }
    return out;
  }

  private runSearch() {
    if (!this.graph) return;
    const q = this.search.value;
    const found = q.trim() ? searchNodes(this.graph, q) : { ids: [], more: 0 };
    this.matches = found.ids;
    this.matchCursor = -1;
    const units = this.matchUnits();
    this.searchInfo.textContent = q.trim() ? `${this.matches.length} match${this.matches.length === 1 ? "" : "es"}${this.matches.length ? " (Enter: next)" : ""}` +
      (found.more ? `; ${found.more} more in code or scope (code:${q.trim()})` : "") : "";
    if (!this.svg) return;
    this.svg.querySelectorAll("g.node").forEach((n) => n.classList.remove("xla-match"));
    for (const u of units) this.svg.querySelector(`g#${unitDotId(u)}`)?.classList.add("xla-match");
  }

  private async nextMatch() {
    if (!this.graph || !this.matches.length) return;
    this.matchCursor = (this.matchCursor + 1) % this.matches.length;
    const id = this.matches[this.matchCursor];
    const before = this.expanded;
    this.expanded = revealNode(this.graph, this.expanded, id, this.copts);
    this.selected = id;
    if (this.expanded !== before && !sameSet(before, this.expanded)) {
      await this.render(id);
      this.runSearchMarksOnly();
    } else {
      this.markSelection();
      this.centerOn(id);
    }
    this.showNode(this.graph.nodes.find((n) => n.id === id)!);
  }

  private runSearchMarksOnly() {
    const cursor = this.matchCursor;
    this.runSearch();
    this.matchCursor = cursor;
  }

  private unitAt(target: EventTarget | null): [number, Unit] | null {
    const g = (target as Element | null)?.closest?.("g.node");
    if (!g || !this.visible) return null;
    const m = /^u(\d+)$/.exec(g.id);
    if (!m) return null;
    const i = Number(m[1]);
    const u = this.visible.units[i];
    return u ? [i, u] : null;
  }

  /** Click on the SVG: open a group, or show a node's details. */
  clickUnit(target: EventTarget | null) {
    const hit = this.unitAt(target);
    if (!hit || !this.graph) return;
    const [, u] = hit;
    if (u.kind === "group") {
      this.expanded = expandGroup(this.graph, this.expanded, u.id, this.copts);
      this.showGroup(u);
      void this.render();
    } else {
      this.selected = u.node.id;
      this.markSelection();
      this.showNode(u.node);
      this.opts.onNode?.(u.node);
    }
  }

  private markSelection() {
    if (!this.svg || !this.visible) return;
    this.svg.querySelectorAll("g.xla-selected").forEach((n) => n.classList.remove("xla-selected"));
    if (this.selected === null) return;
    const u = this.visible.unitOf.get(this.selected);
    if (u !== undefined) this.svg.querySelector(`g#${unitDotId(u)}`)?.classList.add("xla-selected");
  }

  private showGroup(u: Unit & { kind: "group" }) {
    clear(this.details);
    this.details.append(h("h4", null, `group: ${u.label}`),
      h("p", null, `${u.members.length} nodes`),
      h("p", { class: "xla-muted" }, u.ops.map(([op, c]) => `${op} \u00d7${c}`).join(", ")));
  }

  showNode(n: GraphNode) {
    clear(this.details);
    const row = (k: string, v: Node | string) => [h("dt", null, k), h("dd", null, v)];
    const kernel: Node | string = n.kernel
      ? h("button", { type: "button", class: "xla-link xla-kernel-link", "data-kernel": n.kernel, title: "show in the fusion map" },
        h("span", { class: "xla-swatch", style: `background:${(this.opts.color ?? kernelColor)(n.kernel)}` }), n.kernel)
      : "(not in a kernel)";
    if (kernel instanceof HTMLElement) kernel.addEventListener("click", () => this.opts.onKernel(n.kernel!));
    const lineText = lineRef(n);
    let line: Node | string = lineText;
    if (n.line != null && this.opts.onLine) {
      line = h("button", { type: "button", class: "xla-link xla-source-link", "data-line": n.line, title: "show this line in the notebook" }, lineText);
      line.addEventListener("click", () => this.opts.onLine!(n));
    }
    const dl = h("dl", { class: "xla-dl" },
      row("op", n.op), row("shape", n.shape ?? "-"), row("line", line),
      row("code", n.code ? h("code", null, n.code) : "-"), row("scope", n.scope ?? "-"), row("kernel", kernel), row("node", `#${n.id}`));
    const uses = this.visible?.hubs.get(n.id);
    if (uses) dl.append(...row("uses", `${uses} (shared: its edges are not drawn)`));
    this.details.append(h("h4", { class: "xla-node-title" }, n.op), dl);
    const extra = this.opts.nodeDetails?.(n);
    if (extra) this.details.append(extra);
    if (this.graph) {
      const parent = parentGroupOf(this.expanded, this.graph, n.id, this.copts);
      if (parent) {
        const b = h("button", { type: "button", class: "xla-btn" }, "Collapse its group");
        b.addEventListener("click", () => { this.expanded = collapseGroup(this.expanded, parent); void this.render(); });
        this.details.append(b);
      }
    }
    this.el.dataset.selectedNode = String(n.id);
  }

  // --- pan / zoom -------------------------------------------------------------------------
  private apply() {
    this.canvas.style.transform = `translate(${this.tx}px, ${this.ty}px) scale(${this.scale})`;
  }

  /** The whole graph when its labels stay legible; else legible labels around the part that matters
   * (the heaviest kernel), the rest a pan or the Fit button away. */
  firstView() {
    this.fit();
    const focus = this.scale < MIN_LEGIBLE_SCALE && this.graph ? this.opts.focus?.(this.graph) ?? null : null;
    this.hint.textContent = LEGEND;
    if (!focus) { this.el.dataset.view = "fit"; return; }
    this.scale = 1;
    this.centerOn(focus.node, 1);
    this.el.dataset.view = "focus";
    this.hint.textContent = `${LEGEND} Showing ${focus.what} at a readable size; Fit shows the whole graph.`;
  }

  fit() {
    if (!this.svg) return;
    const w = Number(this.svg.getAttribute("width")) || 1, hgt = Number(this.svg.getAttribute("height")) || 1;
    const vw = this.viewport.clientWidth || 800, vh = this.viewport.clientHeight || 480;
    this.scale = Math.max(0.05, Math.min(1.5, (vw - 16) / w, (vh - 16) / hgt));
    this.tx = (vw - w * this.scale) / 2;
    this.ty = Math.max(8, (vh - hgt * this.scale) / 2);
    this.apply();
  }

  private centerOn(nodeId: number, scale?: number) {
    if (!this.svg || !this.visible) return;
    const u = this.visible.unitOf.get(nodeId);
    const g = u !== undefined ? this.svg.querySelector<SVGGraphicsElement>(`g#${unitDotId(u)}`) : null;
    if (!g || typeof g.getBBox !== "function") return;
    let box: DOMRect;
    try { box = g.getBBox(); } catch { return; }
    const vb = this.svg.viewBox.baseVal;
    // Graphviz draws in a group translated by (4, height - 4): map through the element's CTM instead
    const ctm = g.getCTM(), sctm = this.svg.getCTM();
    let cx = box.x + box.width / 2, cy = box.y + box.height / 2;
    if (ctm && sctm) {
      const p = new DOMPoint(cx, cy).matrixTransform(sctm.inverse().multiply(ctm));
      cx = p.x; cy = p.y;
    } else if (vb) { cy += vb.height; }
    this.scale = scale ?? Math.max(this.scale, 0.8);
    const vw = this.viewport.clientWidth || 800, vh = this.viewport.clientHeight || 480;
    this.tx = vw / 2 - cx * this.scale;
    this.ty = vh / 2 - cy * this.scale;
    this.apply();
  }

  private installPanZoom() {
    let drag: { x: number; y: number; tx: number; ty: number; moved: boolean; id: number } | null = null;
    this.viewport.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty, moved: false, id: e.pointerId };
    });
    this.viewport.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) > 4) {
        drag.moved = true;
        this.viewport.setPointerCapture?.(drag.id);
        this.viewport.classList.add("xla-dragging");
      }
      if (drag.moved) { this.tx = drag.tx + dx; this.ty = drag.ty + dy; this.apply(); }
    });
    const end = (e: PointerEvent) => {
      if (!drag) return;
      const wasDrag = drag.moved;
      drag = null;
      this.viewport.classList.remove("xla-dragging");
      if (!wasDrag && e.type === "pointerup") this.clickUnit(e.target);
    };
    this.viewport.addEventListener("pointerup", end);
    this.viewport.addEventListener("pointercancel", end);
    this.viewport.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = this.viewport.getBoundingClientRect();
      const px = e.clientX - r.left, py = e.clientY - r.top;
      const f = Math.exp(-e.deltaY * (e.deltaMode === 1 ? 0.05 : 0.0015));
      const ns = Math.min(8, Math.max(0.03, this.scale * f));
      this.tx = px - (px - this.tx) * (ns / this.scale);
      this.ty = py - (py - this.ty) * (ns / this.scale);
      this.scale = ns;
      this.apply();
    }, { passive: false });
  }
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>) {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}
