import { describe, expect, it } from "vitest";
import { fmtBytes, fmtCount, fmtSeconds } from "../src/core/format";
import { annotateSource, fileLines, kernelLineText, sortKernels } from "../src/core/kernels";
import type { Kernel } from "../src/core/model";
import { stepRows } from "../src/core/steps";
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
});

describe("format, steps, timeline", () => {
  it("formats numbers", () => {
    expect(fmtBytes(2048)).toBe("2.0 KiB");
    expect(fmtCount(2.5e9, "FLOP")).toBe("2.5 GFLOP");
    expect(fmtSeconds(0.0123)).toBe("12.3 ms");
    expect(fmtSeconds(null)).toBe("-");
  });

  it("folds runs of cache hits", () => {
    const st = (index: number, cache: string) => ({ index, graph_name: "g", graph_hash: "h", cache, sync_cause: "torch_xla.sync()", sync_line: 7, timings: { compile_s: cache === "miss" ? 1 : 0, execute_s: 0.1 } });
    const rows = stepRows([st(0, "miss"), st(1, "miss"), ...Array.from({ length: 98 }, (_, i) => st(i + 2, "hit"))]);
    expect(rows.map((r) => [r.first, r.last, r.count])).toEqual([[0, 0, 1], [1, 1, 1], [2, 99, 98]]);
  });

  it("buckets long runs", () => {
    const steps = Array.from({ length: 1000 }, (_, i) => ({ index: i, cache: i ? "hit" : "miss", trace_s: 0.001, compile_s: i ? 0 : 1, execute_s: 0.002, transfer_s: null }));
    const [older, cur] = timelineBars([{ execution_count: 1, started_at: 0, steps: steps.slice(0, 3) }, { execution_count: 2, started_at: 1, steps }], 100);
    expect(older.bars).toHaveLength(3);
    expect(cur.label).toBe("this run [2]");
    expect(cur.bars).toHaveLength(100);
    expect(cur.bars[0].cache).toBe("mixed");
    expect(cur.bars[0].values.compile_s).toBe(1);
    expect(cur.bars[1].label).toBe("10-19");
    expect(niceScale(0.83)).toEqual({ max: 1, step: 0.25 });
  });
});
