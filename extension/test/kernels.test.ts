import { describe, expect, it } from "vitest";
import { fmtBytes, fmtCount, fmtSeconds, lineRangeRef, lineRef } from "../src/core/format";
import { annotateSource, fileLines, kernelLineParts, kernelLineText, sortKernels } from "../src/core/kernels";
import type { Kernel, RunStep, StepRow } from "../src/core/model";
import { rowOfStep, stepRowText } from "../src/core/steps";
import { niceScale, timelineBars } from "../src/core/timeline";

const k = (name: string, flops: number, bytes: number, members: number): Kernel => ({
  name, kind: "kLoop", members: Array.from({ length: members }, (_, i) => `m${i}`), aten_ops: [], lines: [], sources: [], model_lines: [], shape: "f32[]", flops, bytes,
});
const KS = [k("fusion.2", 10, 500, 3), k("dot.1", 1000, 100, 1), k("fusion.1", 10, 700, 5), k("fusion.0", 0, 0, 3)];

describe("kernels", () => {
  it("sorts by flops / bytes / members (desc) and name (asc), ties by name", () => {
    expect(sortKernels(KS, "flops").map((x) => x.name)).toEqual(["dot.1", "fusion.1", "fusion.2", "fusion.0"]);
    expect(sortKernels(KS, "bytes").map((x) => x.name)).toEqual(["fusion.1", "fusion.2", "dot.1", "fusion.0"]);
    expect(sortKernels(KS, "members").map((x) => x.name)).toEqual(["fusion.1", "fusion.0", "fusion.2", "dot.1"]);
    expect(sortKernels(KS, "name").map((x) => x.name)).toEqual(["dot.1", "fusion.0", "fusion.1", "fusion.2"]);
    expect(sortKernels(KS, "flops", false).map((x) => x.name)).toEqual(["fusion.0", "fusion.1", "fusion.2", "dot.1"]);
    expect(KS[0].name).toBe("fusion.2"); // input untouched
  });

  it("annotates source lines with heat", () => {
    const rows = annotateSource([{ line: 1, code: "x", kernels: ["dot.1"] }, { line: 2, code: "y", kernels: [] }, { line: 3, code: "z", kernels: ["fusion.2", "missing"] }], KS);
    expect(rows.map((r) => r.heat)).toEqual([1, 0, 510 / 1100]);
  });

  it("lists a line's kernels most costly first, zero-flop copies last", () => {
    const rows = annotateSource([{ line: 1, code: "x", kernels: ["fusion.0", "fusion.2", "dot.1", "fusion.1"] }], KS);
    expect(rows[0].kernels).toEqual(["dot.1", "fusion.1", "fusion.2", "fusion.0"]);
  });

  it("formats lines", () => {
    const x = { ...k("a", 0, 0, 1), lines: [1, 2, 3, 4, 5].map((l) => ({ cell: 3, line: l })) };
    expect(kernelLineText(x)).toBe("[3]:1 [3]:2 [3]:3 [3]:4 +1");
    expect(kernelLineText({ ...k("b", 0, 0, 1), sources: ["linear.py:134"] })).toBe("linear.py:134");
  });

  it("adds the model's own lines in files after the cell lines", () => {
    const file = (line: number) => ({ cell: null, line, file: "transformers/models/bert/modeling_bert.py", function: "forward" });
    const x = { ...k("a", 0, 0, 1), lines: [{ cell: 3, line: 2 }], model_lines: [file(413), file(187), file(930), { cell: 3, line: 2 }] };
    expect(fileLines(x).map((l) => l.line)).toEqual([413, 187, 930]);
    expect(kernelLineText(x)).toBe("[3]:2 (modeling_bert.py:413, modeling_bert.py:187, +1)");
    expect(kernelLineText({ ...k("b", 0, 0, 1), model_lines: [file(5)] })).toBe("modeling_bert.py:5");
  });

  it("gives the same text in pieces, the references apart (a view links them)", () => {
    const file = { cell: null, line: 413, file: "a/modeling_bert.py" };
    const parts = kernelLineParts({ lines: [{ cell: 3, line: 2 }, { cell: 3, line: 4 }], model_lines: [file], sources: [] });
    expect(parts).toEqual([{ cell: 3, line: 2 }, " ", { cell: 3, line: 4 }, " (", file, ")"]);
    expect(kernelLineParts({ lines: [], sources: ["linear.py:134", "functional.py:2", "x.py:1"] })).toEqual(["linear.py:134, functional.py:2"]);
    // a profiled kernel's lines (no model lines) read the same way
    expect(kernelLineText({ lines: [{ cell: null, line: 7 }], sources: [] })).toBe("[?]:7");
  });
});

describe("format, steps, timeline", () => {
  it("formats numbers", () => {
    expect(fmtBytes(2048)).toBe("2.0 KiB");
    expect(fmtCount(2.5e9, "FLOP")).toBe("2.5 GFLOP");
    expect(fmtSeconds(0.0123)).toBe("12.3 ms");
    expect(fmtSeconds(null)).toBe("-");
  });

  it("formats a line reference one way: a cell's, a file's, a cell line whose prompt is unknown", () => {
    expect(lineRef({ cell: 5, line: 3 })).toBe("[5]:3");
    expect(lineRef({ cell: 5, line: 3, file: "/x/modeling_bert.py" })).toBe("[5]:3");
    expect(lineRef({ cell: null, line: 413, file: "transformers/models/bert/modeling_bert.py" })).toBe("modeling_bert.py:413");
    expect(lineRef({ cell: null, line: 3 })).toBe("[?]:3");
    expect(lineRef({ cell: null, line: 3, file: "" })).toBe("[?]:3");
    expect(lineRef({ cell: 5, line: null })).toBe("-");
    expect(lineRangeRef(5, 3, 7)).toBe("[5]:3-7");
    expect(lineRangeRef(null, 3, 7)).toBe("[?]:3-7");
    expect(lineRangeRef(5, 3, 3)).toBe("[5]:3");
  });

  it("writes a step row as one line, as Python does", () => {
    const row = { steps: "3-199 (197x)", cache: "hit", cause: "torch_xla.sync()" };
    expect(stepRowText({ ...row, ref: null })).toBe("3-199 (197x) | hit | torch_xla.sync()");
    expect(stepRowText({ ...row, ref: { cell: 5, line: 7 } })).toBe("3-199 (197x) | hit | torch_xla.sync() @ [5]:7");
    expect(stepRowText({ ...row, ref: { cell: 5, line: 7, code: "" } })).toBe("3-199 (197x) | hit | torch_xla.sync() @ [5]:7");
    expect(stepRowText({ ...row, ref: { cell: null, line: 7, code: "xm.mark_step()" } })).toBe("3-199 (197x) | hit | torch_xla.sync() @ [?]:7: xm.mark_step()");
  });

  it("finds the row that holds a step", () => {
    const row: StepRow = { steps: "0", first: 0, last: 0, count: 1, cache: "miss", cause: "torch_xla.sync()",
      ref: { cell: 4, line: 7, code: "torch_xla.sync()" }, graph: "0123456789ab", compile_s: 1, execute_s: 0.1, trace_s: null,
      text: "0 | miss | torch_xla.sync() @ [4]:7: torch_xla.sync()" };
    const rows = [row, { ...row, steps: "1", first: 1, last: 1 }];
    const folded = [{ ...rows[0] }, { ...rows[1], steps: "1-99 (99x)", last: 99, count: 99 }];
    expect(rowOfStep(folded, 50)?.first).toBe(1);
    expect(rowOfStep(folded, 0)?.first).toBe(0);
    expect(rowOfStep(folded, 100)).toBeNull();
  });

  it("buckets long runs", () => {
    const steps: RunStep[] = Array.from({ length: 1000 }, (_, i) => ({ index: i, cache: i ? "hit" : "miss", trace_s: 0.001, compile_s: i ? 0 : 1, execute_s: 0.002,
      transfer_s: null, execution_wait_s: null }));
    const [older, cur] = timelineBars([{ execution_count: 1, started_at: 0, steps: steps.slice(0, 3) }, { execution_count: 2, started_at: 1, steps }], 100);
    expect(older.bars).toHaveLength(3);
    expect(cur.label).toBe("this run [2]");
    expect(cur.bars).toHaveLength(100);
    expect(cur.bars[0].cache).toBe("mixed");
    expect(cur.bars[0].values.compile_s).toBe(1);
    expect(cur.bars[1].label).toBe("10-19");
    expect(niceScale(0.83)).toEqual({ max: 1, step: 0.25 });
  });

  it("stacks a sync's wait for its execution beside the trace it was taken out of", () => {
    const steps: RunStep[] = [
      { index: 0, cache: "miss", trace_s: 0.1, compile_s: 2, execute_s: 0.3, transfer_s: 0, execution_wait_s: 0.25 },
      { index: 1, cache: "hit", trace_s: 0.05, compile_s: 0, execute_s: 0.3, transfer_s: 0, execution_wait_s: null },
      { index: 2, cache: "hit", trace_s: 0.05, compile_s: 0, execute_s: 0.3, transfer_s: 0, execution_wait_s: 0 },
    ];
    const [run] = timelineBars([{ execution_count: 3, started_at: 0, steps }]);
    expect(run.bars.map((b) => b.values.execution_wait_s)).toEqual([0.25, 0, 0]);
    expect(run.bars[0].total).toBeCloseTo(2.65);
    const [bucketed] = timelineBars([{ execution_count: 3, started_at: 0, steps }], 1);
    expect(bucketed.bars[0].values.execution_wait_s).toBeCloseTo(0.25);
  });
});
