import { describe, expect, it } from "vitest";
import { parseQuery, searchGraph } from "../src/core/search";
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
  });

  it("finds nodes by op, line, kernel and scope", () => {
    expect(searchGraph(g, "relu")).toEqual([1]);
    expect(searchGraph(g, "add")).toEqual([0, 4]);
    expect(searchGraph(g, "line 13")).toEqual([3]);
    expect(searchGraph(g, "13")).toEqual([3]);
    expect(searchGraph(g, "dot.3")).toEqual([0, 1]);
    expect(searchGraph(g, "linear")).toEqual([4, 5]);
    expect(searchGraph(g, "nothing")).toEqual([]);
    expect(searchGraph(g, "")).toEqual([]);
  });
});
