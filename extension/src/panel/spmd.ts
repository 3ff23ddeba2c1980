// The Sharding tab (graphs with an SPMD summary): the collectives XLA inserted, a mesh picture per split
// tensor (which device holds which block) and the tensors every device holds whole. Also the sharding
// block of a graph node's details. Every user string goes in as text (h / s: textContent).
import { kernelColor as hashColor } from "../core/dot";
import { fmtBytes } from "../core/format";
import {
  deviceColor, devicesLabel, groupsText, meshGrid, shardingLine, sourceText, spmdHeadline, splitTensors,
  type NodeSharding, type Spmd, type SpmdTensor,
} from "../core/spmd";
import type { SourceRef } from "../core/model";
import { h, lineLinks, s } from "./dom";

export interface ShardingViewOptions {
  /** names of the optimized module's kernels: those collectives link to the Fusion map */
  kernels: ReadonlySet<string>;
  onKernel: (name: string) => void;
  /** the colour of a kernel (the panel's kernelPalette); default kernelColor */
  color?: (kernel: string) => string;
  /** JupyterLab: source lines link to their cell */
  onSource?: (ref: SourceRef) => void;
}

const MAX_PICTURES = 24;
const MAX_CELLS = 256;

export function renderSharding(spmd: Spmd, opts: ShardingViewOptions): HTMLElement {
  const kernelColor = opts.color ?? hashColor;
  const el = h("div", { class: "xla-sharding" }, h("p", { class: "xla-spmd-headline" }, spmdHeadline(spmd)));
  el.append(h("h4", null, "Collectives"));
  if (!spmd.collectives.length) el.append(h("p", { class: "xla-muted" }, "No collectives: the partitioned module moves no data between devices."));
  else {
    el.append(h("div", { class: "xla-scroll" }, h("table", { class: "xla-table xla-collectives" },
      h("thead", null, h("tr", null, ["collective", "kind", "shape", "bytes per device", "device groups", "source lines"].map((t) => h("th", null, t)))),
      h("tbody", null, spmd.collectives.map((c) => {
        let name: Node;
        if (opts.kernels.has(c.name)) {
          const b = h("button", { type: "button", class: "xla-link xla-kernel-link", "data-kernel": c.name, title: "show in the fusion map" },
            h("span", { class: "xla-swatch", style: `background:${kernelColor(c.name)}` }), c.name);
          b.addEventListener("click", () => opts.onKernel(c.name));
          name = b;
        } else name = h("code", null, c.name);
        const where = c.lines.length ? lineLinks(c.lines, opts.onSource) : sourceText(c.lines, c.sources);
        const code = c.lines[0]?.code;
        return h("tr", { class: "xla-collective-row", "data-collective": c.name },
          h("td", null, name), h("td", null, c.kind), h("td", null, h("code", null, c.shape)),
          h("td", { class: "xla-num" }, fmtBytes(c.bytes)),
          h("td", { title: `${c.groups.length} groups of ${c.group_size} devices` }, groupsText(c.groups)),
          h("td", null, where, c.lines_inferred ? " (inferred)" : "", code ? h("code", { class: "xla-spmd-code" }, ` ${code}`) : ""));
      })))));
  }

  const { split, whole } = splitTensors(spmd);
  el.append(h("h4", null, `Split tensors (${split.length})`));
  if (!split.length) el.append(h("p", { class: "xla-muted" }, "No tensor of this graph is split across the devices."));
  const devices = new Set<number>();
  const pics = h("div", { class: "xla-mesh-list" });
  for (const t of split.slice(0, MAX_PICTURES)) {
    pics.append(tensorCard(t, opts.onSource));
    for (const b of t.blocks) for (const d of b.devices) devices.add(d);
  }
  if (split.length > MAX_PICTURES) pics.append(h("p", { class: "xla-muted" }, `\u2026 ${split.length - MAX_PICTURES} more split tensors`));
  el.append(pics);
  if (devices.size) el.append(deviceLegend([...devices].sort((a, b) => a - b)));

  if (whole.length) {
    el.append(h("h4", null, `Not split: every device holds all of it (${whole.length})`),
      h("table", { class: "xla-table xla-whole-tensors" },
        h("thead", null, h("tr", null, ["tensor", "shape", "sharding", "line"].map((t) => h("th", null, t)))),
        h("tbody", null, whole.map((t) => h("tr", { "data-tensor": t.name },
          h("td", null, t.role, " ", h("code", { class: "xla-muted" }, t.name)), h("td", null, h("code", null, t.shape)),
          h("td", { title: t.sharding }, t.layout || t.sharding), h("td", null, t.lines.length ? lineLinks(t.lines, opts.onSource) : "-"))))));
  }
  return el;
}

function tensorCard(t: SpmdTensor, onSource?: (ref: SourceRef) => void): HTMLElement {
  const line = t.lines[0];
  return h("div", { class: "xla-mesh-card", "data-tensor": t.name },
    h("div", { class: "xla-mesh-title" }, h("b", null, t.role), " ", h("code", { class: "xla-muted" }, t.name),
      line ? h("span", { class: "xla-muted" }, " \u00b7 ", lineLinks(t.lines, onSource, 1)) : ""),
    h("div", { class: "xla-mesh-shape" }, h("code", null, t.shape), " \u2192 ", h("code", null, t.per_device_shape), " per device"),
    h("div", { class: "xla-muted xla-mesh-layout" }, t.layout, " ", h("code", { class: "xla-mesh-sharding" }, t.sharding)),
    line?.code ? h("div", { class: "xla-muted" }, h("code", null, line.code)) : "",
    meshPicture(t));
}

function deviceLegend(devices: number[]): HTMLElement {
  return h("div", { class: "xla-mesh-legend" }, "devices: ", devices.map((d) =>
    h("span", { class: "xla-mesh-dev" }, h("span", { class: "xla-swatch", style: `background:${deviceColor(d)}` }), String(d))));
}

/** A grid of the tensor's blocks drawn in SVG: row / column index ranges on the axes, each cell filled
 * with a band per device that holds it and labelled with those devices. */
export function meshPicture(t: SpmdTensor, opts: { compact?: boolean } = {}): Element {
  const g = meshGrid(t);
  if (!g) return h("p", { class: "xla-muted" }, shardingLine(t));
  const nRows = g.cells.length, nCols = g.cells[0]?.length ?? 0;
  if (nRows * nCols > MAX_CELLS) return h("p", { class: "xla-muted" }, `${nRows} x ${nCols} blocks: too many to draw`);
  const labels = g.cells.flat().map((c) => devicesLabel(c.devices));
  const charW = 6.6;
  const longest = Math.max(...labels.map((l) => l.length), ...g.colRanges.map((r) => r.length));
  const cellW = Math.max(opts.compact ? 56 : 76, Math.ceil(longest * charW) + 14);
  const cellH = opts.compact ? 30 : 40;
  const left = g.rowsDim === null ? 8 : Math.ceil(Math.max(...g.rowRanges.map((r) => r.length), 4) * charW) + 12;
  const top = 32;
  const axis = g.rowsDim === null ? `dim ${g.colsDim}` : `rows: dim ${g.rowsDim}, columns: dim ${g.colsDim}`;
  const axisText = axis + (g.hiddenDims.length ? ` (dims ${g.hiddenDims.join(", ")} also split: merged)` : "");
  const width = Math.max(left + nCols * cellW + 8, Math.ceil(axisText.length * 6.2) + 8), height = top + nRows * cellH + 8;
  const svg = s("svg", { class: "xla-mesh-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `${t.shape}: ${t.layout}` });
  svg.append(s("title", null, `${t.shape} ${t.layout}`));
  svg.append(s("text", { x: 2, y: 11, class: "xla-mesh-axis" }, axisText));
  g.colRanges.forEach((r, c) => svg.append(s("text", { x: left + c * cellW + cellW / 2, y: top - 6, "text-anchor": "middle", class: "xla-mesh-range" }, r)));
  g.rowRanges.forEach((r, i) => svg.append(s("text", { x: left - 6, y: top + i * cellH + cellH / 2 + 4, "text-anchor": "end", class: "xla-mesh-range" }, r)));
  for (const row of g.cells) {
    for (const cell of row) {
      const x = left + cell.col * cellW, y = top + cell.row * cellH;
      const cg = s("g", { class: "xla-mesh-cell", "data-row": cell.row, "data-col": cell.col, "data-devices": cell.devices.join(",") });
      const band = cellW / Math.max(1, cell.devices.length);
      cell.devices.forEach((d, i) => cg.append(s("rect", { x: x + i * band, y, width: band, height: cellH, fill: deviceColor(d), "fill-opacity": 0.45 })));
      cg.append(s("rect", { x, y, width: cellW, height: cellH, class: "xla-mesh-border", fill: "none" }));
      const ranges = [g.rowsDim === null ? "" : g.rowRanges[cell.row], g.colRanges[cell.col]].filter(Boolean).join("");
      cg.append(s("title", null, `${devicesLabel(cell.devices)} hold ${t.shape.replace(/\[.*$/, "")}${ranges}`));
      cg.append(s("text", { x: x + cellW / 2, y: y + cellH / 2 + 4, "text-anchor": "middle", class: "xla-mesh-label" }, devicesLabel(cell.devices)));
      svg.append(cg);
    }
  }
  return svg;
}

/** The sharding block of a graph node's details (Graph tab). */
export function nodeShardingDetails(ns: NodeSharding): HTMLElement {
  const out = h("div", { class: "xla-node-sharding" }, h("h4", null, "sharding"));
  const t = ns.tensor;
  if (!t) {
    out.append(h("p", { class: "xla-muted" }, "A mark_sharding annotation; its layout is not in the graph's SPMD summary."));
    return out;
  }
  const row = (k: string, v: Node | string) => [h("dt", null, k), h("dd", null, v)];
  out.append(h("dl", { class: "xla-dl" },
    row("tensor", `${t.role} (${t.name})`), row("layout", t.layout || "-"),
    row("per device", t.blocks.length ? `${t.shape} \u2192 ${t.per_device_shape}` : `${t.shape} (whole)`),
    row("XLA", h("code", null, t.sharding))));
  if (ns.via === "order") out.append(h("p", { class: "xla-muted" }, "(matched to the SPMD summary by shape, in graph order)"));
  if (t.blocks.length) out.append(h("div", { class: "xla-node-mesh" }, meshPicture(t, { compact: true })));
  return out;
}
