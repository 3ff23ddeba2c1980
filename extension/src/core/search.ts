// Search a graph's nodes by op, source line, kernel, scope or code.
//
// Op and kernel names rank first: an exact name ("sin" is aten::sin, "fusion.3" the kernel), then names
// that contain the text. The scope and code of a node are searched only when no op or kernel name
// matches (a line's code is on every node the line made: "sin" would match the whole loop of
// `torch.sin(h) * 1.01`), or when asked: "code:sin", "scope:layer_norm". A quoted query ("sin" in
// quotes, or =sin) matches whole op or kernel names only.
import type { Graph, GraphNode } from "./model";

export interface SearchQuery {
  line: number | null; text: string | null;
  exact?: boolean; // whole op / kernel names only
  field?: "code" | "scope" | null; // search only this text of the nodes
}

export interface SearchResult {
  ids: number[]; // matching nodes, best first (exact names, then names containing the text, then code/scope)
  more: number; // nodes whose code or scope matches, left out because op or kernel names matched
}

/** "12", "line 12", "l12", ":12" -> a line; '"sin"' or "=sin" -> exact names; "code:x" / "scope:x"
 * -> that text only; anything else -> case-insensitive text. */
export function parseQuery(q: string): SearchQuery | null {
  const s = q.trim();
  if (!s) return null;
  const m = /^(?:line\s*|l|:)?(\d+)$/i.exec(s);
  if (m) return { line: Number(m[1]), text: null };
  const exact = /^"(.+)"$/.exec(s) ?? /^=(.+)$/.exec(s);
  if (exact) return { line: null, text: exact[1].trim().toLowerCase(), exact: true };
  const field = /^(code|scope):\s*(.+)$/i.exec(s);
  if (field) return { line: null, text: field[2].trim().toLowerCase(), field: field[1].toLowerCase() as "code" | "scope" };
  return { line: null, text: s.toLowerCase() };
}

const shortOp = (op: string) => op.slice(op.indexOf("::") + 2); // "aten::sin" -> "sin"

/** 0: exact op or kernel name, 1: an op or kernel name contains the text, 2: code or scope does, -1: no match. */
export function matchTier(n: GraphNode, q: SearchQuery): number {
  if (q.line !== null) return n.line === q.line ? 0 : -1;
  const t = q.text!;
  const op = n.op.toLowerCase(), kernel = (n.kernel ?? "").toLowerCase();
  if (q.field) return ((q.field === "code" ? n.code : n.scope) ?? "").toLowerCase().includes(t) ? 2 : -1;
  if (op === t || shortOp(op) === t || kernel === t || (n.shape ?? "").toLowerCase() === t) return 0;
  if (q.exact) return -1;
  if (op.includes(t) || kernel.includes(t)) return 1;
  if ((n.scope ?? "").toLowerCase().includes(t) || (n.code ?? "").toLowerCase().includes(t)) return 2;
  return -1;
}

export function nodeMatches(n: GraphNode, q: SearchQuery): boolean {
  return matchTier(n, q) >= 0;
}

export function searchNodes(g: Graph, query: string): SearchResult {
  const q = parseQuery(query);
  if (!q) return { ids: [], more: 0 };
  const tiers: number[][] = [[], [], []];
  for (const n of g.nodes) {
    const tier = matchTier(n, q);
    if (tier >= 0) tiers[tier].push(n.id);
  }
  const named = tiers[0].length + tiers[1].length;
  return named && !q.field ? { ids: [...tiers[0], ...tiers[1]], more: tiers[2].length } : { ids: tiers[2], more: 0 };
}

/** Ids of the nodes matching `query`, best first (see searchNodes). */
export function searchGraph(g: Graph, query: string): number[] {
  return searchNodes(g, query).ids;
}
