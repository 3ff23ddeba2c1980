// Where a compile's seconds went (the panel's `compile` section, parsed by model.ts parseCompile): the phase
// bar, the kernel table's order, the note on thread time, and the one-line comparison of two runs' compiles
// (the side panel's Compare; Python's compare_line in xla_lab/view/compile_summary.py). Pure logic: no DOM.
import { fmtNs, lineRef } from "./format";
import type { CompileEntry, CompileKernel, CompileLine } from "./model";

/** Python's `f"{x:.{digits}f}"`: as toFixed, except that an exact tie rounds to even, as Python does
 * (toFixed rounds 2.25 up to "2.3", Python writes "2.2"); `inf` for an infinite x. */
export function pyFixed(x: number, digits: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  // a tie at `digits` is an odd multiple of 2^-(digits+1) (exact: a power-of-two product)
  const half = Math.abs(x) * 2 ** (digits + 1);
  if (Number.isInteger(half) && half % 2 === 1) {
    const scaled = Math.abs(x) * 10 ** digits;
    const lo = Math.floor(scaled);
    const n = lo % 2 === 0 ? lo : lo + 1;
    return (x < 0 ? "-" : "") + (n / 10 ** digits).toFixed(digits);
  }
  return x.toFixed(digits);
}

/** Python's `_s` (compile_summary.py): seconds with two decimals, `?` when unknown. */
export function fmtCompileSeconds(ns: number | null | undefined): string {
  return ns == null ? "?" : `${pyFixed(ns / 1e9, 2)} s`;
}

/** The run's compiles, largest (by CompileTime) first; ties keep their step order. */
export function compilesBySize(compiles: readonly CompileEntry[]): CompileEntry[] {
  return [...compiles].sort((a, b) => b.compile_ns - a.compile_ns);
}

/** The phases every bar colours the same way (others take the last two tones in turn). */
const PHASE_TONES = ["HLO passes", "kernel emission", "LLVM codegen", "backend: untraced", "client: before the HLO passes", "client: outside the compiler"];

export interface PhaseSegment {
  name: string; ns: number; share: number;
  /** where the segment starts and how wide it is, in percent of the bar */
  left: number; width: number;
  /** its colour: xla-phase-<tone> */
  tone: number;
  /** `LLVM codegen 1.73 s (58.2%)` */
  label: string;
}

/** The phase bar of a compile: one segment per phase with time (phases add up to compile_ns), in the
 * order given, widths from their shares (scaled down if rounding makes them add up to more than 100%). */
export function phaseSegments(c: Pick<CompileEntry, "phases">): PhaseSegment[] {
  const phases = c.phases.filter((p) => p.ns > 0 && p.share > 0);
  const total = Math.max(1, phases.reduce((a, p) => a + p.share, 0));
  let left = 0, other = 0;
  return phases.map((p) => {
    const known = PHASE_TONES.indexOf(p.name);
    const tone = known >= 0 ? known : PHASE_TONES.length + (other++ % 2);
    const width = (100 * p.share) / total;
    const seg = { name: p.name, ns: p.ns, share: p.share, left, width, tone, label: `${p.name} ${fmtNs(p.ns)} (${(p.share * 100).toFixed(1)}%)` };
    left += width;
    return seg;
  });
}

export type CompileKernelSortKey = "name" | "kind" | "ns" | "op_count";

/** Kernels sorted by `key` (descending for numbers, ascending for text unless `desc`); ties by name. A
 * kernel without an op count sorts after those with one. */
export function sortCompileKernels(kernels: readonly CompileKernel[], key: CompileKernelSortKey, desc?: boolean): CompileKernel[] {
  const d = desc ?? (key === "ns" || key === "op_count");
  return [...kernels].sort((x, y) => {
    let c: number;
    if (key === "name" || key === "kind") c = x[key] < y[key] ? -1 : x[key] > y[key] ? 1 : 0;
    else {
      const a = x[key], b = y[key];
      if (a == null || b == null) c = a == null && b == null ? 0 : a == null ? (d ? -1 : 1) : (d ? 1 : -1);
      else c = a - b;
    }
    if (d) c = -c;
    if (c === 0) c = x.name < y.name ? -1 : x.name > y.name ? 1 : 0;
    return c;
  });
}

/** The HLO passes by their own time, longest first (the verifier, RunInvariantCheckers, among them). */
export function topPasses(c: Pick<CompileEntry, "passes">, top = 8): CompileEntry["passes"] {
  return [...c.passes].sort((a, b) => b.ns - a.ns).slice(0, top);
}

/** A pass's name as the tab shows it: RunInvariantCheckers is the HLO verifier. */
export function passLabel(name: string): string {
  return name === "RunInvariantCheckers" ? "HLO verifier (RunInvariantCheckers)" : name;
}

/** One plain sentence: kernel emission and LLVM codegen run on several threads, so their thread times
 * exceed the wall time they overlap (with this compile's figures where it has them). */
export function threadNote(c: CompileEntry): string {
  const wall = (name: string) => c.phases.find((p) => p.name === name)?.ns ?? null;
  const part = (what: string, threads: number | null, threadNs: number | null, wallNs: number | null) =>
    threads == null && threadNs == null ? null
      : `${what}${threads != null ? ` on ${threads} thread${threads === 1 ? "" : "s"}` : ""}` +
        (threadNs != null ? `: ${fmtNs(threadNs)} of thread time${wallNs != null ? ` in ${fmtNs(wallNs)} of wall time` : ""}` : "");
  const parts = [part("kernel emission", c.kernel_threads, c.kernel_thread_ns, wall("kernel emission")),
    part("LLVM codegen", c.codegen.threads ?? null, c.codegen.thread_ns ?? null, wall("LLVM codegen"))].filter((x): x is string => x !== null);
  return "Kernel emission and LLVM codegen run on several threads at once, so their thread times (the kernels' times included) " +
    `exceed the wall time they overlap${parts.length ? ` (${parts.join("; ")})` : ""}.`;
}

/** The line of B whose kernel count grew most from A to B, lines matched by label (the first such line of
 * B, as Python's max); null when none grew. */
export function grownLine(a: readonly CompileLine[], b: readonly CompileLine[]): CompileLine | null {
  const countA = new Map<string, number>();
  for (const ln of a) countA.set(ln.label, ln.kernels);
  let best: CompileLine | null = null, bestGrowth = -Infinity;
  for (const ln of b) {
    const growth = ln.kernels - (countA.get(ln.label) ?? 0);
    if (growth > bestGrowth) { best = ln; bestGrowth = growth; }
  }
  return best && bestGrowth > 0 ? best : null;
}

/** Two compiles in one line, Python's compare_line: "B compiled 2.1x longer than A (6.30 s vs 3.00 s): 180
 * more kernels, most from [7]:12". */
export function compareCompileEntries(a: CompileEntry, b: CompileEntry): string {
  const ratio = a.compile_ns ? b.compile_ns / a.compile_ns : Infinity;
  const ka = a.counts.kernels, kb = b.counts.kernels;
  let text = `B compiled ${pyFixed(ratio, 1)}x ${ratio >= 1 ? "longer" : "shorter"} than A (${fmtCompileSeconds(b.compile_ns)} vs ${fmtCompileSeconds(a.compile_ns)})`;
  if (ka != null && kb != null && ka !== kb) {
    const more = kb - ka;
    text += `: ${Math.abs(more)} ${more > 0 ? "more" : "fewer"} kernels`;
    const grown = more > 0 ? grownLine(a.lines, b.lines) : null;
    if (grown) text += `, most from ${grown.ref ? lineRef(grown.ref) : grown.label}`;
  }
  return text;
}

/** The side panel's Compare of two runs: their largest compiles (by CompileTime) in one line; null unless
 * both runs have a compile section. */
export function compareCompiles(a: readonly CompileEntry[], b: readonly CompileEntry[]): string | null {
  if (!a.length || !b.length) return null;
  return compareCompileEntries(compilesBySize(a)[0], compilesBySize(b)[0]);
}
