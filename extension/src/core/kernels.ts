// The fusion map's table: sorting kernels, their lines, and the annotated cell source.
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

/** `[5]:3` for a cell line, `modeling_bert.py:413` for a line of a file. */
export function refText(l: SourceRef): string {
  return l.cell != null ? `[${l.cell}]:${l.line}` : `${(l.file ?? "").split("/").pop()}:${l.line}`;
}

/** The kernel's model lines that are in files (a module, a library), not cells. */
export function fileLines(k: Kernel): SourceRef[] {
  return (k.model_lines ?? []).filter((l) => l.cell == null && l.file);
}

/** Cell lines, then the model's own lines in files: `[5]:3 (modeling_bert.py:413)`. */
export function kernelLineText(k: Kernel, limit = 4): string {
  const parts = k.lines.slice(0, limit).map(refText);
  if (k.lines.length > limit) parts.push(`+${k.lines.length - limit}`);
  let text = parts.join(" ");
  const inside = fileLines(k);
  if (inside.length) {
    const inner = inside.slice(0, 2).map(refText).join(", ") + (inside.length > 2 ? `, +${inside.length - 2}` : "");
    text = text ? `${text} (${inner})` : inner;
  }
  return text || k.sources.slice(0, 2).join(", ");
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
