// The Profile tab (cells run with %%xla --profile): measured time per kernel beside its estimated flops and
// bytes and its roofline reading, per cell line and model line (shaded by time), per aten op, per step, a
// timeline of the profiler's host and device lanes, and the comparison with the cell's previous profiled run.
import { kernelColor as hashColor } from "../core/dot";
import { fmtBytes, fmtCount, fmtNs, fmtShare, lineRef } from "../core/format";
import type { Profile, ProfileLine, SourceRef } from "../core/model";
import { breakable, h, kernelLineLinks, s } from "./dom";

export interface ProfileOptions { onKernel?: (name: string) => void; onSource?: (ref: SourceRef) => void; color?: (kernel: string) => string }
export type TimelineRow = [string, string, number, number, number];
const MAX_TIMELINE_EVENTS = 5000;

/** a share (0..1) as a small horizontal bar */
export function bar(share: number): HTMLElement {
  return h("span", { class: "xla-share", title: fmtShare(share) }, h("span", { class: "xla-share-fill", style: `width:${Math.max(0, Math.min(100, share * 100)).toFixed(1)}%` }));
}

export function renderProfile(p: Profile, timeline: readonly TimelineRow[], opts: ProfileOptions = {}): HTMLElement {
  const el = h("div", { class: "xla-profile" });
  const busy = p.steps.reduce((a, st) => a + st.busy_ns, 0);
  const idle = p.steps.slice(1).reduce((a, st) => a + st.idle_before_ns, 0);
  const windowed = p.recorded_steps != null && p.cell_steps != null && p.recorded_steps < p.cell_steps;
  const computing = p.steps.every((st) => st.compute_ns != null) ? p.steps.reduce((a, st) => a + (st.compute_ns ?? 0), 0) : null;
  const leftOut = p.steps.reduce((a, st) => a + (st.left_out_ns ?? 0), 0);
  el.append(h("p", null, `Measured: ${p.steps.length} executions` +
    (computing != null ? `, kernels computing ${fmtNs(computing)}` + (leftOut ? ` (+${fmtNs(leftOut)} left out: one-time warm-ups, runs beside a compile)` : "") : "") +
    `, device busy ${fmtNs(busy)}` +
    (p.steps.length ? ` (${fmtNs(busy / p.steps.length)} per step)` : "") + `, device idle between steps ${fmtNs(idle)} (waiting for Python, input or compiles).` +
    (windowed ? ` The session recorded the cell's first ${p.recorded_steps} of ${p.cell_steps} steps (--profile-steps).` : "")));
  el.append(h("p", { class: "xla-muted" }, p.peaks
    ? `Roofline against ${fmtCount(p.peaks.flops_per_s, "FLOP/s")} and ${fmtBytes(p.peaks.bytes_per_s)}/s (${p.peaks.source}). Bytes are the HLO's operand and result sizes: caches are ignored, so small kernels can beat the memory roof.`
    : "No roofline: this device's peaks are unknown (set XLA_LAB_PEAKS=FLOPS,BYTES)."));
  if (p.compare) el.append(compareBlock(p));
  el.append(h("h4", null, "Kernels by measured time"), kernelsTable(p, opts));
  el.append(linesBlock("Time per cell line", p.lines, opts), linesBlock("Time per model line (innermost outside torch)", p.model_lines, opts));
  el.append(h("h4", null, "Time per aten op"), h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-profile-ops" },
    h("tr", null, h("th", null, "aten op"), h("th", null, "time"), h("th", null, "share")),
    p.ops.slice(0, 40).map((o) => h("tr", null, h("td", null, h("code", null, o.op)), h("td", { class: "xla-num" }, fmtNs(o.total_ns)), h("td", { class: "xla-nowrap" }, bar(o.share), " ", fmtShare(o.share)))))));
  el.append(h("h4", null, "Steps"), stepsTable(p));
  el.append(h("h4", null, "Timeline"), renderLanes(timeline, opts.color));
  return el;
}

function kernelsTable(p: Profile, opts: ProfileOptions): HTMLElement {
  const kernelColor = opts.color ?? hashColor;
  // Eight columns, so the table fits a notebook's cell panel: the kind goes under the name, the
  // estimates share a cell, and so do the roofline's three figures.
  const titles: Record<string, string> = {
    runs: "the runs its time is made of (a one-time warm-up and runs beside a compile are left out, and said)",
    total: "its compute time: each instant of its runs shared with the kernels of the same execution running beside it",
    "a run": "a typical run's duration, kernels beside it or not: the median of its runs (older outputs: the mean); the roofline's rates are made of it",
  };
  const head = h("tr", null, ["kernel", "runs", "total", "a run", "share", "estimated", "roofline", "lines"].map((c) => h("th", titles[c] ? { title: titles[c] } : null, c)));
  const rows = p.kernels.map((k) => {
    const achieved = k.flops_per_s ? fmtCount(k.flops_per_s, "FLOP/s") : k.bytes_per_s != null ? `${fmtBytes(k.bytes_per_s)}/s` : "-";
    const tr = h("tr", { class: "xla-kernel-row", "data-kernel": k.name },
      h("td", null, h("span", { class: "xla-swatch", style: `background:${kernelColor(k.name)}` }), h("code", null, breakable(k.name)),
        h("div", { class: "xla-muted xla-kernel-kind" }, k.kind)),
      h("td", { class: "xla-num", title: k.left_out_text ? `${k.runs ?? k.count} runs recorded; ${k.left_out_text}` : "runs recorded" },
        String(k.count), k.left_out_text ? h("div", { class: "xla-muted xla-left-out" }, k.left_out_text) : null),
      h("td", { class: "xla-num" }, fmtNs(k.total_ns)),
      h("td", { class: "xla-num" }, fmtNs(k.median_ns ?? k.mean_ns)), h("td", { class: "xla-nowrap" }, bar(k.share), " ", fmtShare(k.share)),
      h("td", { class: "xla-num", title: "estimated from the HLO: floating-point operations, bytes read and written" },
        fmtCount(k.flops, "FLOP"), h("br"), fmtBytes(k.bytes)),
      h("td", { class: "xla-num", title: "achieved rate, and its share of the roof the kernel sits under at its arithmetic intensity" },
        achieved, h("br"), k.roof_text
          ? h("span", { class: `xla-bound-${k.bound ?? "none"}` }, k.roof_text)
          : [fmtShare(k.roof_share), " ", h("span", { class: `xla-bound-${k.bound ?? "none"}` }, k.bound ?? "-")]),
      h("td", null, kernelLineLinks(k, opts.onSource)));
    if (opts.onKernel) tr.addEventListener("click", () => opts.onKernel!(k.name));
    return tr;
  });
  const wrap = h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-profile-kernels" }, h("thead", null, head), h("tbody", null, rows)));
  if (p.kernels_more) wrap.append(h("p", { class: "xla-muted" }, `... ${p.kernels_more} more kernels, each under the last one listed.`));
  return wrap;
}

function linesBlock(title: string, lines: readonly ProfileLine[], opts: ProfileOptions): HTMLElement {
  const top = lines.length ? lines[0].share : 1;
  const rows = lines.slice(0, 60).map((ln) => {
    const shade = top > 0 ? ln.share / top : 0;
    // (a row with no line, the kernels without one, keeps the Python side's words for it)
    const label = h("code", { class: "xla-line-ref" }, ln.line != null ? lineRef(ln) : ln.label || "-");
    const tr = h("tr", { class: "xla-profile-line", style: `background:rgba(214,69,65,${(0.35 * shade).toFixed(3)})` },
      h("td", null, label), h("td", { class: "xla-num" }, fmtNs(ln.total_ns)), h("td", { class: "xla-nowrap" }, bar(ln.share), " ", fmtShare(ln.share)),
      h("td", null, h("code", null, (ln.code ?? "").trim())), h("td", null, ln.kernels.slice(0, 4).join(", ") + (ln.kernels.length > 4 ? ` +${ln.kernels.length - 4}` : "")));
    if (opts.onSource && ln.line != null && (ln.cell != null || ln.file)) {
      label.classList.add("xla-link");
      label.addEventListener("click", () => opts.onSource!({ cell: ln.cell, line: ln.line!, code: ln.code, file: ln.file ?? undefined }));
    }
    return tr;
  });
  return h("div", null, h("h4", null, title), h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-profile-lines" },
    h("tr", null, h("th", null, "line"), h("th", null, "time"), h("th", null, "share"), h("th", null, "code"), h("th", null, "kernels")), rows)));
}

function stepsTable(p: Profile): HTMLElement {
  const shown = p.steps.slice(0, 50);
  const t = h("table", { class: "xla-table xla-profile-steps" },
    h("tr", null, ["step", "cache", "computing", "device busy", "span", "kernels (sum)", "idle before", "host: sync", "compile", "transfers", "ExecuteTime"].map((c) => h("th", null, c))),
    shown.map((st) => h("tr", null, h("td", null, String(st.step)), h("td", { class: `xla-cache-${st.cache}` }, st.cache),
      h("td", { class: "xla-num" }, st.compute_ns == null ? "-" : fmtNs(st.compute_ns)), h("td", { class: "xla-num" }, fmtNs(st.busy_ns)), h("td", { class: "xla-num" }, fmtNs(st.span_ns)), h("td", { class: "xla-num" }, fmtNs(st.kernel_ns)),
      h("td", { class: "xla-num" }, fmtNs(st.idle_before_ns)), h("td", { class: "xla-num" }, fmtNs(st.host.sync_ns ?? 0)),
      h("td", { class: "xla-num" }, fmtNs(st.host.compile_ns ?? 0)), h("td", { class: "xla-num" }, fmtNs((st.host.to_device_ns ?? 0) + (st.host.from_device_ns ?? 0))),
      h("td", { class: "xla-num" }, st.execute_s == null ? "-" : fmtNs(st.execute_s * 1e9)))));
  const out = h("div", { class: "xla-scroll" }, t);
  out.append(h("p", { class: "xla-muted" }, "Computing: the step's kernels' compute time, each instant shared by the kernels running then, without one-time warm-ups and runs beside a compile; it is at most ExecuteTime. Device busy: the union of the step's kernel times (XLA's CPU client runs independent kernels in parallel, so their sum can be larger). ExecuteTime (torch_xla's metric, dispatch to outputs ready) also counts the dispatch and any wait behind earlier executions." +
    (p.steps.length > shown.length ? ` ${p.steps.length - shown.length} more steps not listed.` : "")));
  return out;
}

/** The profiler's lanes (threads) over time: one row per lane, one rectangle per event. */
export function renderLanes(rows: readonly TimelineRow[], kernelColor: (kernel: string) => string = hashColor): HTMLElement {
  if (!rows.length) return h("p", { class: "xla-muted xla-empty" }, "No events recorded.");
  const shown = rows.slice(0, MAX_TIMELINE_EVENTS);
  const lanes: string[] = [];
  for (const r of shown) if (!lanes.includes(r[0])) lanes.push(r[0]);
  const t1 = Math.max(...shown.map((r) => r[2] + r[3]), 1);
  const left = 180, width = 900, laneH = 16, top = 4;
  const x = (ns: number) => left + (width * ns) / t1;
  const svg = s("svg", { class: "xla-lanes-svg", width: left + width + 10, height: top + lanes.length * laneH + 20, role: "img", "aria-label": "profiler timeline" });
  lanes.forEach((lane, i) => svg.append(s("text", { x: 4, y: top + i * laneH + 12, class: "xla-axis" }, lane.length > 28 ? lane.slice(0, 27) + "\u2026" : lane)));
  for (const [lane, name, start, dur, step] of shown) {
    const i = lanes.indexOf(lane);
    const rect = s("rect", { x: x(start), y: top + i * laneH + 2, width: Math.max(0.5, x(start + dur) - x(start)), height: laneH - 4,
      fill: step >= 0 ? kernelColor(name) : "#8a8f98" }, s("title", null, `${name}${step >= 0 ? ` (step ${step})` : ""}: ${fmtNs(dur)}`));
    svg.append(rect);
  }
  svg.append(s("text", { x: left, y: top + lanes.length * laneH + 14, class: "xla-axis" }, "0"),
    s("text", { x: left + width, y: top + lanes.length * laneH + 14, class: "xla-axis", "text-anchor": "end" }, fmtNs(t1)));
  const wrap = h("div", { class: "xla-scroll" }, svg);
  if (rows.length > shown.length) wrap.append(h("p", { class: "xla-muted" }, `first ${shown.length} of ${rows.length} events shown; %xla profile export DIR writes them all for Perfetto.`));
  return wrap;
}

function compareBlock(p: Profile): HTMLElement {
  const c = p.compare!;
  const ratio = c.before_step_ns ? c.after_step_ns / c.before_step_ns : null;
  const verdict = ratio == null ? "" : ratio < 0.97 ? "faster" : ratio > 1.03 ? "slower" : "about the same";
  const rows = c.rows.slice(0, 15).map((r) => {
    const change = r.before_mean_ns && r.after_mean_ns ? r.after_mean_ns / r.before_mean_ns : null;
    return h("tr", null, h("td", null, h("code", null, r.name)), h("td", { class: "xla-num" }, fmtNs(r.before_mean_ns)), h("td", { class: "xla-num" }, fmtNs(r.after_mean_ns)),
      h("td", { class: change == null ? "" : change < 0.97 ? "xla-faster" : change > 1.03 ? "xla-slower" : "" }, change == null ? (r.before_mean_ns == null ? "new" : "gone") : `${change.toFixed(2)}x`));
  });
  return h("div", { class: "xla-profile-compare" },
    h("h4", null, `Compared with run [${c.with ?? "?"}]: device busy per step ${fmtNs(c.before_step_ns)} \u2192 ${fmtNs(c.after_step_ns)}` + (verdict ? ` (${verdict})` : "")),
    h("div", { class: "xla-scroll" }, h("table", { class: "xla-table" }, h("tr", null, h("th", null, "kernel"), h("th", null, "mean before"), h("th", null, "mean after"), h("th", null, "change")), rows)));
}
