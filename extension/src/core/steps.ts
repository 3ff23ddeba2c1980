// The step table's rows. The Python side folds them (summary.rows, panel_model.py); here: their one-line
// text and the row of a step.
import { lineRef } from "./format";
import type { StepRow } from "./model";

/** A row's one-line form, the same text Python builds: `3-199 (197x) | hit | torch_xla.sync() @ [5]:7: xm.mark_step()`
 * (` @ ref` when the row has a line, `: code` when that line's code is known). */
export function stepRowText(row: Pick<StepRow, "steps" | "cache" | "cause" | "ref">): string {
  let text = `${row.steps} | ${row.cache} | ${row.cause}`;
  if (row.ref) {
    text += ` @ ${lineRef(row.ref)}`;
    if (row.ref.code) text += `: ${row.ref.code}`;
  }
  return text;
}

/** The row that holds step `index` (its first..last), else null. */
export function rowOfStep(rows: readonly StepRow[], index: number): StepRow | null {
  return rows.find((r) => r.first <= index && index <= r.last) ?? null;
}
