// The side panel's big views, loaded lazily (with the cell panel's renderers): one step at full size
// and the comparison of two steps. Graphviz comes from the extension's own lazily loaded chunk.
import { compareSteps, stepLabel, stepRefOf, type StepRef } from "../core/captures";
import { compareCompiles } from "../core/compile";
import { DIFF_COLORS, unitDiffStatus, type DiffStatus } from "../core/graphdiff";
import { fmtSeconds, lineRef } from "../core/format";
import type { SourceRef } from "../core/model";
import { h } from "../panel/dom";
import { GraphView } from "../panel/graph";
import { renderHlo } from "../panel/hlo";
import { PanelView } from "../panel/panel";
import type { VizLike } from "../panel/viz";

export { PanelView };

export interface ViewDeps { getViz: () => Promise<VizLike>; onSource: (r: StepRef, ref: SourceRef) => void }

export interface Disposable { el: HTMLElement; dispose(): void }

/** One step at full size: the cell panel's tabs, opened on the step's graph. `t0`: when it was asked for. */
export function stepView(r: StepRef, deps: ViewDeps, t0: number): Disposable {
  const view = new PanelView({ getViz: deps.getViz, t0, onSource: (ref) => deps.onSource(r, ref), sourceOnClick: true });
  const raw = r.entry.raw;
  const base = (typeof raw === "string" ? JSON.parse(raw) : raw) as Record<string, unknown>;
  const graphs = (base.graphs ?? {}) as Record<string, unknown>;
  // open on the step's graph: the model with main_graph set to it
  const model = r.step.graph_hash in graphs ? { ...base, main_graph: r.step.graph_hash } : base;
  view.setModel(model, t0);
  view.selectTab("graph");
  const st = r.step, ref = stepRefOf(r);
  const head = h("div", { class: "xla-lab-view-head" },
    h("h3", null, stepLabel(r)),
    h("span", { class: "xla-muted" }, `${st.sync_cause}${ref ? ` @ ${lineRef(ref)}` : ""} \u00b7 compile ${fmtSeconds(st.timings.compile_s ?? 0)} \u00b7 execute ${fmtSeconds(st.timings.execute_s ?? 0)}`),
    st.recompile_reason ? h("div", { class: "xla-lab-reason-inline" }, `recompile reason: ${st.recompile_reason}`) : null);
  const el = h("div", { class: "xla-lab-step-view", "data-step": String(st.index), "data-graph": st.graph_hash }, head, view.el);
  return { el, dispose: () => view.destroy() };
}

const STATUS_LABEL: Record<DiffStatus, string> = { same: "same", added: "added in B", removed: "removed (only in A)", changed: "changed" };

/** Two steps side by side: the recompile reason, the graph diff (coloured), the HLO diffs. */
export function compareView(a: StepRef, b: StepRef, deps: ViewDeps, t0: number): Disposable {
  const cmp = compareSteps(a, b);
  const d = cmp.diff;
  const changeOf = new Map(d.changes.map((c) => [c.id, c]));
  const graph = new GraphView({
    getViz: deps.getViz, t0, onKernel: () => undefined,
    dot: {
      fill: (u) => (unitDiffStatus(u, d.status) === "same" ? null : DIFF_COLORS[unitDiffStatus(u, d.status)]),
      className: (u) => `xla-diff-${unitDiffStatus(u, d.status)}`,
    },
    onNode: (n) => {
      const c = changeOf.get(n.id);
      const which = c?.status === "removed" ? a : b;
      const src = c?.status === "removed" ? c.a! : n;
      if (src.line != null) deps.onSource(which, { cell: src.cell, line: src.line, code: src.code });
    },
    nodeDetails: (n) => {
      const c = changeOf.get(n.id);
      const s = d.status.get(n.id) ?? "same";
      return h("div", { class: `xla-lab-diff-detail xla-diff-${s}` }, h("b", null, STATUS_LABEL[s]),
        c?.status === "changed" ? h("div", null, c.fields.map((f) => `${f}: ${String((c.a as unknown as Record<string, unknown>)[f] ?? "-")} \u2192 ${String((c.b as unknown as Record<string, unknown>)[f] ?? "-")}`).join("; ")) : null);
    },
  });
  graph.setGraph(d.merged, t0);
  const counts = h("div", { class: "xla-lab-diff-counts" },
    (["added", "removed", "changed", "same"] as DiffStatus[]).map((s) =>
      h("span", { class: `xla-lab-count xla-diff-${s}`, "data-status": s }, h("span", { class: "xla-swatch", style: `background:${DIFF_COLORS[s]}` }), `${d.counts[s]} ${s}`)));
  const reason = h("section", { class: "xla-lab-reason" }, h("h4", null, "Why did B compile again?"),
    h("ul", null, cmp.reason.map((r) => h("li", null, r))));
  // the two runs' largest compiles in one line (Python's compare_line), when both runs profiled their
  // compiles (two steps of one run have the same compiles: nothing to compare)
  const compiled = a.entry.key === b.entry.key ? null : compareCompiles(a.entry.model.compile, b.entry.model.compile);
  const compileLine = compiled ? h("p", { class: "xla-lab-compile-compare", title: "the largest compile of each run: CompileTime, kernel count, the line whose kernels grew most" }, compiled) : null;
  const la = stepLabel(a), lb = stepLabel(b);
  const tabs: [string, () => HTMLElement][] = [
    ["graph diff", () => h("div", null, counts, graph.el)],
    ["HLO diff (before optimization)", () => renderHlo(cmp.hlo.before[0], cmp.hlo.before[1], { kernels: new Set(), onKernel: () => undefined, heads: [`A: ${la}`, `B: ${lb}`], diff: true })],
    ["HLO diff (after optimization)", () => renderHlo(cmp.hlo.after[0], cmp.hlo.after[1], { kernels: new Set(), onKernel: () => undefined, heads: [`A: ${la}`, `B: ${lb}`], diff: true })],
  ];
  const bar = h("div", { class: "xla-tabs", role: "tablist" });
  const body = h("div", { class: "xla-tab-body" });
  const panes = tabs.map(([name, make], i) => {
    const pane = h("div", { class: "xla-pane", "data-pane": `cmp-${i}`, hidden: i !== 0 });
    const btn = h("button", { type: "button", class: `xla-tab${i === 0 ? " xla-active" : ""}`, role: "tab", "data-tab": `cmp-${i}` }, name);
    let built = false;
    const show = () => {
      if (!built) { pane.append(make()); built = true; }
      for (const p of panes) p.pane.hidden = p.pane !== pane;
      for (const p of panes) p.btn.classList.toggle("xla-active", p.pane === pane);
    };
    btn.addEventListener("click", show);
    bar.append(btn);
    body.append(pane);
    return { pane, btn, show };
  });
  panes[0].show();
  const el = h("div", { class: "xla-panel xla-lab-compare-view", "data-same-graph": String(cmp.sameGraph) },
    h("div", { class: "xla-lab-view-head" }, h("h3", null, "Compare"),
      h("div", { class: "xla-lab-ab" }, h("span", { class: "xla-lab-a" }, `A: ${la}`), h("span", { class: "xla-lab-b" }, `B: ${lb}`))),
    reason, compileLine, bar, body);
  return { el, dispose: () => undefined };
}
