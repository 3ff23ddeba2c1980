import { fmtSeconds } from "../core/format";
import type { Run } from "../core/model";
import { niceScale, PHASES, timelineBars } from "../core/timeline";
import { h, s } from "./dom";

const PHASE_LABEL: Record<string, string> = { trace_s: "trace", compile_s: "compile", execution_wait_s: "sync waited for execution", execute_s: "execute", transfer_s: "transfer" };

/** Stacked bars per step, runs side by side (oldest first), as an SVG plot. */
export function renderTimeline(runs: readonly Run[]): HTMLElement {
  const groups = timelineBars(runs);
  const nbars = groups.reduce((a, g) => a + g.bars.length, 0);
  if (!nbars) return h("p", { class: "xla-muted xla-empty" }, "No steps recorded.");
  let log = false;
  const wrap = h("div", { class: "xla-timeline" });
  const toggle = h("label", { class: "xla-toggle" }, h("input", { type: "checkbox" }), " log scale");
  const plotBox = h("div", { class: "xla-plot" });
  const legend = h("div", { class: "xla-mem-legend" }, PHASES.map((p) => h("span", null, h("span", { class: `xla-swatch xla-ph-${p}` }), PHASE_LABEL[p])));
  wrap.append(h("div", { class: "xla-toolbar" }, legend, toggle), plotBox);
  toggle.querySelector("input")!.addEventListener("change", (e) => { log = (e.target as HTMLInputElement).checked; draw(); });

  function draw() {
    plotBox.replaceChildren();
    const gap = 14, left = 56, top = 10, height = 200, bottom = 44;
    const barW = Math.max(3, Math.min(24, Math.floor(760 / Math.max(1, nbars))));
    const width = left + nbars * (barW + 2) + (groups.length - 1) * gap + 10;
    const maxT = Math.max(...groups.flatMap((g) => g.bars.map((b) => b.total)), 1e-6);
    const minPos = 1e-5;
    const sc = niceScale(maxT);
    const y = log
      ? (v: number) => { const lo = Math.log10(minPos), hi = Math.log10(Math.max(maxT, minPos * 10)); return top + height - (height * (Math.log10(Math.max(v, minPos)) - lo)) / (hi - lo); }
      : (v: number) => top + height - (height * v) / sc.max;
    const svg = s("svg", { class: "xla-timeline-svg", width, height: top + height + bottom, viewBox: `0 0 ${width} ${top + height + bottom}`, role: "img", "aria-label": "per-step timings" });
    const ticks = log
      ? Array.from({ length: 6 }, (_, i) => 10 ** (Math.log10(minPos) + i)).filter((v) => v <= maxT * 10)
      : Array.from({ length: Math.round(sc.max / sc.step) + 1 }, (_, i) => i * sc.step);
    for (const t of ticks) {
      const yy = y(t);
      svg.append(s("line", { x1: left - 4, x2: width, y1: yy, y2: yy, class: "xla-grid" }),
        s("text", { x: left - 6, y: yy + 3, class: "xla-axis", "text-anchor": "end" }, fmtSeconds(t)));
    }
    let x = left;
    for (const g of groups) {
      const x0 = x;
      for (const b of g.bars) {
        const gEl = s("g", { class: `xla-bar xla-cache-${b.cache}` });
        let acc = 0;
        for (const p of PHASES) {
          const v = b.values[p];
          if (v <= 0) continue;
          const y1 = y(acc + v), y0 = y(acc);
          acc += v;
          gEl.append(s("rect", { x, y: y1, width: barW, height: Math.max(0.5, y0 - y1), class: `xla-ph-${p}` }));
        }
        gEl.append(s("title", null, `${g.label}, step ${b.label} (${b.cache}): ` + PHASES.map((p) => `${PHASE_LABEL[p]} ${fmtSeconds(b.values[p])}`).join(", ")));
        if (b.cache === "miss") gEl.append(s("circle", { cx: x + barW / 2, cy: top + height + 5, r: 2, class: "xla-miss-dot" }));
        svg.append(gEl);
        x += barW + 2;
      }
      svg.append(s("text", { x: (x0 + x) / 2, y: top + height + 20, class: "xla-axis", "text-anchor": "middle" }, g.label),
        s("text", { x: (x0 + x) / 2, y: top + height + 34, class: "xla-axis xla-muted", "text-anchor": "middle" }, `${g.bars.length ? `steps ${g.bars[0].first}-${g.bars[g.bars.length - 1].last}` : "no steps"}`));
      x += gap;
    }
    svg.append(s("line", { x1: left, x2: left, y1: top, y2: top + height, class: "xla-axis-line" }));
    plotBox.append(svg);
  }
  draw();
  wrap.append(h("p", { class: "xla-muted" }, "Bars: one per step (long runs are bucketed); a dot under a bar marks a compile. Hover a bar for its numbers."));
  return wrap;
}
