// The "XLA Lab" side panel: the captured cells, runs and steps of the active notebook (saved outputs
// and live ones), a step opened at full size, two steps compared. The big views load lazily (views.ts).
import type { ICodeCellModel } from "@jupyterlab/cells";
import type { NotebookPanel, INotebookTracker } from "@jupyterlab/notebook";
import type { ISessionContext } from "@jupyterlab/apputils";
import type { KernelMessage } from "@jupyterlab/services";
import { Widget } from "@lumino/widgets";
import {
  CaptureStore, captureKey, captureOfIopub, captureOfOutput, captureTitle, defaultPair, quietCaptureOfIopub, stepId, stepIdOf, stepLabel, stepListOf,
  type CaptureEntry, type Origin, type StepRef,
} from "../core/captures";
import { fmtSeconds, lineRef } from "../core/format";
import type { SourceRef } from "../core/model";
import { clear, clipped, clippedList, h } from "../panel/dom";
import type { VizLike } from "../panel/viz";
import { revealSource } from "./reveal";

type Views = typeof import("./views");
let viewsPromise: Promise<Views> | null = null;
export const loadViews = () => (viewsPromise ??= import("./views"));

export interface SidebarDeps {
  tracker: INotebookTracker;
  getViz: () => Promise<VizLike>;
  /** put the detail widget in the main area next to the notebook (or bring it to front) */
  showDetail: (w: Widget, panel: NotebookPanel | null) => void;
  /** bring a main-area widget to the front (the notebook, when a line is shown from a step's tab) */
  activate: (w: Widget) => void;
}

/** The main-area widget that shows one step or one comparison. */
export class XlaDetail extends Widget {
  private current: { dispose(): void } | null = null;
  constructor() {
    super();
    this.id = "xla-lab-detail";
    this.addClass("xla-lab-detail");
    this.title.label = "XLA Lab";
    this.title.closable = true;
  }
  showView(title: string, mode: "step" | "compare" | "loading" | "error", view: { el: HTMLElement; dispose(): void }) {
    this.current?.dispose();
    this.current = view;
    this.title.label = title;
    this.node.dataset.mode = mode;
    this.node.replaceChildren(view.el);
  }
  dispose() {
    this.current?.dispose();
    super.dispose();
  }
}

/** A line in the detail tab while it waits for the kernel, or why it cannot show the run. */
function loadingView(text: string, error = false): { el: HTMLElement; dispose(): void } {
  return { el: h("div", { class: `xla-panel ${error ? "xla-warning xla-error" : "xla-muted"} xla-lab-waiting` }, text), dispose: () => undefined };
}

export class XlaSidebar extends Widget {
  private readonly deps: SidebarDeps;
  private readonly stores = new WeakMap<NotebookPanel, CaptureStore>();
  private panel: NotebookPanel | null = null;
  private readonly headEl: HTMLElement;
  private readonly listEl: HTMLElement;
  private readonly selA: HTMLSelectElement;
  private readonly selB: HTMLSelectElement;
  private readonly compareBtn: HTMLButtonElement;
  private readonly errorsEl: HTMLElement;
  private scanTimer: ReturnType<typeof setTimeout> | undefined;
  private detail: XlaDetail | null = null;
  private selected: string | null = null;

  constructor(deps: SidebarDeps) {
    super();
    this.deps = deps;
    this.id = "xla-lab-sidebar";
    this.addClass("xla-lab-sidebar");
    this.addClass("xla-panel");
    this.title.caption = "XLA Lab: captured graphs, HLO and recompiles of this notebook";
    this.headEl = h("div", { class: "xla-lab-head" });
    this.listEl = h("div", { class: "xla-lab-list", role: "tree" });
    this.errorsEl = h("div", { class: "xla-warning", hidden: true });
    this.selA = h("select", { class: "xla-lab-select-a", "aria-label": "compare: step A" });
    this.selB = h("select", { class: "xla-lab-select-b", "aria-label": "compare: step B" });
    for (const sel of [this.selA, this.selB]) sel.addEventListener("change", () => { sel.dataset.chosen = sel.value; });
    this.compareBtn = h("button", { type: "button", class: "xla-btn xla-lab-compare-btn" }, "Compare");
    this.compareBtn.addEventListener("click", () => void this.compare(this.selA.value, this.selB.value));
    const compare = h("div", { class: "xla-lab-compare" },
      h("div", { class: "xla-lab-compare-title" }, "Compare two steps or runs"),
      h("label", null, "A ", this.selA), h("label", null, "B ", this.selB), this.compareBtn);
    this.node.append(h("div", { class: "xla-lab-sidebar-body" },
      h("h2", { class: "xla-lab-title" }, "XLA Lab"), this.headEl, compare, this.errorsEl, this.listEl));
    deps.tracker.currentChanged.connect((_, p) => this.follow(p), this);
    this.follow(deps.tracker.currentWidget);
  }

  get store(): CaptureStore | null {
    return this.panel ? this.storeOf(this.panel) : null;
  }

  private storeOf(p: NotebookPanel): CaptureStore {
    let s = this.stores.get(p);
    if (!s) { s = new CaptureStore(); this.stores.set(p, s); }
    return s;
  }

  // --- following the notebook -------------------------------------------------------------
  private follow(p: NotebookPanel | null) {
    if (p === this.panel) return;
    if (this.panel) {
      this.panel.model?.contentChanged.disconnect(this.onContent, this);
      this.panel.sessionContext.iopubMessage.disconnect(this.onIopub, this);
    }
    this.panel = p;
    if (p) {
      p.sessionContext.iopubMessage.connect(this.onIopub, this);
      void p.context.ready.then(() => {
        if (this.panel !== p) return;
        p.model?.contentChanged.connect(this.onContent, this);
        // what the notebook holds when it opens is "saved"; later outputs are "live"
        this.scan("saved");
      });
      p.disposed.connect(this.onDisposed, this);
    }
    this.draw();
  }

  private onDisposed(p: NotebookPanel) {
    if (this.panel === p) this.follow(null);
  }

  private onContent() {
    clearTimeout(this.scanTimer);
    this.scanTimer = setTimeout(() => { if (this.panel?.context.isReady) this.scan("live"); }, 250);
  }

  private onIopub(_: ISessionContext, msg: KernelMessage.IMessage) {
    const p = this.panel;
    if (!p) return;
    const output = captureOfIopub(msg);
    const quiet = output == null ? quietCaptureOfIopub(msg) : null;
    const raw = output ?? quiet;
    if (raw != null) {
      // live: known at once, before the output model has it; the cell comes from the capture's cell_id
      const origin: Origin = quiet != null ? "quiet" : "live";
      void this.storeOf(p).addPayload(raw, null, origin).then((e) => {
        if (e) { e.cellModelId ??= p.content.widgets.some((c) => c.model.id === e.model.capture.cell_id) ? e.model.capture.cell_id : null; this.draw(); }
      });
    }
    if (msg.header.msg_type === "status" && (msg.content as { execution_state?: string }).execution_state === "idle") this.onContent();
  }

  /** Read every capture the notebook's outputs hold now. */
  scan(origin: "saved" | "live") {
    const p = this.panel;
    if (!p?.model) return;
    const store = this.storeOf(p);
    const present = new Set<string>();
    const adding: Promise<unknown>[] = [];
    for (const cell of p.model.cells) {
      if (cell.type !== "code") continue;
      const outputs = (cell as ICodeCellModel).outputs;
      for (let i = 0; i < outputs.length; i++) {
        const o = outputs.get(i);
        const raw = captureOfOutput({ output_type: o.type, data: o.data });
        if (raw == null) continue;
        const key = captureKey(raw);
        if (key) present.add(key);
        adding.push(store.addPayload(raw, cell.id, origin));
      }
    }
    store.markPresent(present);
    this.draw();
    // packed (saved) captures are inflated asynchronously: draw again once they are in
    if (adding.length) void Promise.all(adding).then(() => { if (this.panel === p) { store.markPresent(present); this.draw(); } });
  }

  private cellOrder(): string[] {
    const m = this.panel?.model;
    if (!m) return [];
    const out: string[] = [];
    for (const c of m.cells) out.push(c.id);
    return out;
  }

  // --- drawing the list -------------------------------------------------------------------
  draw() {
    const p = this.panel, store = this.store;
    clear(this.headEl);
    clear(this.listEl);
    if (!p || !store) {
      this.headEl.append(h("p", { class: "xla-muted" }, "Open a notebook: its %%xla captures are listed here."));
      this.fillSelects([]);
      this.node.dataset.captures = "0";
      return;
    }
    const groups = store.cells(this.cellOrder());
    // compare choices: every step, but a run of identical cache hits is one choice (its first step)
    const firsts = new Map<CaptureEntry, Set<number>>();
    for (const g of groups) for (const e of g.runs) firsts.set(e, new Set(stepListOf(e).map((row) => row.first)));
    const steps = store.steps(this.cellOrder()).filter((r) => firsts.get(r.entry)?.has(r.step.index));
    const total = groups.reduce((n, g) => n + g.runs.reduce((m, e) => m + e.model.capture.steps.length, 0), 0);
    this.headEl.append(h("div", { class: "xla-lab-nb" }, h("b", null, p.context.localPath.split("/").pop() ?? ""),
      h("span", { class: "xla-muted" }, ` \u00b7 ${store.size} capture${store.size === 1 ? "" : "s"}, ${total} step${total === 1 ? "" : "s"}`)));
    this.node.dataset.captures = String(store.size);
    this.drawErrors(store);
    if (!groups.length) {
      this.listEl.append(h("p", { class: "xla-muted xla-lab-empty" }, "No captures yet: run a %%xla cell (or open a notebook saved with its outputs)."));
    }
    for (const g of groups) {
      const last = g.runs[g.runs.length - 1];
      const sec = h("section", { class: "xla-lab-cell", "data-cell-id": g.cellId });
      const title = h("button", { type: "button", class: "xla-link xla-lab-cell-title", title: "show the cell" }, `cell ${captureTitle(last)}`);
      title.addEventListener("click", () => void this.reveal(last, { cell: null, line: 1, code: null }));
      sec.append(title);
      for (const e of g.runs) sec.append(this.runEl(e));
      this.listEl.append(sec);
    }
    this.fillSelects(steps);
  }

  /** Outputs that could not be read, each with the cell that holds it (its prompt, else its place). */
  private drawErrors(store: CaptureStore) {
    clear(this.errorsEl);
    this.errorsEl.hidden = !store.errors.length;
    if (!store.errors.length) return;
    const cells = this.panel?.model ? Array.from(this.panel.model.cells) : [];
    const nameOf = (id: string | null) => {
      const i = id ? cells.findIndex((c) => c.id === id) : -1;
      if (i < 0) return "an output";
      const count = cells[i].type === "code" ? (cells[i] as ICodeCellModel).executionCount : null;
      return `cell ${count != null ? `[${count}]` : `#${i + 1}`}`;
    };
    const n = store.errors.length;
    this.errorsEl.append(h("div", null, `${n} output${n === 1 ? "" : "s"} could not be read:`),
      clippedList(h("ul", { class: "xla-lab-errors" }), store.errors, (e) => {
        const li = h("li", { "data-cell-id": e.cellModelId ?? "" }, h("b", null, `${nameOf(e.cellModelId)}: `), clipped(e.message, 300));
        const cell = e.cellModelId;
        if (cell) li.addEventListener("click", () => { const i = cells.findIndex((c) => c.id === cell); if (i >= 0 && this.panel) { this.panel.content.activeCellIndex = i; void this.panel.content.scrollToItem(i, "center"); } });
        return li;
      }, 5));
  }

  private runEl(e: CaptureEntry): HTMLElement {
    const s = e.model.summary;
    const tag = e.origin === "quiet" ? "quiet (%%xla -q)" : !e.inNotebook ? (e.origin === "saved" ? "saved, since replaced" : "earlier run")
      : e.origin === "saved" ? "saved" : "live";
    const run = h("div", { class: "xla-lab-run", "data-key": e.key, "data-run": String(e.run), "data-origin": e.origin, "data-in-notebook": String(e.inNotebook) },
      h("div", { class: "xla-lab-run-title" }, `run ${e.run} `, h("span", { class: "xla-muted" },
        `[${e.model.capture.execution_count ?? " "}] \u00b7 ${s.steps} step${s.steps === 1 ? "" : "s"}, ${s.compiles} compiled, ${s.cache_hits} hits \u00b7 ${tag}`)));
    const ul = h("ul", { class: "xla-lab-steps" });
    for (const row of stepListOf(e)) {
      const step = e.model.capture.steps.find((x) => x.index === row.first);
      const id = stepIdOf(e, row.first);
      const label = row.count > 1 ? `steps ${row.steps}` : `step ${row.steps}`;
      const reason = step?.recompile_reason ?? e.model.summary.recompiles.find((r) => r.step === row.first)?.reason ?? null;
      const b = h("button", { type: "button", class: `xla-lab-step xla-cache-${row.cache}`, "data-step-id": id, "data-step": String(row.first), "data-cache": row.cache,
        "aria-selected": String(this.selected === id), title: reason ? `recompile reason: ${reason}` : row.cause },
        h("span", { class: "xla-lab-step-name" }, label), h("span", { class: `xla-badge xla-cache-${row.cache}` }, row.cache),
        h("span", { class: "xla-muted" }, ` ${row.cache === "hit" ? fmtSeconds(row.execute_s) : fmtSeconds(row.compile_s)} \u00b7 ${row.cause}${row.ref ? ` @ ${lineRef(row.ref)}` : ""}`));
      b.addEventListener("click", () => void this.openStep(id));
      ul.append(h("li", null, b));
    }
    run.append(ul);
    return run;
  }

  private fillSelects(steps: StepRef[]) {
    const pair = defaultPair(steps);
    ([[this.selA, pair?.[0]], [this.selB, pair?.[1]]] as const).forEach(([sel, pick]) => {
      const keep = sel.dataset.chosen;
      clear(sel);
      for (const r of steps) sel.append(h("option", { value: stepId(r) }, stepLabel(r)));
      // a choice the user made stays; otherwise the default pair follows new captures
      if (keep && steps.some((r) => stepId(r) === keep)) sel.value = keep;
      else if (pick) sel.value = stepId(pick);
    });
    this.compareBtn.disabled = steps.length < 2;
  }

  // --- detail views -----------------------------------------------------------------------
  private ensureDetail(): XlaDetail {
    if (!this.detail || this.detail.isDisposed) this.detail = new XlaDetail();
    return this.detail;
  }

  /** Open step `id` ("<capture key>#<step index>") at full size in the main area. */
  async openStep(id: string): Promise<void> {
    const t0 = performance.now();
    let r = this.store?.find(id);
    if (!r) return;
    this.selected = id;
    for (const b of Array.from(this.listEl.querySelectorAll<HTMLElement>(".xla-lab-step"))) b.setAttribute("aria-selected", String(b.dataset.stepId === id));
    const views = await loadViews();
    const d = this.ensureDetail();
    const title = `XLA Lab: ${captureTitle(r.entry)} step ${r.step.index}`;
    if (!(await this.completeAll(d, title, [r.entry]))) return;
    r = this.store?.find(id) ?? r;
    d.showView(title, "step", views.stepView(r, this.viewDeps(), t0));
    this.deps.showDetail(d, this.panel);
  }

  async compare(idA: string, idB: string): Promise<void> {
    const t0 = performance.now();
    let a = this.store?.find(idA), b = this.store?.find(idB);
    if (!a || !b) return;
    const views = await loadViews();
    const d = this.ensureDetail();
    if (!(await this.completeAll(d, "XLA Lab: compare", [a.entry, b.entry]))) return;
    a = this.store?.find(idA) ?? a;
    b = this.store?.find(idB) ?? b;
    d.showView(`XLA Lab: compare`, "compare", views.compareView(a, b, this.viewDeps(), t0));
    this.deps.showDetail(d, this.panel);
  }

  /** Quiet runs among `entries` get their graphs from the kernel first, the tab saying so meanwhile;
   * false (the tab says why) if one cannot. */
  private async completeAll(d: XlaDetail, title: string, entries: CaptureEntry[]): Promise<boolean> {
    for (const e of entries) {
      if (!e.model.partial) continue;
      d.showView(title, "loading", loadingView("asking the kernel for this quiet run's graphs\u2026"));
      this.deps.showDetail(d, this.panel);
      const why = await this.complete(e);
      if (why !== null) { d.showView(title, "error", loadingView(why, true)); return false; }
    }
    return true;
  }

  /** A quiet run arrives with its steps only: its graphs and HLO come from the kernel when first needed
   * (a silent execution of xla_lab.frontend.send_full_capture, answered with a quiet message). null when done. */
  private async complete(e: CaptureEntry): Promise<string | null> {
    const p = this.panel, store = this.store;
    const kernel = p?.sessionContext.session?.kernel;
    if (!p || !store) return "no notebook";
    if (!kernel) return "this quiet run's graphs are in its kernel, which is not running (run the cell again)";
    const c = e.model.capture;
    // (JSON literals are Python literals here: a string, an int or None, a float)
    const code = `__import__("xla_lab.frontend", fromlist=["send_full_capture"]).send_full_capture(${JSON.stringify(c.cell_id)}, ` +
      `${c.execution_count == null ? "None" : String(Math.trunc(c.execution_count))}, ${JSON.stringify(c.started_at)})`;
    let raw: unknown = null;
    const future = kernel.requestExecute({ code, silent: true, store_history: false, allow_stdin: false, stop_on_error: false });
    // (the future never sees it: JupyterLab's kernel connection swallows updates of display ids it has not
    // shown, after emitting them to the session's listeners)
    const listen = (_: unknown, msg: KernelMessage.IMessage) => {
      const q = (msg.parent_header as { msg_id?: string }).msg_id === future.msg.header.msg_id ? quietCaptureOfIopub(msg) : null;
      if (q != null) raw = q;
    };
    p.sessionContext.iopubMessage.connect(listen);
    let reply;
    try { reply = await future.done; } finally { p.sessionContext.iopubMessage.disconnect(listen); }
    const content = reply.content as { status?: string; evalue?: string };
    if (content.status !== "ok") return content.evalue || "the kernel could not send this run's graphs";
    if (raw == null) return "the kernel sent nothing for this run";
    const why = await store.complete(e.key, raw);
    this.draw();
    return why;
  }

  private viewDeps() {
    return { getViz: this.deps.getViz, onSource: (r: StepRef, ref: SourceRef) => void this.reveal(r.entry, ref) };
  }

  /** Scroll the notebook to the cell of `ref` and mark its line. */
  async reveal(e: CaptureEntry, ref: SourceRef): Promise<boolean> {
    const p = this.panel;
    if (!p) return false;
    if (!p.isVisible) this.deps.activate(p); // the step or comparison tab covers it
    return revealSource(p, { cellModelId: e.cellModelId, captureCellId: e.model.capture.cell_id, executionCount: e.model.capture.execution_count }, ref);
  }
}
