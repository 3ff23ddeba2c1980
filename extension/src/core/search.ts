// Search a graph's nodes by op, source line, kernel, scope or code.
import type { Graph, GraphNode } from "./model";

export interface SearchQuery { line: number | null; text: string | null }

/** "12", "line 12", "l12", ":12" -> a line; anything else -> case-insensitive text. */
export function parseQuery(q: string): SearchQuery | null {
  const s = q.trim();
  if (!s) return null;
  const m = /^(?:line\s*|l|:)?(\d+)$/i.exec(s);
  if (m) return { line: Number(m[1]), text: null };
  return { line: null, text: s.toLowerCase() };
}

export function nodeMatches(n: GraphNode, q: SearchQuery): boolean {
  if (q.line !== null) return n.line === q.line;
  const t = q.text!;
  return n.op.toLowerCase().includes(t) || (n.kernel ?? "").toLowerCase().includes(t)
    || (n.scope ?? "").toLowerCase().includes(t) || (n.code ?? "").toLowerCase().includes(t)
    || (n.shape ?? "").toLowerCase() === t;
}

/** Ids of the nodes matching `query`, in graph order. */
export function searchGraph(g: Graph, query: string): number[] {
  const q = parseQuery(query);
  if (!q) return [];
  const out: number[] = [];
  for (const n of g.nodes) if (nodeMatches(n, q)) out.push(n.id);
  return out;
}
