// Rows of the summary's step table: runs of identical cache hits folded into one row.
import type { Step } from "./model";

export interface StepRow { first: number; last: number; count: number; cache: string; compile_s: number; execute_s: number; cause: string; line: number | null; code: string | null }

export function stepRows(steps: readonly Step[]): StepRow[] {
  const rows: StepRow[] = [];
  for (const s of steps) {
    const prev = rows[rows.length - 1];
    const compile = s.timings?.compile_s ?? 0, execute = s.timings?.execute_s ?? 0;
    if (prev && s.cache === "hit" && prev.cache === "hit" && prev.cause === s.sync_cause && prev.line === (s.sync_line ?? null)) {
      prev.last = s.index; prev.count++; prev.compile_s += compile; prev.execute_s += execute;
      continue;
    }
    rows.push({ first: s.index, last: s.index, count: 1, cache: s.cache, compile_s: compile, execute_s: execute,
      cause: s.sync_cause, line: s.sync_line ?? null, code: s.sync_code ?? null });
  }
  return rows;
}
