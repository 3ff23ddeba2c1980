// Collapse a large graph into groups (module scope, then source line, then chunks) and expand groups
// on demand, so that no more than a bounded number of units is ever laid out at once.
import { lineRangeRef } from "./format";
import type { Graph, GraphNode } from "./model";

export interface CollapseOptions {
  /** Graphs with at most this many nodes are shown whole. */
  threshold: number;
  /** Never show more units (nodes + groups) than this; expanding past it collapses other groups. */
  maxVisible: number;
  /** A group is split into sub-groups instead of single nodes when it has more members than this. */
  leafLimit: number;
  /** At most this many sub-groups per group (beyond, members are chunked in order). */
  maxChildren: number;
  /** Groups with fewer members than this are shown as their nodes. */
  minGroup: number;
  /**
   * In graphs over the threshold, edges out of a node feeding more than this many nodes (a shared
   * constant or input) are not laid out: they span the whole graph and make Graphviz's layout
   * slow. The node lists its uses instead (VisibleGraph.hubs).
   */
  hubDegree: number;
}

export const DEFAULT_COLLAPSE: CollapseOptions = { threshold: 300, maxVisible: 400, leafLimit: 120, maxChildren: 60, minGroup: 4, hubDegree: 16 };

export interface GroupUnit {
  kind: "group";
  id: string; // stable path id, e.g. "s:encoder.layer1/l:12"
  label: string;
  level: number;
  members: number[]; // node ids
  kernel: string | null; // the kernel most members ended in
  ops: [string, number][]; // most common ops, most frequent first
  lines: [number, number] | null; // min / max source line
  cell: number | null; // the cell of those lines, when all members with a line share one (else null: `[?]`)
}
export interface NodeUnit { kind: "node"; id: string; node: GraphNode }
export type Unit = GroupUnit | NodeUnit;

export interface VisibleGraph {
  units: Unit[];
  /** unit index -> unit index, with the number of node edges each stands for */
  edges: { from: number; to: number; count: number }[];
  /** node id -> index of the unit that shows it */
  unitOf: Map<number, number>;
  collapsed: boolean;
  total: number;
  /** node id -> number of uses, for the nodes whose outgoing edges are hidden (see hubDegree) */
  hubs: Map<number, number>;
}

export const nodeUnitId = (id: number) => `n${id}`;

type Level = (n: GraphNode) => string;

// scope (else line, else op), then line (else op), then chunks of consecutive nodes in graph order
// (an unrolled loop on one line stays a chain of chunks, which keeps its structure visible)
const LEVELS: Level[] = [
  (n) => (n.scope ? `s:${n.scope}` : n.line != null ? `l:${n.line}` : `o:${n.op}`),
  (n) => (n.line != null ? `l:${n.line}` : `o:${n.op}`),
];

/** A group of one source line: its key's kind. */
export const isLineKey = (id: string) => (id.split("/").pop() ?? "").startsWith("l:");

/** A group's label: its scope, its line (lineRef: `[5]:3`), or its node range. */
function keyLabel(key: string, cell: number | null): string {
  const body = key.slice(2);
  if (key.startsWith("s:")) return body;
  if (key.startsWith("l:")) return lineRangeRef(cell, Number(body), Number(body));
  if (key.startsWith("c:")) return `nodes ${body}`;
  return body;
}

function summarize(id: string, key: string, level: number, members: GraphNode[]): GroupUnit {
  const kernels = new Map<string, number>();
  const ops = new Map<string, number>();
  const cells = new Set<number | null>();
  let lo = Infinity, hi = -Infinity;
  for (const n of members) {
    if (n.kernel) kernels.set(n.kernel, (kernels.get(n.kernel) ?? 0) + 1);
    ops.set(n.op, (ops.get(n.op) ?? 0) + 1);
    if (n.line != null) { lo = Math.min(lo, n.line); hi = Math.max(hi, n.line); cells.add(n.cell); }
  }
  let kernel: string | null = null, best = 0;
  for (const [k, c] of kernels) if (c > best) { best = c; kernel = k; }
  const topOps = [...ops].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 3);
  const cell = cells.size === 1 ? [...cells][0] : null;
  return { kind: "group", id, label: keyLabel(key, cell), level, members: members.map((n) => n.id), kernel, ops: topOps,
    lines: lo === Infinity ? null : [lo, hi], cell };
}

/** Split members into child groups at `level` (chunks in order when keys are too many or exhausted). */
function partition(members: GraphNode[], level: number, opts: CollapseOptions): [string, GraphNode[]][] {
  if (level < LEVELS.length) {
    const groups = new Map<string, GraphNode[]>();
    for (const n of members) {
      const k = LEVELS[level](n);
      let g = groups.get(k);
      if (!g) groups.set(k, (g = []));
      g.push(n);
    }
    if (groups.size > 1 && groups.size <= opts.maxChildren) return [...groups];
    if (groups.size === 1) return [[[...groups.keys()][0], members]];
  }
  // chunks of consecutive nodes (graph order is topological)
  const size = Math.max(opts.leafLimit, Math.ceil(members.length / opts.maxChildren));
  const out: [string, GraphNode[]][] = [];
  for (let i = 0; i < members.length; i += size) {
    const chunk = members.slice(i, i + size);
    out.push([`c:${i + 1}-${i + chunk.length}`, chunk]);
  }
  return out;
}

/**
 * The units to lay out for `graph` with the groups in `expanded` open. Graphs at or under the
 * threshold are shown whole.
 */
export function collapseGraph(graph: Graph, expanded: ReadonlySet<string>, opts: CollapseOptions = DEFAULT_COLLAPSE): VisibleGraph {
  const units: Unit[] = [];
  const unitOf = new Map<number, number>();
  const collapsed = graph.nodes.length > opts.threshold;
  const addNode = (n: GraphNode) => { unitOf.set(n.id, units.length); units.push({ kind: "node", id: nodeUnitId(n.id), node: n }); };

  const visit = (members: GraphNode[], level: number, prefix: string) => {
    let parts = partition(members, level, opts);
    // a level that does not split (one key) is skipped, so a click always shows something new
    let depth = level;
    while (parts.length === 1 && depth < LEVELS.length) {
      depth++;
      parts = partition(members, depth, opts);
    }
    for (const [key, group] of parts) {
      const id = prefix ? `${prefix}/${key}` : key;
      if (group.length < opts.minGroup) { for (const n of group) addNode(n); continue; }
      if (!expanded.has(id)) {
        const idx = units.length;
        units.push(summarize(id, key, depth, group));
        for (const n of group) unitOf.set(n.id, idx);
      } else if (group.length <= opts.leafLimit || key.startsWith("c:") && group.length <= opts.leafLimit * 2) {
        for (const n of group) addNode(n);
      } else {
        visit(group, depth + 1, id);
      }
    }
  };

  if (!collapsed) for (const n of graph.nodes) addNode(n);
  else visit(graph.nodes, 0, "");

  const hubs = new Map<number, number>();
  if (graph.nodes.length > opts.threshold) {
    const out = new Map<number, number>();
    for (const [s] of graph.edges) out.set(s, (out.get(s) ?? 0) + 1);
    for (const [id, n] of out) if (n > opts.hubDegree) hubs.set(id, n);
  }
  const edgeCount = new Map<number, number>();
  const stride = units.length + 1;
  for (const [s, d] of graph.edges) {
    if (hubs.has(s)) continue;
    const a = unitOf.get(s), b = unitOf.get(d);
    if (a === undefined || b === undefined || a === b) continue;
    const k = a * stride + b;
    edgeCount.set(k, (edgeCount.get(k) ?? 0) + 1);
  }
  const edges = [...edgeCount].map(([k, count]) => ({ from: Math.floor(k / stride), to: k % stride, count }));
  return { units, edges, unitOf, collapsed, total: graph.nodes.length, hubs };
}

/** The ids of `id` and the groups that contain it ("a/b/c" -> a, a/b, a/b/c). */
export function groupAncestors(id: string): string[] {
  const parts = id.split("/");
  return parts.map((_, i) => parts.slice(0, i + 1).join("/"));
}

/**
 * Open group `id`. If that would show more than opts.maxVisible units, the other open groups (not
 * containing `id`) are closed first.
 */
export function expandGroup(graph: Graph, expanded: ReadonlySet<string>, id: string, opts: CollapseOptions = DEFAULT_COLLAPSE): Set<string> {
  const next = new Set(expanded);
  next.add(id);
  if (collapseGraph(graph, next, opts).units.length <= opts.maxVisible) return next;
  return new Set(groupAncestors(id));
}

/** Close group `id` and every group inside it. */
export function collapseGroup(expanded: ReadonlySet<string>, id: string): Set<string> {
  return new Set([...expanded].filter((g) => g !== id && !g.startsWith(id + "/")));
}

/** The open groups that must be expanded so node `nodeId` is shown as itself (for search hits). */
export function revealNode(graph: Graph, expanded: ReadonlySet<string>, nodeId: number, opts: CollapseOptions = DEFAULT_COLLAPSE): Set<string> {
  let cur = new Set(expanded);
  for (let i = 0; i < 12; i++) {
    const v = collapseGraph(graph, cur, opts);
    const u = v.units[v.unitOf.get(nodeId) ?? -1];
    if (!u || u.kind === "node") return cur;
    cur = expandGroup(graph, cur, u.id, opts);
  }
  return cur;
}

/** The group containing a node, for the "collapse" action on a node shown inside an open group. */
export function parentGroupOf(expanded: ReadonlySet<string>, graph: Graph, nodeId: number, opts: CollapseOptions = DEFAULT_COLLAPSE): string | null {
  // the deepest open group whose closing would hide the node
  let best: string | null = null;
  for (const g of expanded) {
    const v = collapseGraph(graph, collapseGroup(expanded, g), opts);
    const u = v.units[v.unitOf.get(nodeId) ?? -1];
    if (u && u.kind === "group" && u.id === g && (!best || g.length > best.length)) best = g;
  }
  return best;
}
