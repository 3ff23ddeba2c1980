import { describe, expect, it } from "vitest";
import { collapseGraph, collapseGroup, DEFAULT_COLLAPSE, expandGroup, parentGroupOf, revealNode, type GroupUnit } from "../src/core/collapse";
import { unitLabel } from "../src/core/dot";
import { bigGraph, chain } from "./fixtures";

describe("collapseGraph", () => {
  it("shows small graphs whole", () => {
    const g = chain(10);
    const v = collapseGraph(g, new Set());
    expect(v.collapsed).toBe(false);
    expect(v.units).toHaveLength(10);
    expect(v.edges).toHaveLength(9);
  });

  it("collapses a 5,000-node graph by scope with aggregated edges", () => {
    const g = bigGraph();
    const v = collapseGraph(g, new Set());
    expect(v.collapsed).toBe(true);
    expect(v.units).toHaveLength(20);
    expect(v.units.every((u) => u.kind === "group")).toBe(true);
    const first = v.units[0] as GroupUnit;
    expect(first.label).toBe("layer0");
    expect(first.members).toHaveLength(250);
    expect(first.lines).toEqual([1, 5]);
    // the chain crosses each layer boundary once
    expect(v.edges).toHaveLength(19);
    expect(v.edges.every((e) => e.count === 1)).toBe(true);
    // every node is mapped to a unit
    expect(v.unitOf.size).toBe(5000);
  });

  it("labels a line's group as its line reference, and a group's lines as a range of one cell", () => {
    const g = chain(400, (i) => ({ scope: i < 200 ? "enc" : "dec", line: 3 + (i % 5), cell: i < 200 ? 5 : i % 2 ? 6 : 7 }));
    const v = collapseGraph(g, new Set());
    const [enc, dec] = v.units as GroupUnit[];
    expect([enc.label, enc.cell, enc.lines]).toEqual(["enc", 5, [3, 7]]);
    expect(unitLabel(enc)).toContain("200 nodes \u00b7 [5]:3-7");
    expect(dec.cell).toBeNull(); // two cells: which one is not known
    expect(unitLabel(dec)).toContain("200 nodes \u00b7 [?]:3-7");
    const open = collapseGraph(g, new Set(["s:enc"]));
    const lines = open.units.filter((u): u is GroupUnit => u.kind === "group" && u.id.startsWith("s:enc/"));
    expect(lines.map((u) => u.label)).toEqual(["[5]:3", "[5]:4", "[5]:5", "[5]:6", "[5]:7"]);
    expect(unitLabel(lines[0]).split("\n")[1]).toBe("40 nodes"); // (no range beside a line's own label)
    const nocell = collapseGraph(chain(400, (i) => ({ scope: i < 200 ? "a" : "b", line: 3 + (i % 2), cell: null })), new Set());
    expect(unitLabel(nocell.units[0])).toContain("[?]:3-4");
  });

  it("expands a group into its lines, then a line into nodes", () => {
    const g = bigGraph();
    let open = expandGroup(g, new Set(), "s:layer3");
    let v = collapseGraph(g, open);
    const lines = v.units.filter((u) => u.kind === "group" && u.id.startsWith("s:layer3/"));
    expect(lines.map((u) => (u as GroupUnit).label)).toEqual(["[1]:1", "[1]:2", "[1]:3", "[1]:4", "[1]:5"]);
    expect(v.units).toHaveLength(19 + 5);
    open = expandGroup(g, open, "s:layer3/l:2");
    v = collapseGraph(g, open);
    expect(v.units.filter((u) => u.kind === "node")).toHaveLength(50);
    expect(v.units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxVisible);
    // the nodes of line 2 in layer 3 are themselves now
    expect(v.units[v.unitOf.get(3 * 250 + 60)!].kind).toBe("node");
    expect(parentGroupOf(open, g, 3 * 250 + 60)).toBe("s:layer3/l:2");
    // closing the layer closes the line inside it
    expect([...collapseGroup(open, "s:layer3")]).toEqual([]);
  });

  it("never lays out more than maxVisible units", () => {
    const g = bigGraph();
    let open = new Set<string>();
    for (let layer = 0; layer < 20; layer++) {
      open = expandGroup(g, open, `s:layer${layer}`);
      for (let line = 1; line <= 5; line++) open = expandGroup(g, open, `s:layer${layer}/l:${line}`);
      expect(collapseGraph(g, open).units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxVisible);
    }
  });

  it("chunks graphs whose nodes share one line and op, and bounds the number of groups", () => {
    const g = chain(5000, () => ({ line: 7, op: "aten::mul" }));
    const v = collapseGraph(g, new Set());
    expect(v.units.length).toBeGreaterThan(1);
    expect(v.units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxChildren);
    const sum = v.units.reduce((a, u) => a + (u.kind === "group" ? u.members.length : 1), 0);
    expect(sum).toBe(5000);
    // thousands of distinct scopes are chunked too
    const g2 = chain(3000, (i) => ({ scope: `s${i}` }));
    expect(collapseGraph(g2, new Set()).units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxChildren);
  });

  it("shows groups smaller than minGroup as their nodes", () => {
    const g = chain(400, (i) => ({ line: i < 3 ? 1 : 2 + Math.floor(i / 100) }));
    const v = collapseGraph(g, new Set());
    expect(v.units.slice(0, 3).map((u) => u.kind)).toEqual(["node", "node", "node"]);
    expect(v.units.slice(3).every((u) => u.kind === "group")).toBe(true);
  });

  it("reveals a searched node by opening its groups", () => {
    const g = bigGraph();
    const open = revealNode(g, new Set(), 4321);
    const v = collapseGraph(g, open);
    const u = v.units[v.unitOf.get(4321)!];
    expect(u.kind).toBe("node");
    expect(v.units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxVisible);
  });

  it("collapses 5,000 nodes quickly", () => {
    const g = bigGraph();
    const t = performance.now();
    for (let i = 0; i < 10; i++) collapseGraph(g, new Set(["s:layer1", "s:layer1/l:1"]));
    expect((performance.now() - t) / 10).toBeLessThan(100);
  });
});
