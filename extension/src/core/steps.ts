// The step table's rows. The Python side folds them (summary.rows, panel_model.py); here: their one-line
// text, the row of a step, and the rows of an output saved before summary.rows existed (one per step,
// not folded).
import { lineRef } from "./format";
import type { Capture, SourceRef, Step, StepRow } from "./model";

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

/** The line a step synced at, as a line of the capture's cell (its prompt; `[?]` when unknown), else null.
 * Only for outputs saved before summary.rows: the rows carry their line otherwise. */
export function stepSourceRef(capture: Pick<Capture, "execution_count">, step: Step): SourceRef | null {
  if (step.sync_line == null) return null;
  return { cell: capture.execution_count, line: step.sync_line, code: step.sync_code ?? null };
}

/** One row per step, not folded: the step table of an output saved without summary.rows. */
export function unfoldedRows(capture: Pick<Capture, "execution_count" | "steps">): StepRow[] {
  return capture.steps.map((s) => {
    const row: StepRow = {
      steps: String(s.index), first: s.index, last: s.index, count: 1, cache: s.cache, cause: s.sync_cause ?? "",
      ref: stepSourceRef(capture, s), graph: (s.graph_hash ?? "").slice(0, 12),
      compile_s: s.timings?.compile_s ?? null, execute_s: s.timings?.execute_s ?? null, trace_s: s.timings?.trace_s ?? null,
      text: "",
    };
    row.text = stepRowText(row);
    return row;
  });
}

/** The row that holds step `index` (its first..last), else null. */
export function rowOfStep(rows: readonly StepRow[], index: number): StepRow | null {
  return rows.find((r) => r.first <= index && index <= r.last) ?? null;
}
