import { describe, expect, it } from "vitest";
import { collapseGraph } from "../src/core/collapse";
import { dotString, kernelColor, NO_KERNEL_COLOR, toDot, kernelPalette, hslHex } from "../src/core/dot";
import { chain, node } from "./fixtures";

describe("DOT", () => {
  it("escapes quotes, backslashes, newlines and Graphviz escapes", () => {
    expect(dotString('a"b')).toBe('"a\\"b"');
    expect(dotString("a\\b")).toBe('"a\\\\b"');
    expect(dotString("x\\N\\l")).toBe('"x\\\\N\\\\l"');
    expect(dotString("a\nb")).toBe('"a\\nb"');
    expect(dotString("tab\there")).toBe('"tab here"');
  });

  it("builds one statement per unit and edge, with labels quoted", () => {
    const g = chain(3, (i) => ({ op: i === 1 ? 'aten::weird"} digraph x {' : "aten::add", line: 4, code: "<img src=x onerror=alert(1)>", kernel: i === 2 ? "fusion.3" : null }));
    const dot = toDot(collapseGraph(g, new Set()), { name: 'my "graph"' });
    expect(dot.startsWith('digraph "my \\"graph\\"" {')).toBe(true);
    expect(dot).toContain('u1 [id="u1", label="weird\\"} digraph x { [1]:4\\nf32[4]"');
    expect(dot).toContain("u0 -> u1;");
    expect(dot).toContain("u1 -> u2;");
    expect(dot).toContain(`fillcolor="${kernelColor("fusion.3")}"`);
    expect(dot.trim().endsWith("}")).toBe(true);
    // balanced quotes on every line: no label broke out of its string
    for (const line of dot.split("\n")) expect((line.replace(/\\./g, "").match(/"/g) ?? []).length % 2).toBe(0);
  });

  it("draws groups as box3d with aggregated, thicker edges", () => {
    const nodes = Array.from({ length: 400 }, (_, i) => node(i, { scope: i < 200 ? "enc" : "dec" }));
    const edges: [number, number][] = nodes.slice(0, 200).map((_, i) => [i, 200 + i] as [number, number]);
    const dot = toDot(collapseGraph({ name: "g", hash: "h", nodes, edges, roots: [] }, new Set()));
    expect(dot).toContain("shape=box3d");
    expect(dot).toContain('tooltip="200 edges"');
    expect(dot.match(/->/g)).toHaveLength(1);
  });

  it("colours kernels stably", () => {
    expect(kernelColor("fusion.1")).toBe(kernelColor("fusion.1"));
    expect(kernelColor(null)).toBe(NO_KERNEL_COLOR);
    expect(new Set(Array.from({ length: 30 }, (_, i) => kernelColor(`fusion.${i}`))).size).toBeGreaterThan(5);
  });
});

describe("kernelPalette", () => {
  it("gives every kernel of a graph its own colour, the heaviest the palette's", () => {
    const names = ["fusion", "fusion.1", "fusion.2", "dot", "dot.1", "copy"];
    const color = kernelPalette(names.map((name, i) => ({ name, flops: i })));
    expect(new Set(names.map(color)).size).toBe(names.length);
    const many = Array.from({ length: 60 }, (_, i) => ({ name: `k.${i}`, flops: i }));
    const c2 = kernelPalette(many);
    expect(new Set(many.map((k) => c2(k.name))).size).toBe(60);
    expect(many.every((k) => /^#[0-9a-f]{6}$/.test(c2(k.name)))).toBe(true); // Graphviz reads hex only
    expect(hslHex(0, 1, 0.5)).toBe("#ff0000");
    expect(hslHex(120, 1, 0.5)).toBe("#00ff00");
    expect(c2(null)).toBe(NO_KERNEL_COLOR);
    expect(c2("not.in.graph")).toBe(kernelColor("not.in.graph"));
  });
});
