import { describe, expect, it } from "vitest";
import { kernelsOf, mainGraphHash, parsePanelModel, parseProgress, PanelModelError } from "../src/core/model";
import { validModel } from "./fixtures";

describe("parsePanelModel", () => {
  it("reads a valid model (object or JSON text)", () => {
    const m = parsePanelModel(validModel());
    expect(m.graphs.h.nodes).toHaveLength(3);
    expect(mainGraphHash(m)).toBe("h");
    expect(kernelsOf(m, "h")[0].name).toBe("fusion.1");
    expect(parsePanelModel(JSON.stringify(validModel())).summary.compiles).toBe(1);
  });

  it("reads the ranks of a multi-process cell, and names a malformed rank row", () => {
    expect(parsePanelModel(validModel()).summary.ranks).toEqual([]);
    const row = { launch: 1, rank: 2, device: "xla:2", steps: 3, compiled: 1, compile_s: 0.5, step_s: 0.9,
      mean_step_s: 0.3, status: "raised", line: "[4]:6" };
    const m = validModel() as any;
    m.summary.ranks = [row];
    expect(parsePanelModel(m).summary.ranks[0]).toEqual(row);
    m.summary.ranks = [{ ...row, steps: "three" }];
    expect(() => parsePanelModel(m)).toThrow('model.summary.ranks[0].steps: Instance type "string" is invalid. Expected "integer".');
  });

  it("reads the step rows the Python side folded, as they are; an older output without them is refused", () => {
    const given = (validModel() as any).summary.rows;
    expect(parsePanelModel(validModel()).summary.rows).toStrictEqual(given);
    const old = validModel() as any;
    delete old.summary.rows;
    expect(() => parsePanelModel(old)).toThrow('model.summary: Instance does not have required property "rows".');
    const bad = validModel() as any;
    bad.summary.rows[0].ref.line = "3";
    expect(() => parsePanelModel(bad)).toThrow(/model\.summary\.rows\[0\]\.ref\.line: .*Expected "integer"/);
    bad.summary.rows = [{ ...given[0], first: null }];
    expect(() => parsePanelModel(bad)).toThrow(/model\.summary\.rows\[0\]\.first: /);
  });

  it("rejects a wrong schema with a clear message", () => {
    expect(() => parsePanelModel({ schema: "something/1" })).toThrow(/not an xla_lab panel model/);
    expect(() => parsePanelModel({ ...validModel(), schema: "xla_lab.panel/9" })).toThrow(/not readable by this panel/);
    expect(() => parsePanelModel("{not json")).toThrow(PanelModelError);
    expect(() => parsePanelModel(null)).toThrow("not an xla_lab panel model (schema=null)");
  });

  it("names the path of a malformed field", () => {
    const m = validModel() as any;
    m.graphs.h.nodes[1].op = 42;
    expect(() => parsePanelModel(m)).toThrow('model.graphs.h.nodes[1].op: Instance type "number" is invalid. Expected "string".');
    const m2 = validModel() as any;
    m2.graphs.h.edges.push([0, 99]);
    expect(() => parsePanelModel(m2)).toThrow('graph "h" has an edge to a node that does not exist (0 -> 99)');
    const m3 = validModel() as any;
    m3.summary.compile_s = "fast";
    expect(() => parsePanelModel(m3)).toThrow(/model\.summary\.compile_s: .*Expected "number"/);
    const m4 = validModel() as any;
    m4.capture.artifacts.h.fusions[0].members = "add.1";
    expect(() => parsePanelModel(m4)).toThrow(/fusions\[0\]\.members: .*Expected "array"/);
    const m5 = validModel() as any;
    m5.main_graph = "nope";
    expect(() => parsePanelModel(m5)).toThrow(/main_graph "nope" is not in model.graphs/);
    const m6 = validModel() as any;
    m6.graphs.h.nodes.push({ ...m6.graphs.h.nodes[0] });
    expect(() => parsePanelModel(m6)).toThrow(/two nodes with id 0/);
  });

  it("reads progress leniently", () => {
    expect(parseProgress({ state: "compiling", what: "train", elapsed_s: 3, expected_s: 10, step: 0 })).toEqual({ state: "compiling", what: "train", elapsed_s: 3, expected_s: 10, step: 0 });
    expect(parseProgress({ state: "weird" })).toBeNull();
    expect(parseProgress(undefined)).toBeNull();
  });
});

describe("the Profile tab's data", () => {
  const profile = {
    peaks: { flops_per_s: 1e11, bytes_per_s: 4e10, source: "measured" },
    kernels: [{ graph_hash: "h", name: "dot.9", kind: "dot", count: 3, total_ns: 3000, mean_ns: 1000, longest_ns: 1200, share: 0.75,
      flops: 1e6, bytes: 1e4, flops_per_s: 1e9, bytes_per_s: 1e7, roof_share: 0.01, bound: "compute",
      lines: [{ cell: 5, line: 3, code: "y = x @ w" }], model_lines: [], sources: [] }],
    kernels_more: 0,
    lines: [{ label: "[5]:3", cell: 5, line: 3, file: null, code: "y = x @ w", total_ns: 3000, share: 1, kernels: ["dot.9"] }],
    model_lines: [], ops: [{ op: "aten::mm", total_ns: 3000, share: 1 }],
    steps: [{ step: 0, cache: "hit", start_ns: 0, span_ns: 1000, busy_ns: 900, kernel_ns: 1000, idle_before_ns: 0, host: { sync_ns: 50 }, execute_s: 0.000001 }],
    compare: null,
  };

  it("reads a kernel's lines as references; an older output's one text of them is refused", () => {
    const cellLine = { cell: 5, line: 3, file: null, code: "y = x @ w", function: null };
    const fileLine = { cell: null, line: 413, file: "transformers/modeling_bert.py", code: "x = self.dense(x)", function: "forward" };
    const kernel = { ...profile.kernels[0], lines: [cellLine], model_lines: [fileLine], sources: ["linear.py:134"] };
    const k = parsePanelModel({ ...(validModel() as object), profile: { ...profile, kernels: [kernel] } }).profile!.kernels[0];
    expect([k.lines, k.model_lines, k.sources]).toStrictEqual([[cellLine], [fileLine], ["linear.py:134"]]);
    const old = { ...profile, kernels: [{ ...profile.kernels[0], lines: "[5]:3" }] };
    expect(() => parsePanelModel({ ...(validModel() as object), profile: old })).toThrow(/model\.profile\.kernels\[0\]\.lines: .*Expected "array"/);
    const bad = { ...kernel, lines: [{ cell: 5 }] };
    expect(() => parsePanelModel({ ...(validModel() as object), profile: { ...profile, kernels: [bad] } })).toThrow(/model\.profile\.kernels\[0\]\.lines\[0\]: .*required property "line"/);
  });

  it("parses a profile and keeps it on the model", () => {
    const m = parsePanelModel({ ...(validModel() as object), profile });
    expect(m.profile?.kernels[0].name).toBe("dot.9");
    expect(m.profile?.steps[0].host.sync_ns).toBe(50);
    expect(parsePanelModel(validModel()).profile).toBeNull();
  });

  it("rejects wrong types with their path", () => {
    const bad = { ...profile, kernels: [{ ...profile.kernels[0], total_ns: "3000" }] };
    expect(() => parsePanelModel({ ...(validModel() as object), profile: bad })).toThrow(/model\.profile\.kernels\[0\]\.total_ns/);
    expect(() => parsePanelModel({ ...(validModel() as object), profile: { ...profile, steps: [{ step: 0 }] } })).toThrow(/model\.profile\.steps\[0\]/);
  });
});

describe("step timings", () => {
  it("must be numbers (a timing given as text is refused, not shown as 0 s)", () => {
    const m = validModel() as Record<string, any>;
    m.capture.steps[0].timings = { compile_s: "0.5" };
    expect(() => parsePanelModel(m)).toThrow(/model\.capture\.steps\[0\]\.timings\.compile_s/);
    m.capture.steps[0].timings = { compile_s: null, execute_s: 0.25 };
    expect(parsePanelModel(m).capture.steps[0].timings.execute_s).toBe(0.25);
  });

  it("of a run keep the sync's wait for its execution (null when not measured, refused as text)", () => {
    const m = validModel() as Record<string, any>;
    expect(parsePanelModel(m).runs[0].steps[0].execution_wait_s).toBeNull();
    m.runs[0].steps[0].execution_wait_s = 0.2;
    expect(parsePanelModel(m).runs[0].steps[0].execution_wait_s).toBe(0.2);
    m.runs[0].steps[0].execution_wait_s = "0.2";
    expect(() => parsePanelModel(m)).toThrow(/model\.runs\[0\]\.steps\[0\]\.execution_wait_s/);
  });
});
