import { describe, expect, it } from "vitest";
import { parseQuery, searchGraph, searchNodes } from "../src/core/search";
import { chain } from "./fixtures";

describe("search", () => {
  const g = chain(6, (i) => ({ op: ["aten::addmm", "aten::relu", "aten::mm", "aten::sum", "aten::add", "aten::mul"][i], line: i + 10, kernel: i < 2 ? "dot.3" : "fusion.7", scope: i > 3 ? "Linear" : null }));

  it("parses line queries", () => {
    expect(parseQuery("12")).toEqual({ line: 12, text: null });
    expect(parseQuery("line 12")).toEqual({ line: 12, text: null });
    expect(parseQuery("L12")).toEqual({ line: 12, text: null });
    expect(parseQuery(":12")).toEqual({ line: 12, text: null });
    expect(parseQuery("  ")).toBeNull();
    expect(parseQuery("Relu")).toEqual({ line: null, text: "relu" });
    expect(parseQuery('"sin"')).toEqual({ line: null, text: "sin", exact: true });
    expect(parseQuery("=sin")).toEqual({ line: null, text: "sin", exact: true });
    expect(parseQuery("code: torch.sin")).toEqual({ line: null, text: "torch.sin", field: "code" });
  });

  it("finds nodes by op, line, kernel and scope", () => {
    expect(searchGraph(g, "relu")).toEqual([1]);
    expect(searchGraph(g, "add")).toEqual([4, 0]); // the exact op first (aten::add), then aten::addmm
    expect(searchGraph(g, "line 13")).toEqual([3]);
    expect(searchGraph(g, "13")).toEqual([3]);
    expect(searchGraph(g, "dot.3")).toEqual([0, 1]);
    expect(searchGraph(g, "linear")).toEqual([4, 5]);
    expect(searchGraph(g, "nothing")).toEqual([]);
    expect(searchGraph(g, "")).toEqual([]);
  });

  it("ranks op and kernel names before code and scope, and matches whole names in quotes", () => {
    // every node of a line carries its code: "sin" in the code must not drown the one aten::sin
    const h = chain(5, (i) => ({ op: ["aten::sin", "aten::mul", "aten::add", "prim::Constant", "aten::native_layer_norm"][i], line: 3,
      code: "h = torch.sin(h) * 1.01 + 0.1", scope: i === 3 ? "normalization.py:layer_norm" : null, kernel: "fusion.1" }));
    expect(searchNodes(h, "sin")).toEqual({ ids: [0], more: 4 });
    expect(searchGraph(h, "layer_norm")).toEqual([4]); // not the constant whose scope says layer_norm
    expect(searchGraph(h, "code:sin")).toEqual([0, 1, 2, 3, 4]);
    expect(searchGraph(h, '"add"')).toEqual([2]);
    expect(searchGraph(h, "=fusion")).toEqual([]);
    expect(searchGraph(h, '"fusion.1"')).toEqual([0, 1, 2, 3, 4]);
    expect(searchGraph(h, "normalization")).toEqual([3]); // no name matches: the scope does
  });
});
