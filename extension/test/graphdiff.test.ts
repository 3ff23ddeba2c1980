import { describe, expect, it } from "vitest";
import { collapseGraph, DEFAULT_COLLAPSE } from "../src/core/collapse";
import { toDot } from "../src/core/dot";
import { DIFF_COLORS, describeDiff, diffGraphs, unitDiffStatus } from "../src/core/graphdiff";
import type { Graph } from "../src/core/model";
import { bigGraph, chain, node } from "./fixtures";

function mlp(batch: number, extra = false): Graph {
  // x -> mm -> add(bias) -> relu [-> mul]
  const nodes = [
    node(0, { op: "xla::device_data", shape: `f32[${batch},16]`, line: 2 }),
    node(1, { op: "xla::device_data", shape: "f32[16,32]", line: null }),
    node(2, { op: "aten::mm", shape: `f32[${batch},32]`, line: 3, code: "h = x @ w" }),
    node(3, { op: "aten::add", shape: `f32[${batch},32]`, line: 3, code: "h = x @ w" }),
    node(4, { op: "aten::relu", shape: `f32[${batch},32]`, line: 4, code: "h = h.relu()" }),
  ];
  const edges: [number, number][] = [[0, 2], [1, 2], [2, 3], [3, 4]];
  if (extra) { nodes.push(node(5, { op: "aten::mul", shape: `f32[${batch},32]`, line: 5, code: "h = h * 2" })); edges.push([4, 5]); }
  return { name: "g", hash: `h${batch}${extra}`, nodes, edges, roots: [nodes.length - 1] };
}

describe("diffGraphs", () => {
  it("finds two identical graphs identical, whatever their ids", () => {
    const a = mlp(8);
    const b = { ...mlp(8), nodes: mlp(8).nodes.map((n) => ({ ...n, id: n.id + 100 })), edges: mlp(8).edges.map(([s, d]) => [s + 100, d + 100] as [number, number]) };
    const d = diffGraphs(a, b);
    expect(d.identical).toBe(true);
    expect(d.counts).toEqual({ same: 5, added: 0, removed: 0, changed: 0 });
    expect(describeDiff(d)[0]).toMatch(/identical/);
  });

  it("marks a new batch size as changed shapes, and says so first", () => {
    const d = diffGraphs(mlp(8), mlp(6));
    expect(d.counts.changed).toBe(4); // the input and the three ops on it; the weight is the same
    expect(d.counts.same).toBe(1);
    const mm = d.merged.nodes.find((n) => n.op === "aten::mm")!;
    expect(mm.shape).toBe("f32[8,32] \u2192 f32[6,32]");
    expect(d.changes.find((c) => c.b?.op === "aten::mm")!.fields).toEqual(["shape"]);
    const text = describeDiff(d);
    expect(text[0]).toMatch(/^shape changed: /);
    expect(text.join("\n")).toContain("aten::mm: f32[8,32] \u2192 f32[6,32] ([1]:3)");
  });

  it("reports added and removed nodes, keeping removed ones (and their edges) in the merged graph", () => {
    const d = diffGraphs(mlp(8, true), mlp(8));
    expect(d.counts).toMatchObject({ removed: 1, added: 0, changed: 0, same: 5 });
    const removed = d.changes.find((c) => c.status === "removed")!;
    expect(removed.a!.op).toBe("aten::mul");
    expect(removed.id).toBeGreaterThan(4);
    expect(d.merged.nodes.map((n) => n.id)).toContain(removed.id);
    expect(d.merged.edges).toContainEqual([4, removed.id]);
    expect(d.merged.roots).toContain(removed.id);
    const back = diffGraphs(mlp(8), mlp(8, true));
    expect(back.counts).toMatchObject({ added: 1, removed: 0 });
    expect(describeDiff(back).join(" ")).toContain("1 node added: aten::mul ([1]:5)");
  });

  it("matches a node whose line moved as changed, not as removed + added", () => {
    const a = chain(3, (i) => ({ op: ["aten::sin", "aten::cos", "aten::exp"][i], line: i + 1 }));
    const b = chain(3, (i) => ({ op: ["aten::sin", "aten::cos", "aten::exp"][i], line: i === 2 ? 7 : i + 1 }));
    const d = diffGraphs(a, b);
    expect(d.counts).toMatchObject({ changed: 1, added: 0, removed: 0 });
    expect(d.changes[0].fields).toEqual(["line"]);
  });

  it("handles a missing graph on either side", () => {
    expect(diffGraphs(null, mlp(8)).counts.added).toBe(5);
    expect(diffGraphs(mlp(8), undefined).counts.removed).toBe(5);
    expect(diffGraphs(null, null).identical).toBe(true);
  });

  it("diffs two 5,000-node graphs quickly and the merged graph collapses like any other", () => {
    const a = bigGraph();
    const b = bigGraph();
    b.nodes[4000] = { ...b.nodes[4000], shape: "f32[8]" };
    const t = performance.now();
    const d = diffGraphs(a, b);
    expect(performance.now() - t).toBeLessThan(500);
    expect(d.counts.changed).toBe(1);
    const v = collapseGraph(d.merged, new Set(), DEFAULT_COLLAPSE);
    expect(v.collapsed).toBe(true);
    expect(v.units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxVisible);
    // exactly the group holding the changed node is coloured "changed"
    const marked = v.units.filter((u) => unitDiffStatus(u, d.status) !== "same");
    expect(marked).toHaveLength(1);
    expect(unitDiffStatus(marked[0], d.status)).toBe("changed");
    const dot = toDot(v, { fill: (u) => (unitDiffStatus(u, d.status) === "same" ? null : DIFF_COLORS[unitDiffStatus(u, d.status)]),
      className: (u) => `xla-diff-${unitDiffStatus(u, d.status)}` });
    expect(dot.match(new RegExp(DIFF_COLORS.changed, "g"))).toHaveLength(1);
    expect(dot).toContain('class="xla-group xla-diff-changed"');
  });

  it("colours a group by its members: all added, all removed, or mixed", () => {
    const status = new Map([[1, "added"], [2, "added"], [3, "removed"], [4, "same"]] as const);
    const group = (members: number[]) => ({ kind: "group" as const, id: "g", label: "g", level: 0, members, kernel: null, ops: [], lines: null, cell: null });
    expect(unitDiffStatus(group([1, 2]), status)).toBe("added");
    expect(unitDiffStatus(group([3]), status)).toBe("removed");
    expect(unitDiffStatus(group([1, 3]), status)).toBe("changed");
    expect(unitDiffStatus(group([4]), status)).toBe("same");
  });
});
