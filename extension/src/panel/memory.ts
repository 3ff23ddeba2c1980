import { fmtBytes } from "../core/format";
import type { Memory, SourceRef } from "../core/model";
import { h, lineLinks } from "./dom";

/** `devices`: the SPMD device count when the figures are per device (the partitioned module), else null. */
export function renderMemory(mem: Memory | null | undefined, devices: number | null = null, onSource?: (ref: SourceRef) => void): HTMLElement {
  if (!mem || (mem.peak_bytes == null && !mem.largest?.length)) {
    return h("p", { class: "xla-muted xla-empty" }, "No memory report for this graph (XLA's buffer assignment was not dumped).");
  }
  const parts: [string, number | undefined, string][] = [
    ["parameters", mem.parameter_bytes, "xla-mem-param"], ["outputs", mem.output_bytes, "xla-mem-out"],
    ["temporaries", mem.temp_bytes, "xla-mem-temp"], ["constants", mem.constant_bytes, "xla-mem-const"],
  ];
  const total = parts.reduce((a, [, v]) => a + (v ?? 0), 0) || 1;
  const bar = h("div", { class: "xla-mem-bar", role: "img", "aria-label": "memory by kind" },
    parts.filter(([, v]) => v).map(([label, v, cls]) =>
      h("div", { class: `xla-mem-seg ${cls}`, style: `width:${((100 * (v ?? 0)) / total).toFixed(2)}%`, title: `${label}: ${fmtBytes(v)}` })));
  const legend = h("div", { class: "xla-mem-legend" }, parts.map(([label, v, cls]) =>
    h("span", null, h("span", { class: `xla-swatch ${cls}` }), `${label} ${fmtBytes(v ?? 0)}`)));
  const out = h("div", { class: "xla-memory" },
    h("div", { class: "xla-stats" }, h("div", { class: "xla-stat" }, h("div", { class: "xla-stat-value" }, fmtBytes(mem.peak_bytes)), h("div", { class: "xla-stat-label" }, devices ? `peak per device (${devices} devices)` : "peak")),
      h("div", { class: "xla-stat" }, h("div", { class: "xla-stat-value" }, String(mem.allocations ?? "-")), h("div", { class: "xla-stat-label" }, "allocations"))),
    bar, legend);
  if (devices) out.prepend(h("p", { class: "xla-mem-per-device" }, `Memory per device (${devices} devices): each figure is what one device holds of the partitioned module.`));
  const largest = mem.largest ?? [];
  if (largest.length) {
    const maxB = Math.max(...largest.map((b) => b.bytes), 1);
    out.append(h("h4", null, "Largest buffers"), h("table", { class: "xla-table xla-buffers" },
      h("thead", null, h("tr", null, ["size", "", "kind", "instruction", "shape", "line"].map((t) => h("th", null, t)))),
      h("tbody", null, largest.map((b) => {
        const src = b.source;
        const where = src ? lineLinks([src], onSource) : "-";
        return h("tr", null, h("td", { class: "xla-num" }, fmtBytes(b.bytes)),
          h("td", null, h("div", { class: "xla-hbar", style: `width:${Math.max(2, (100 * b.bytes) / maxB).toFixed(1)}px` })),
          h("td", null, b.kind + (b.parameter != null ? ` ${b.parameter}` : "")), h("td", null, h("code", null, b.instruction ?? "-")),
          h("td", null, h("code", null, b.shape ?? "")), h("td", null, where, src?.code ? h("code", null, ` ${src.code}`) : ""));
      }))));
  }
  return out;
}
