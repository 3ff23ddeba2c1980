// Visible graph -> Graphviz DOT. Every string from the model goes through dotString (quoted, escaped),
// so labels can hold quotes, backslashes, braces or HTML-looking text without changing the graph.
import { lineRangeRef, lineRef } from "./format";
import { isLineKey, type Unit, type VisibleGraph } from "./collapse";

const PALETTE = [
  "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
  "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
];
export const NO_KERNEL_COLOR = "#ffffff";

/** A stable colour for a kernel name (same name, same colour, in every view). */
export function kernelColor(kernel: string | null | undefined): string {
  if (!kernel) return NO_KERNEL_COLOR;
  let h = 2166136261;
  for (let i = 0; i < kernel.length; i++) {
    h ^= kernel.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return PALETTE[(h >>> 0) % PALETTE.length];
}

/** Distinct colours for the kernels of one graph: the palette's colours go to the heaviest kernels
 * (by flops, then bytes, then name), then hues spaced by the golden angle; a name not in the graph
 * falls back to kernelColor. Hashing names into 12 colours made two kernels of six share one. */
export function kernelPalette(kernels: readonly { name: string; flops?: number; bytes?: number }[]): (kernel: string | null | undefined) => string {
  const order = [...kernels].sort((a, b) => ((b.flops ?? 0) - (a.flops ?? 0)) || ((b.bytes ?? 0) - (a.bytes ?? 0)) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const assigned = new Map<string, string>();
  order.forEach((k, i) => {
    if (assigned.has(k.name)) return;
    const n = assigned.size;
    assigned.set(k.name, n < PALETTE.length ? PALETTE[n]
      : hslHex(((n - PALETTE.length) * 137.508 + 20) % 360, n % 3 === 0 ? 0.7 : 0.55, n % 2 ? 0.72 : 0.82));
  });
  return (kernel) => (kernel ? assigned.get(kernel) ?? kernelColor(kernel) : NO_KERNEL_COLOR);
}

/** An HSL colour as #rrggbb (Graphviz reads hex, not CSS hsl()). */
export function hslHex(h: number, s: number, l: number): string {
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => {
    const k = (n + h / 30) % 12;
    const c = l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1));
    return Math.round(255 * c).toString(16).padStart(2, "0");
  };
  return `#${f(0)}${f(8)}${f(4)}`;
}

/** A DOT double-quoted string. Backslashes are doubled so Graphviz escapes (\N, \l, \G) cannot fire. */
export function dotString(s: string): string {
  let out = "";
  for (const ch of s) {
    if (ch === "\\") out += "\\\\";
    else if (ch === '"') out += '\\"';
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") continue;
    else if (ch < " " || ch === "\u007f") out += " ";
    else out += ch;
  }
  return `"${out}"`;
}

export function shorten(s: string, max: number): string {
  return s.length <= max ? s : s.slice(0, max - 1) + "\u2026";
}

/** The DOT id of unit i; the SVG <g> of the node carries it as its id attribute. */
export const unitDotId = (i: number) => `u${i}`;

export function unitLabel(u: Unit, uses?: number): string {
  if (u.kind === "node") {
    const n = u.node;
    const op = n.op.replace(/^aten::/, "");
    const where = n.line != null ? ` ${lineRef(n)}` : "";
    const hub = uses ? `\n\u2192 ${uses} uses (edges hidden)` : "";
    return `${shorten(op, 28)}${where}\n${shorten(n.shape ?? "", 28)}${hub}`;
  }
  const ops = u.ops.map(([op, c]) => `${op.replace(/^aten::/, "")}\u00d7${c}`).join(" ");
  // (a line's group is labelled with its line already)
  const lines = isLineKey(u.id) || !u.lines ? "" : lineRangeRef(u.cell, u.lines[0], u.lines[1]);
  return `${shorten(u.label, 36)}\n${u.members.length} nodes${lines ? " \u00b7 " + lines : ""}\n${shorten(ops, 40)}`;
}

export interface DotOptions {
  name?: string; rankdir?: "TB" | "LR"; highlight?: ReadonlySet<number>;
  /** fill colour of a unit instead of its kernel's (the side panel's graph diff colours by diff status) */
  fill?: (u: Unit) => string | null;
  /** an extra SVG class for a unit (e.g. "xla-diff-added") */
  className?: (u: Unit) => string | null;
  /** the colour of a kernel (kernelPalette of the graph); default kernelColor */
  color?: (kernel: string | null | undefined) => string;
}

export function toDot(v: VisibleGraph, opts: DotOptions = {}): string {
  const out: string[] = [];
  out.push(`digraph ${dotString(opts.name ?? "graph")} {`);
  out.push(`  graph [rankdir=${opts.rankdir ?? "TB"}, bgcolor="transparent", nodesep=0.25, ranksep=0.35, fontname="Helvetica"];`);
  out.push(`  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, height=0.3, margin="0.08,0.03", penwidth=1];`);
  out.push(`  edge [arrowsize=0.6, penwidth=0.8];`);
  v.units.forEach((u, i) => {
    const attrs = [`id=${dotString(unitDotId(i))}`, `label=${dotString(unitLabel(u, u.kind === "node" ? v.hubs?.get(u.node.id) : undefined))}`,
      `fillcolor=${dotString(opts.fill?.(u) ?? (opts.color ?? kernelColor)(u.kind === "node" ? u.node.kernel : u.kernel))}`];
    const extra = opts.className?.(u);
    const cls = (base: string) => dotString(extra ? `${base} ${extra}` : base);
    if (u.kind === "group") attrs.push(`shape=box3d`, `style="filled"`, `class=${cls("xla-group")}`);
    else attrs.push(`class=${cls("xla-node")}`);
    if (opts.highlight?.has(i)) attrs.push(`penwidth=3`, `color="#d62728"`);
    out.push(`  ${unitDotId(i)} [${attrs.join(", ")}];`);
  });
  for (const e of v.edges) {
    const extra = e.count > 1 ? ` [penwidth=${Math.min(4, 0.8 + Math.log2(e.count) * 0.5).toFixed(2)}, tooltip=${dotString(`${e.count} edges`)}]` : "";
    out.push(`  ${unitDotId(e.from)} -> ${unitDotId(e.to)}${extra};`);
  }
  out.push("}");
  return out.join("\n");
}
