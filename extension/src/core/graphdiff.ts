// Diff of two captured graphs (two steps or two runs): which nodes were added, removed or changed,
// a merged graph to draw with the diff coloured in, and a short textual summary. Pure logic: no DOM.
//
// Node ids are per graph, so nodes are matched by what they are: first by op + shape + scope + line +
// code (the k-th such node of A matches the k-th of B, in graph order), then the rest by op + scope +
// line (same place, different shape or code: "changed"), then by op + shape (the line moved:
// "changed"). What is left is "removed" (only in A) or "added" (only in B). Kernel names are not
// compared: XLA renumbers fusions between compiles.
import type { Unit } from "./collapse";
import { lineRef } from "./format";
import type { Graph, GraphNode } from "./model";

export type DiffStatus = "same" | "added" | "removed" | "changed";

export interface NodeChange {
  status: Exclude<DiffStatus, "same">;
  a: GraphNode | null;
  b: GraphNode | null;
  /** merged-graph id of the node */
  id: number;
  /** the fields that differ, for "changed": shape, line, code, scope */
  fields: string[];
}

export interface GraphDiff {
  /** B's nodes (their ids kept) plus A's removed nodes (new ids above B's); changed nodes show "A -> B" shapes */
  merged: Graph;
  status: Map<number, DiffStatus>;
  changes: NodeChange[];
  counts: Record<DiffStatus, number>;
  identical: boolean;
}

const SEP = "\u0001";
const k1 = (n: GraphNode) => [n.op, n.shape ?? "", n.scope ?? "", n.line ?? "", n.code ?? ""].join(SEP);
const k2 = (n: GraphNode) => [n.op, n.scope ?? "", n.line ?? ""].join(SEP);
const k3 = (n: GraphNode) => [n.op, n.shape ?? ""].join(SEP);

function queues(nodes: readonly GraphNode[], key: (n: GraphNode) => string): Map<string, GraphNode[]> {
  const m = new Map<string, GraphNode[]>();
  for (const n of nodes) {
    const k = key(n);
    const q = m.get(k);
    if (q) q.push(n); else m.set(k, [n]);
  }
  for (const q of m.values()) q.reverse(); // pop() takes them in graph order
  return m;
}

function changedFields(a: GraphNode, b: GraphNode): string[] {
  const out: string[] = [];
  if ((a.shape ?? "") !== (b.shape ?? "")) out.push("shape");
  if (a.line !== b.line) out.push("line");
  if ((a.code ?? "") !== (b.code ?? "")) out.push("code");
  if ((a.scope ?? "") !== (b.scope ?? "")) out.push("scope");
  return out;
}

const EMPTY: Graph = { name: "graph", hash: "", nodes: [], edges: [], roots: [] };

export function diffGraphs(a: Graph | null | undefined, b: Graph | null | undefined): GraphDiff {
  const A = a ?? EMPTY, B = b ?? EMPTY;
  const matchOfB = new Map<number, GraphNode>(); // B id -> A node
  const matchedA = new Set<number>();
  const passes: ((n: GraphNode) => string)[] = [k1, k2, k3];
  let restB: GraphNode[] = B.nodes.slice();
  let restA: GraphNode[] = A.nodes.slice();
  for (const key of passes) {
    if (!restB.length || !restA.length) break;
    const qa = queues(restA, key);
    const left: GraphNode[] = [];
    for (const n of restB) {
      const m = qa.get(key(n))?.pop();
      if (m) { matchOfB.set(n.id, m); matchedA.add(m.id); } else left.push(n);
    }
    restB = left;
    restA = restA.filter((n) => !matchedA.has(n.id));
  }

  const status = new Map<number, DiffStatus>();
  const changes: NodeChange[] = [];
  const counts: Record<DiffStatus, number> = { same: 0, added: 0, removed: 0, changed: 0 };
  const nodes: GraphNode[] = [];
  const aToMerged = new Map<number, number>();
  for (const n of B.nodes) {
    const m = matchOfB.get(n.id);
    if (!m) {
      status.set(n.id, "added");
      changes.push({ status: "added", a: null, b: n, id: n.id, fields: [] });
      nodes.push(n);
      continue;
    }
    aToMerged.set(m.id, n.id);
    const fields = changedFields(m, n);
    if (fields.length) {
      status.set(n.id, "changed");
      changes.push({ status: "changed", a: m, b: n, id: n.id, fields });
      nodes.push(fields.includes("shape") ? { ...n, shape: `${m.shape ?? "?"} \u2192 ${n.shape ?? "?"}` } : n);
    } else {
      status.set(n.id, "same");
      nodes.push(n);
    }
  }
  let next = B.nodes.reduce((mx, n) => Math.max(mx, n.id), -1) + 1;
  for (const n of A.nodes) {
    if (matchedA.has(n.id)) continue;
    const id = next++;
    aToMerged.set(n.id, id);
    status.set(id, "removed");
    changes.push({ status: "removed", a: n, b: null, id, fields: [] });
    nodes.push({ ...n, id });
  }
  for (const s of status.values()) counts[s]++;

  const seen = new Set<string>();
  const edges: [number, number][] = [];
  const addEdge = (s: number, d: number) => {
    const k = `${s},${d}`;
    if (!seen.has(k)) { seen.add(k); edges.push([s, d]); }
  };
  for (const [s, d] of B.edges) addEdge(s, d);
  // A's edges that touch a removed node, drawn between the merged nodes
  for (const [s, d] of A.edges) {
    const ms = aToMerged.get(s), md = aToMerged.get(d);
    if (ms === undefined || md === undefined) continue;
    if (status.get(ms) === "removed" || status.get(md) === "removed") addEdge(ms, md);
  }
  const roots = B.roots.slice();
  for (const r of A.roots) {
    const m = aToMerged.get(r);
    if (m !== undefined && status.get(m) === "removed") roots.push(m);
  }
  const merged: Graph = { name: `${A.name} vs ${B.name}`, hash: `${A.hash}..${B.hash}`, nodes, edges, roots };
  const identical = counts.added === 0 && counts.removed === 0 && counts.changed === 0 && A.edges.length === B.edges.length;
  return { merged, status, changes, counts, identical };
}

export const DIFF_COLORS: Record<DiffStatus, string> = { same: "#ffffff", added: "#b7e4b0", removed: "#f4b6b6", changed: "#ffd591" };

/** The diff status of a unit of the collapsed merged graph: a group is "changed" if it mixes statuses. */
export function unitDiffStatus(u: Unit, status: ReadonlyMap<number, DiffStatus>): DiffStatus {
  if (u.kind === "node") return status.get(u.node.id) ?? "same";
  let out: DiffStatus | null = null;
  for (const id of u.members) {
    const s = status.get(id) ?? "same";
    if (out === null) out = s;
    else if (out !== s) return "changed";
  }
  return out ?? "same";
}

/** One line per kind of change, most telling first: shape changes (the usual recompile reason), then counts. */
export function describeDiff(d: GraphDiff, max = 6): string[] {
  if (d.identical) return ["the graphs are identical (same ops, shapes, lines and edges)"];
  const out: string[] = [];
  const shapes = new Map<string, number>();
  for (const c of d.changes) {
    if (c.status !== "changed" || !c.fields.includes("shape")) continue;
    const k = `${c.b!.op}: ${c.a!.shape ?? "?"} \u2192 ${c.b!.shape ?? "?"}${c.b!.line != null ? ` (${lineRef(c.b!)})` : ""}`;
    shapes.set(k, (shapes.get(k) ?? 0) + 1);
  }
  for (const [k, n] of [...shapes].sort((x, y) => y[1] - x[1]).slice(0, max)) out.push(`shape changed: ${k}${n > 1 ? ` \u00d7${n}` : ""}`);
  if (shapes.size > max) out.push(`\u2026 ${shapes.size - max} more shape changes`);
  const ops = (s: "added" | "removed") => {
    const m = new Map<string, number>();
    for (const c of d.changes) if (c.status === s) { const n = (c.a ?? c.b)!; const k = n.op + (n.line != null ? ` (${lineRef(n)})` : ""); m.set(k, (m.get(k) ?? 0) + 1); }
    return [...m].sort((x, y) => y[1] - x[1]).slice(0, 4).map(([k, n]) => (n > 1 ? `${k} \u00d7${n}` : k)).join(", ");
  };
  if (d.counts.added) out.push(`${d.counts.added} node${d.counts.added === 1 ? "" : "s"} added: ${ops("added")}`);
  if (d.counts.removed) out.push(`${d.counts.removed} node${d.counts.removed === 1 ? "" : "s"} removed: ${ops("removed")}`);
  const other = d.counts.changed - [...shapes.values()].reduce((a, n) => a + n, 0);
  if (other > 0) out.push(`${other} node${other === 1 ? "" : "s"} moved to another line or changed code`);
  if (!out.length) out.push("the same nodes, wired differently");
  return out;
}
