export function fmtBytes(n: number | null | undefined): string {
  if (n == null) return "-";
  for (const [scale, unit] of [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]] as const) {
    if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${Math.round(n)} B`;
}

export function fmtCount(n: number | null | undefined, unit: string): string {
  if (n == null) return "-";
  for (const [scale, prefix] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "K"]] as const) {
    if (n >= scale) return `${(n / scale).toFixed(1)} ${prefix}${unit}`;
  }
  return `${Math.round(n)} ${unit}`;
}

export function fmtSeconds(s: number | null | undefined): string {
  if (s == null) return "-";
  if (s >= 100) return `${s.toFixed(0)} s`;
  if (s >= 1) return `${s.toFixed(2)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(1)} ms`;
  if (s > 0) return `${(s * 1e6).toFixed(0)} \u00b5s`;
  return "0 s";
}

export function fmtNs(ns: number | null | undefined): string {
  if (ns == null) return "-";
  if (ns >= 1e9) return `${(ns / 1e9).toFixed(2)} s`;
  if (ns >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`;
  if (ns >= 1e3) return `${(ns / 1e3).toFixed(1)} \u00b5s`;
  return `${Math.round(ns)} ns`;
}

export function fmtShare(x: number | null | undefined): string {
  return x == null ? "-" : `${(x * 100).toFixed(1)}%`;
}

/** The one format of a source line reference wherever one is shown (Python's `ref_text` in xla_lab/capture/source_ref.py builds the same):
 * `[5]:3` (line 3 of the cell run as [5]), else `modeling_bert.py:413` (a file, by its base name), else
 * `[?]:3` (a cell line whose prompt is unknown); `-` when there is no line. */
export function lineRef(l: { cell?: number | null; line: number | null; file?: string | null }): string {
  if (l.line == null) return "-";
  if (l.cell != null) return `[${l.cell}]:${l.line}`;
  if (l.file) return `${l.file.split("/").pop()}:${l.line}`;
  return `[?]:${l.line}`;
}

/** Lines `lo`..`hi` of one cell: lineRef of the first line, then `-hi` when the range has more than one
 * line (`[5]:3-7`, `[?]:3-7` when the cell is unknown). */
export function lineRangeRef(cell: number | null | undefined, lo: number, hi: number): string {
  const first = lineRef({ cell, line: lo });
  return hi === lo ? first : `${first}-${hi}`;
}
