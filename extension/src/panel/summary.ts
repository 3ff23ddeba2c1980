import { fmtSeconds } from "../core/format";
import type { PanelModel, RankRow, SourceRef } from "../core/model";
import { clipped, clippedList, h, lineLink } from "./dom";

/** `onSource`: JupyterLab, a step's line links to the cell (the capture's own: its prompt). */
export function renderSummary(m: PanelModel, onSource?: (ref: SourceRef) => void): HTMLElement {
  const s = m.summary;
  const stat = (label: string, value: string, cls = "") => h("div", { class: `xla-stat ${cls}` }, h("div", { class: "xla-stat-value" }, value), h("div", { class: "xla-stat-label" }, label));
  const stats = h("div", { class: "xla-stats" },
    stat("steps", String(s.steps)), stat("compiled", String(s.compiles), s.compiles ? "xla-miss" : ""),
    stat("cache hits", String(s.cache_hits), "xla-hit"), stat("precompiled", String(s.precompiled)),
    stat("trace", fmtSeconds(s.trace_s)), stat("compile", fmtSeconds(s.compile_s)),
    stat("execute", fmtSeconds(s.execute_s)), stat("transfer", fmtSeconds(s.transfer_s)),
    // (from a millisecond, as the text views say it: view/compile_summary.py WAIT_SHOWN_FROM_NS)
    s.execution_wait_s >= 1e-3 ? stat("syncs waited for execution", fmtSeconds(s.execution_wait_s), "xla-wait") : null);
  const out = h("div", { class: "xla-summary" }, stats);
  if (m.capture.error) out.append(h("div", { class: "xla-warning xla-error" }, clipped(`The cell raised: ${m.capture.error}`, 2000)));
  if (s.warnings.length) {
    out.append(h("h4", null, `Warnings (${s.warnings.length})`),
      clippedList(h("ul", { class: "xla-warnings" }), s.warnings, (w) => h("li", { class: "xla-warning" }, clipped(w, 600))));
  }
  if (s.recompiles.length) {
    out.append(h("h4", null, "Recompile reasons"),
      clippedList(h("ul", { class: "xla-recompiles" }), s.recompiles, (r) => h("li", null, h("b", null, `step ${r.step}: `), clipped(r.reason, 1500)), 50));
  }
  if (s.ranks.length) out.append(h("h4", null, `Ranks (${s.ranks.length})`), renderRanks(s.ranks));
  // the rows as the Python side folded them (an older saved output: one per step)
  const rows = s.rows;
  const shown = rows.slice(0, 200);
  const table = h("table", { class: "xla-table xla-steps" },
    h("thead", null, h("tr", null, ["step", "cache", "compile", "execute", "cause / line"].map((t) => h("th", null, t)))),
    h("tbody", null, shown.map((r) => h("tr", { class: `xla-cache-${r.cache}`, "data-step": String(r.first) },
      h("td", null, r.steps),
      h("td", null, r.cache), h("td", { class: "xla-num" }, fmtSeconds(r.compile_s)), h("td", { class: "xla-num" }, fmtSeconds(r.execute_s)),
      h("td", null, clipped(r.cause, 300), r.ref ? h("span", null, " @ ", lineLink(r.ref, onSource)) : "",
        r.ref?.code ? h("code", null, clipped(`: ${r.ref.code}`, 200)) : "")))));
  out.append(h("h4", null, "Steps"), table);
  if (rows.length > shown.length) out.append(h("p", { class: "xla-muted" }, `${rows.length - shown.length} more rows`));
  return out;
}

/** The ranks of the cell's multi-process launches side by side (a failed rank is marked). */
export function renderRanks(ranks: RankRow[]): HTMLElement {
  const launches = new Set(ranks.map((r) => r.launch)).size;
  const head = ["rank", "device", "steps", "compiled", "compile", "in steps", "mean step", "status", "line"];
  if (launches > 1) head.unshift("launch");
  return h("table", { class: "xla-table xla-ranks" },
    h("thead", null, h("tr", null, head.map((t) => h("th", null, t)))),
    h("tbody", null, ranks.slice(0, 512).map((r) => h("tr", { class: r.status === "ok" ? "" : "xla-miss" },
      launches > 1 ? h("td", null, String(r.launch)) : "",
      h("td", null, String(r.rank)), h("td", null, r.device), h("td", { class: "xla-num" }, String(r.steps)),
      h("td", { class: "xla-num" }, String(r.compiled)), h("td", { class: "xla-num" }, fmtSeconds(r.compile_s)),
      h("td", { class: "xla-num" }, fmtSeconds(r.step_s)), h("td", { class: "xla-num" }, fmtSeconds(r.mean_step_s)),
      h("td", null, r.status), h("td", null, h("code", null, clipped(r.line, 200)))))));
}
