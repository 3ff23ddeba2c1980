// SPMD in the panel: the JSON of xla_lab/hlo/sharding.py spmd_summary (capture.artifacts[hash].spmd),
// validated, and the pure logic of the Sharding tab: the grid of a tensor's blocks (which device holds
// which index ranges), device colours, collective rows, and which graph nodes carry a sharding.
// No DOM here.
import { fmtBytes, lineRef } from "./format";
import type { Artifacts, Graph, GraphNode, SourceRef } from "./model";

export interface SpmdBlock { tile: number[]; ranges: [number, number][]; devices: number[] }

export interface SpmdTensor {
  name: string;            // the HLO instruction (pre-optimization module)
  role: string;            // "input N" | "annotation"
  shape: string;           // global (logical) shape
  sharding: string;        // XLA's text, e.g. {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  layout: string;          // "split 2 x 1, each block on 2 devices" | "replicated" | ...
  per_device_shape: string;
  blocks: SpmdBlock[];     // empty when the tensor is not split
  lines: SourceRef[];
}

export interface SpmdCollective {
  name: string; kind: string; shape: string; bytes: number; groups: number[][]; group_size: number;
  computation: string; lines: SourceRef[]; lines_inferred: boolean; sources: string[];
}

export interface Spmd {
  devices: number; tensors: SpmdTensor[]; collectives: SpmdCollective[]; memory_per_device: boolean;
}

export class SpmdError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SpmdError";
  }
}

type Obj = Record<string, unknown>;

function bad(path: string, what: string, got: unknown): never {
  const kind = got === null ? "null" : Array.isArray(got) ? "array" : typeof got;
  throw new SpmdError(`invalid SPMD summary: ${path} must be ${what} (got ${kind})`);
}
function obj(v: unknown, p: string): Obj {
  if (typeof v !== "object" || v === null || Array.isArray(v)) bad(p, "an object", v);
  return v as Obj;
}
function arr(v: unknown, p: string): unknown[] {
  if (!Array.isArray(v)) bad(p, "an array", v);
  return v;
}
function int(v: unknown, p: string): number {
  if (typeof v !== "number" || !Number.isFinite(v)) bad(p, "a number", v);
  return v;
}
function str(v: unknown, p: string): string {
  if (typeof v !== "string") bad(p, "a string", v);
  return v;
}
const ints = (v: unknown, p: string) => arr(v, p).map((x, i) => int(x, `${p}[${i}]`));

function lines(v: unknown, p: string): SourceRef[] {
  return arr(v ?? [], p).map((l, i) => {
    const o = obj(l, `${p}[${i}]`);
    return { ...o, cell: o.cell == null ? null : int(o.cell, `${p}[${i}].cell`), line: int(o.line, `${p}[${i}].line`),
      code: o.code == null ? null : str(o.code, `${p}[${i}].code`) } as SourceRef;
  });
}

/** The artifact's `spmd` entry: null when absent (a graph that is neither partitioned nor annotated). */
export function parseSpmd(raw: unknown, path = "spmd"): Spmd | null {
  if (raw == null) return null;
  const o = obj(raw, path);
  const tensors = arr(o.tensors ?? [], `${path}.tensors`).map((t, i) => {
    const p = `${path}.tensors[${i}]`;
    const to = obj(t, p);
    return {
      name: str(to.name, `${p}.name`), role: str(to.role ?? "", `${p}.role`), shape: str(to.shape ?? "", `${p}.shape`),
      sharding: str(to.sharding ?? "", `${p}.sharding`), layout: str(to.layout ?? "", `${p}.layout`),
      per_device_shape: str(to.per_device_shape ?? to.shape ?? "", `${p}.per_device_shape`),
      blocks: arr(to.blocks ?? [], `${p}.blocks`).map((b, j) => {
        const bp = `${p}.blocks[${j}]`;
        const bo = obj(b, bp);
        const tile = ints(bo.tile, `${bp}.tile`);
        const ranges = arr(bo.ranges ?? [], `${bp}.ranges`).map((r, k) => {
          const pair = ints(r, `${bp}.ranges[${k}]`);
          if (pair.length !== 2) bad(`${bp}.ranges[${k}]`, "a [start, stop] pair", r);
          return [pair[0], pair[1]] as [number, number];
        });
        return { tile, ranges, devices: ints(bo.devices, `${bp}.devices`) };
      }),
      lines: lines(to.lines, `${p}.lines`),
    };
  });
  const collectives = arr(o.collectives ?? [], `${path}.collectives`).map((c, i) => {
    const p = `${path}.collectives[${i}]`;
    const co = obj(c, p);
    const groups = arr(co.groups ?? [], `${p}.groups`).map((g, j) => ints(g, `${p}.groups[${j}]`));
    return {
      name: str(co.name, `${p}.name`), kind: str(co.kind ?? "", `${p}.kind`), shape: str(co.shape ?? "", `${p}.shape`),
      bytes: int(co.bytes ?? 0, `${p}.bytes`), groups,
      group_size: int(co.group_size ?? Math.max(0, ...groups.map((g) => g.length)), `${p}.group_size`),
      computation: str(co.computation ?? "", `${p}.computation`), lines: lines(co.lines, `${p}.lines`),
      lines_inferred: Boolean(co.lines_inferred), sources: arr(co.sources ?? [], `${p}.sources`).map((s, j) => str(s, `${p}.sources[${j}]`)),
    };
  });
  return { devices: int(o.devices ?? 1, `${path}.devices`), tensors, collectives, memory_per_device: Boolean(o.memory_per_device) };
}

/** The SPMD summary of a graph's artifacts (null when none). Throws SpmdError when malformed. */
export function spmdOf(art: Artifacts | null | undefined): Spmd | null {
  return art ? parseSpmd(art.spmd) : null;
}

// --- the mesh picture ----------------------------------------------------------------------------

export interface MeshCell {
  row: number; col: number;
  /** every device holding (part of) this cell, ascending */
  devices: number[];
  /** the blocks drawn in this cell (more than one when a third dimension is split too) */
  blocks: number;
}

export interface MeshGrid {
  /** tensor dimension along the rows (null: a 1-D tensor, one row) and along the columns */
  rowsDim: number | null; colsDim: number;
  /** "[start:stop]" of each row / column along its dimension */
  rowRanges: string[]; colRanges: string[];
  cells: MeshCell[][];   // [row][col]
  /** split dimensions that are not drawn (their blocks are merged into the cells) */
  hiddenDims: number[];
  devices: number[];     // every device that holds a block, ascending
}

const rangeText = (r: [number, number] | undefined) => (r ? `[${r[0]}:${r[1]}]` : "");

/** The grid of a split tensor's blocks, rows x columns, each cell with the devices that hold it. 2-D
 * tensors keep matrix orientation (rows: dim 0, columns: dim 1); higher ranks draw the first two split
 * dimensions; 1-D tensors are one row. null for a tensor with no blocks (not split). */
export function meshGrid(t: SpmdTensor): MeshGrid | null {
  if (!t.blocks.length) return null;
  const ndim = t.blocks[0].tile.length;
  if (ndim === 0) return null;
  const counts = Array.from({ length: ndim }, (_, d) => Math.max(...t.blocks.map((b) => b.tile[d] ?? 0)) + 1);
  const split = counts.map((c, d) => (c > 1 ? d : -1)).filter((d) => d >= 0);
  let rowsDim: number | null, colsDim: number;
  if (ndim === 1) { rowsDim = null; colsDim = 0; }
  else if (split.length >= 2) { rowsDim = split[0]; colsDim = split[1]; }
  else if (split.length === 1) {
    const d = split[0];
    [rowsDim, colsDim] = d === ndim - 1 ? [d - 1, d] : [d, d + 1];
  } else { rowsDim = ndim - 2; colsDim = ndim - 1; }
  const nRows = rowsDim === null ? 1 : counts[rowsDim];
  const nCols = counts[colsDim];
  const sets = Array.from({ length: nRows }, () => Array.from({ length: nCols }, () => ({ devices: new Set<number>(), blocks: 0 })));
  const rowRanges: string[] = Array(nRows).fill("");
  const colRanges: string[] = Array(nCols).fill("");
  for (const b of t.blocks) {
    const r = rowsDim === null ? 0 : b.tile[rowsDim];
    const c = b.tile[colsDim];
    const cell = sets[r]?.[c];
    if (!cell) continue;
    for (const d of b.devices) cell.devices.add(d);
    cell.blocks++;
    if (rowsDim !== null && !rowRanges[r]) rowRanges[r] = rangeText(b.ranges[rowsDim]);
    if (!colRanges[c]) colRanges[c] = rangeText(b.ranges[colsDim]);
  }
  const all = new Set<number>();
  const cells = sets.map((row, r) => row.map((x, c) => {
    for (const d of x.devices) all.add(d);
    return { row: r, col: c, devices: [...x.devices].sort((a, b) => a - b), blocks: x.blocks };
  }));
  const hiddenDims = split.filter((d) => d !== rowsDim && d !== colsDim);
  return { rowsDim, colsDim, rowRanges, colRanges, cells, hiddenDims, devices: [...all].sort((a, b) => a - b) };
}

const DEVICE_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/** A stable colour per device id (the same device has the same colour in every picture). */
export function deviceColor(device: number): string {
  if (device >= 0 && device < DEVICE_PALETTE.length) return DEVICE_PALETTE[device];
  const hue = Math.round((device * 137.508) % 360);
  return `hsl(${hue}, 55%, 55%)`;
}

/** "dev 0,2" */
export function devicesLabel(devices: readonly number[]): string {
  return devices.length ? `dev ${devices.join(",")}` : "no device";
}

/** The tensor's sharding in one line: "f32[16,32] -> f32[8,32] per device (split 2 x 1, each block on 2 devices)". */
export function shardingLine(t: SpmdTensor): string {
  if (!t.blocks.length) return `${t.shape}: ${t.layout || "not split"} (every device holds all of it)`;
  return `${t.shape} \u2192 ${t.per_device_shape} per device (${t.layout})`;
}

// --- collectives ---------------------------------------------------------------------------------

/** "{0,1} {2,3}", the first `max` groups. */
export function groupsText(groups: readonly number[][], max = 4): string {
  const shown = groups.slice(0, max).map((g) => `{${g.join(",")}}`).join(" ");
  return groups.length > max ? `${shown} \u2026 (${groups.length} groups)` : shown || "-";
}

/** "[1]:3, [1]:5" (or the library frames when no cell line is known). */
export function sourceText(lines: readonly SourceRef[], sources: readonly string[] = [], max = 3): string {
  if (lines.length) {
    const shown = lines.slice(0, max).map((l) => lineRef(l)).join(", ");
    return lines.length > max ? `${shown} +${lines.length - max}` : shown;
  }
  return sources.join(", ") || "no source line";
}

/** The headline of the Sharding tab and the Summary. */
export function spmdHeadline(s: Spmd): string {
  const n = s.collectives.length;
  const total = s.collectives.reduce((a, c) => a + c.bytes, 0);
  return `SPMD over ${s.devices} devices: ${n} collective${n === 1 ? "" : "s"} moving ${fmtBytes(total)} per device per step`;
}

/** Split tensors first (in summary order), then the ones every device holds whole. */
export function splitTensors(s: Spmd): { split: SpmdTensor[]; whole: SpmdTensor[] } {
  return { split: s.tensors.filter((t) => t.blocks.length), whole: s.tensors.filter((t) => !t.blocks.length) };
}

// --- graph nodes with a sharding -----------------------------------------------------------------

export const SHARDING_OP = "xla::custom_sharding";

export interface NodeSharding {
  tensor: SpmdTensor | null;
  /** how the node was matched to the tensor: through the HLO names in the IR text ("hlo"), by shape in
   * graph order ("order", annotations only), or not at all (an annotation node with no summary entry) */
  via: "hlo" | "order" | "none";
}

const NODE_HLO = /^\s*%(\d+) = .*?, hlo=([\w.\-,]+)/;

/** IR node id -> the pre-optimization HLO instructions it lowered to, from the artifact's IR text
 * (only graphs rebuilt from the HLO carry `hlo=` names; xla_lab/capture/lowered_graph.py). */
export function hloNamesOfNodes(irText: string | null | undefined): Map<number, string[]> {
  const out = new Map<number, string[]>();
  if (!irText) return out;
  for (const line of irText.split("\n")) {
    const m = NODE_HLO.exec(line);
    if (m) out.set(Number(m[1]), m[2].split(",").filter(Boolean));
  }
  return out;
}

const bareShape = (s: string | null | undefined) => (s ?? "").replace(/\{[^}]*\}\s*$/, "").trim();

/** The graph nodes that carry a sharding: graph inputs (parameters) and `mark_sharding` annotations,
 * matched to the SPMD summary's tensors through the HLO names of the IR text; annotation nodes of a
 * graph without those names are matched by shape in graph order, and inputs are then not matched. */
export function nodeShardings(graph: Graph | null | undefined, spmd: Spmd | null, irText?: string | null): Map<number, NodeSharding> {
  const out = new Map<number, NodeSharding>();
  if (!graph || !spmd) return out;
  const byName = new Map(spmd.tensors.map((t) => [t.name, t]));
  const names = hloNamesOfNodes(irText);
  const used = new Set<SpmdTensor>();
  for (const n of graph.nodes) {
    for (const name of names.get(n.id) ?? []) {
      const t = byName.get(name);
      if (t && !used.has(t)) { out.set(n.id, { tensor: t, via: "hlo" }); used.add(t); break; }
    }
  }
  const annotations = spmd.tensors.filter((t) => t.role === "annotation" && !used.has(t));
  const nodes = [...graph.nodes].sort((a, b) => a.id - b.id);
  for (const n of nodes) {
    if (n.op !== SHARDING_OP || out.has(n.id)) continue;
    const i = annotations.findIndex((t) => bareShape(t.shape) === bareShape(n.shape));
    if (i >= 0) { out.set(n.id, { tensor: annotations[i], via: "order" }); annotations.splice(i, 1); }
    else out.set(n.id, { tensor: null, via: "none" });
  }
  return out;
}

/** Whether a node is a sharding annotation. */
export const isShardingNode = (n: GraphNode) => n.op === SHARDING_OP;
