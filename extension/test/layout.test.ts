// Graphviz (the same WASM the panel loads) on the views collapseGraph produces: every bounded view of a
// 5,000-node graph lays out well under the 2 s first-render goal.
import { instance } from "@viz-js/viz";
import { describe, expect, it } from "vitest";
import { collapseGraph, DEFAULT_COLLAPSE, expandGroup } from "../src/core/collapse";
import { toDot } from "../src/core/dot";
import type { Graph } from "../src/core/model";
import { chain } from "./fixtures";

function layered(): Graph {
  let seed = 1;
  const rnd = (n: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return (seed >>> 8) % n; };
  const ops = ["aten::addmm", "aten::relu", "aten::add", "aten::mul", "aten::softmax"];
  const nodes = Array.from({ length: 5000 }, (_, i) => ({ id: i, op: ops[i % 5], shape: "f32[8,128]", cell: 1,
    line: 1 + Math.floor((i % 250) / 50), code: "x", scope: `layer${Math.floor(i / 250)}`, kernel: `fusion.${rnd(40)}` }));
  const edges: [number, number][] = [];
  for (let i = 1; i < 5000; i++) {
    edges.push([i - 1, i]);
    if (i > 30 && rnd(2)) edges.push([i - 1 - rnd(30), i]); // skip connections
    if (i % 3 === 0) edges.push([0, i]); // one shared input feeding everything
  }
  return { name: "g", hash: "h", nodes, edges, roots: [] };
}

describe("layout of bounded views", () => {
  it("stays fast as groups open, up to maxVisible units", async () => {
    const viz = await instance();
    const g = layered();
    let open = new Set<string>();
    const clicks = [[], ["s:layer3", "s:layer3/l:2"], ["s:layer4", "s:layer4/l:1", "s:layer4/l:3"], ["s:layer4/l:2", "s:layer4/l:4", "s:layer4/l:5", "s:layer3/l:1"]];
    let largest = 0;
    for (const ids of clicks) {
      for (const id of ids) open = expandGroup(g, open, id);
      const v = collapseGraph(g, open);
      expect(v.units.length).toBeLessThanOrEqual(DEFAULT_COLLAPSE.maxVisible);
      expect(v.hubs.get(0)).toBe(1667); // 1666 shared uses + the chain edge
      largest = Math.max(largest, v.units.length);
      const t = performance.now();
      const r = viz.render(toDot(v), { format: "svg" });
      const ms = performance.now() - t;
      expect(r.status).toBe("success");
      expect(ms).toBeLessThan(2000);
    }
    expect(largest).toBeGreaterThan(300);
  }, 60_000);

  it("hides the edges of hub nodes only in big graphs, and labels them", () => {
    const small = chain(10);
    small.edges.push(...Array.from({ length: 8 }, (_, i) => [0, i + 2] as [number, number]));
    expect(collapseGraph(small, new Set(), { ...DEFAULT_COLLAPSE, hubDegree: 4 }).hubs.size).toBe(0);
    const big = chain(400, (i) => ({ line: Math.floor(i / 100) }));
    for (let i = 2; i < 400; i += 2) big.edges.push([0, i]);
    const v = collapseGraph(big, new Set());
    expect(v.hubs.get(0)).toBe(200);
    // only the chain's edges between the four line groups remain
    expect(v.edges.map((e) => e.count)).toEqual([1, 1, 1]);
    const open = collapseGraph(big, expandGroup(big, new Set(), "l:0"));
    expect(toDot(open)).toContain("200 uses (edges hidden)");
  });
});
