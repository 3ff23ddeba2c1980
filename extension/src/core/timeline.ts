// Per-step trace / compile / wait / execute / transfer bars for this run and the cell's earlier runs.
import type { Run } from "./model";

// (execution_wait_s: the sync's wait for its own step's execution, out of trace_s; 0 where not measured)
export const PHASES = ["trace_s", "compile_s", "execution_wait_s", "execute_s", "transfer_s"] as const;
export type Phase = (typeof PHASES)[number];

export interface Bar { run: number; label: string; first: number; last: number; cache: string; values: Record<Phase, number>; total: number }
export interface RunBars { run: number; label: string; bars: Bar[] }

/**
 * One bar per step; runs with more than `maxBars` steps are bucketed (consecutive steps summed), so
 * a 10,000-step loop stays a readable plot.
 */
export function timelineBars(runs: readonly Run[], maxBars = 120): RunBars[] {
  return runs.map((r, ri) => {
    const label = ri === runs.length - 1 ? `this run${r.execution_count != null ? ` [${r.execution_count}]` : ""}`
      : `run [${r.execution_count ?? "?"}]`;
    const per = Math.max(1, Math.ceil(r.steps.length / maxBars));
    const bars: Bar[] = [];
    for (let i = 0; i < r.steps.length; i += per) {
      const chunk = r.steps.slice(i, i + per);
      const values = { trace_s: 0, compile_s: 0, execution_wait_s: 0, execute_s: 0, transfer_s: 0 } as Record<Phase, number>;
      for (const s of chunk) for (const p of PHASES) values[p] += s[p] ?? 0;
      const caches = new Set(chunk.map((s) => s.cache));
      const first = chunk[0].index, last = chunk[chunk.length - 1].index;
      bars.push({ run: ri, label: first === last ? `${first}` : `${first}-${last}`, first, last,
        cache: caches.size === 1 ? chunk[0].cache : "mixed", values, total: PHASES.reduce((a, p) => a + values[p], 0) });
    }
    return { run: ri, label, bars };
  });
}

/** A "nice" axis maximum and tick step for values up to `max`. */
export function niceScale(max: number, ticks = 4): { max: number; step: number } {
  if (!(max > 0)) return { max: 1, step: 0.25 };
  const raw = max / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw)!;
  return { max: step * Math.ceil(max / step), step };
}
