// The fusion map's table: sorting kernels, their lines, and the annotated cell source.
import { lineRef } from "./format";
import type { Kernel, SourceLine, SourceRef } from "./model";

export type KernelSortKey = "name" | "kind" | "flops" | "bytes" | "members";

/** Kernels sorted by `key` (descending for numbers, ascending for text unless `desc`); ties by name. */
export function sortKernels(kernels: readonly Kernel[], key: KernelSortKey, desc?: boolean): Kernel[] {
  const d = desc ?? (key === "flops" || key === "bytes" || key === "members");
  const val = (k: Kernel): number | string => key === "members" ? k.members.length : key === "name" ? k.name : key === "kind" ? k.kind : k[key];
  return [...kernels].sort((x, y) => {
    const a = val(x), b = val(y);
    let c = typeof a === "number" && typeof b === "number" ? a - b : String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
    if (d) c = -c;
    if (c === 0) c = x.name < y.name ? -1 : x.name > y.name ? 1 : 0;
    return c;
  });
}

/** What kernelLineText needs: a fusion kernel's, or a profiled kernel's, lines. */
export interface KernelLines { lines: readonly SourceRef[]; model_lines?: readonly SourceRef[]; sources: readonly string[] }

/** The kernel's model lines that are in files (a module, a library), not cells. */
export function fileLines(k: KernelLines): SourceRef[] {
  return (k.model_lines ?? []).filter((l) => l.cell == null && l.file);
}

/** kernelLineText in pieces: text, and the references that a view may show as links (lineRef is their text). */
export function kernelLineParts(k: KernelLines, limit = 4): (string | SourceRef)[] {
  const parts: (string | SourceRef)[] = [];
  k.lines.slice(0, limit).forEach((l, i) => { if (i) parts.push(" "); parts.push(l); });
  if (k.lines.length > limit) parts.push(` +${k.lines.length - limit}`);
  const inside = fileLines(k);
  if (inside.length) {
    if (parts.length) parts.push(" (");
    inside.slice(0, 2).forEach((l, i) => { if (i) parts.push(", "); parts.push(l); });
    if (inside.length > 2) parts.push(`, +${inside.length - 2}`);
    if (k.lines.length) parts.push(")");
  }
  return parts.length ? parts : [k.sources.slice(0, 2).join(", ")];
}

/** Cell lines, then the model's own lines in files: `[5]:3 (modeling_bert.py:413)`; else the library frames. */
export function kernelLineText(k: KernelLines, limit = 4): string {
  return kernelLineParts(k, limit).map((p) => (typeof p === "string" ? p : lineRef(p))).join("");
}

export interface AnnotatedLine { line: number; code: string; kernels: string[]; flops: number; bytes: number; heat: number }

/** Each source line with the kernels it feeds and a heat 0..1 (share of the heaviest line's bytes+flops). */
export function annotateSource(lines: readonly SourceLine[], kernels: readonly Kernel[]): AnnotatedLine[] {
  const byName = new Map(kernels.map((k) => [k.name, k]));
  const rows = lines.map((l) => {
    let flops = 0, bytes = 0;
    for (const name of l.kernels) {
      const k = byName.get(name);
      if (k) { flops += k.flops; bytes += k.bytes; }
    }
    // most costly first (a line's copies and layout changes, zero flops, come after its real work)
    const cost = (name: string) => byName.get(name);
    const ranked = [...l.kernels].sort((a, b) => ((cost(b)?.flops ?? 0) - (cost(a)?.flops ?? 0)) || ((cost(b)?.bytes ?? 0) - (cost(a)?.bytes ?? 0)));
    return { line: l.line, code: l.code, kernels: ranked, flops, bytes, heat: 0 };
  });
  const score = (r: AnnotatedLine) => r.flops + r.bytes;
  const max = Math.max(0, ...rows.map(score));
  for (const r of rows) r.heat = max > 0 ? score(r) / max : 0;
  return rows;
}
