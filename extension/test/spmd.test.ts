// The Sharding tab's pure logic on a real SPMD summary (fixtures/spmd.json: a 2x2 "data" x "model" mesh,
// an MLP with sharded weights, batch and one mark_sharding inside the step, from xla_lab's spmd_summary),
// and its DOM on a minimal fake document: user text goes in as text nodes, never as markup.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { Graph } from "../src/core/model";
import {
  deviceColor, groupsText, hloNamesOfNodes, meshGrid, nodeShardings, parseSpmd, sourceText, spmdHeadline, splitTensors,
  SpmdError, type Spmd, type SpmdTensor,
} from "../src/core/spmd";
import { FakeEl, useFakeDocument } from "./fakedom";
import { node } from "./fixtures";

const RAW = JSON.parse(readFileSync(new URL("./fixtures/spmd.json", import.meta.url), "utf8"));
const spmd = parseSpmd(RAW)!;
const tensor = (name: string) => spmd.tensors.find((t) => t.name === name)!;
const devicesOf = (t: SpmdTensor) => meshGrid(t)!.cells.map((row) => row.map((c) => c.devices));

describe("parseSpmd", () => {
  it("reads spmd_summary's JSON", () => {
    expect(spmd.devices).toBe(4);
    expect(spmd.memory_per_device).toBe(true);
    expect(spmd.tensors.length).toBe(RAW.tensors.length);
    expect(spmd.collectives.map((c) => c.kind)).toEqual(RAW.collectives.map((c: { kind: string }) => c.kind));
    expect(spmd.collectives.every((c) => c.bytes > 0 && c.groups.length === 2 && c.group_size === 2)).toBe(true);
  });

  it("is null when absent and names the path of a malformed field", () => {
    expect(parseSpmd(undefined)).toBeNull();
    expect(parseSpmd(null)).toBeNull();
    expect(() => parseSpmd({ devices: 4, tensors: [{ name: 3 }] })).toThrow("spmd.tensors[0].name must be a string (got number)");
    expect(() => parseSpmd({ tensors: [{ name: "p", blocks: [{ tile: [0], ranges: [[0]], devices: [0] }] }] })).toThrow(SpmdError);
    expect(() => parseSpmd({ collectives: [{ name: "ar", groups: "{0,1}" }] })).toThrow(/collectives\[0\].groups must be an array/);
  });
});

describe("meshGrid on the 2x2 mesh", () => {
  it("draws a tensor split on both mesh axes as a 2x2 grid, one device per block", () => {
    const t = tensor("custom-call.11"); // h: f32[16,64], ("data", "model")
    const g = meshGrid(t)!;
    expect([g.rowsDim, g.colsDim]).toEqual([0, 1]);
    expect(g.rowRanges).toEqual(["[0:8]", "[8:16]"]);
    expect(g.colRanges).toEqual(["[0:32]", "[32:64]"]);
    expect(devicesOf(t)).toEqual([[[0], [1]], [[2], [3]]]);
    expect(g.devices).toEqual([0, 1, 2, 3]);
    expect(g.hiddenDims).toEqual([]);
  });

  it("keeps matrix orientation for a row split replicated on the other mesh axis", () => {
    expect(devicesOf(tensor("p2.4"))).toEqual([[[0, 1]], [[2, 3]]]); // x: ("data", None)
    expect(meshGrid(tensor("p2.4"))!.rowRanges).toEqual(["[0:8]", "[8:16]"]);
    expect(devicesOf(tensor("p1.2"))).toEqual([[[0, 2]], [[1, 3]]]); // w0: ("model", None)
    const w2 = meshGrid(tensor("p4.14"))!; // w2: (None, "model"): one row, two columns
    expect(w2.cells.length).toBe(1);
    expect(w2.colRanges).toEqual(["[0:32]", "[32:64]"]);
    expect(devicesOf(tensor("p4.14"))).toEqual([[[0, 2], [1, 3]]]);
  });

  it("draws a 1-D tensor as one row", () => {
    const g = meshGrid(tensor("p0.1"))!; // bias f32[64]
    expect(g.rowsDim).toBeNull();
    expect(g.rowRanges).toEqual([""]);
    expect(g.colRanges).toEqual(["[0:32]", "[32:64]"]);
    expect(devicesOf(tensor("p0.1"))).toEqual([[[0, 2], [1, 3]]]);
  });

  it("covers every device exactly once per copy, for every split tensor of the fixture", () => {
    const { split, whole } = splitTensors(spmd);
    expect(split.length).toBeGreaterThan(0);
    for (const t of split) {
      const g = meshGrid(t)!;
      const held = g.cells.flat().flatMap((c) => c.devices).sort();
      expect(held, t.name).toEqual([0, 1, 2, 3]);
      expect(g.cells.flat().every((c) => c.blocks === 1)).toBe(true);
    }
    for (const t of whole) expect(meshGrid(t)).toBeNull();
    expect(whole.map((t) => t.layout)).toContain("replicated");
  });

  it("merges the blocks of split dimensions beyond the first two", () => {
    const blocks = [];
    let d = 0;
    for (let i = 0; i < 2; i++) for (let j = 0; j < 2; j++) for (let k = 0; k < 2; k++) {
      blocks.push({ tile: [i, j, k], ranges: [[i * 2, i * 2 + 2], [j * 3, j * 3 + 3], [k, k + 1]] as [number, number][], devices: [d++] });
    }
    const t: SpmdTensor = { name: "p", role: "input 0", shape: "f32[4,6,2]", sharding: "", layout: "split 2 x 2 x 2", per_device_shape: "f32[2,3,1]", blocks, lines: [] };
    const g = meshGrid(t)!;
    expect([g.rowsDim, g.colsDim, g.hiddenDims]).toEqual([0, 1, [2]]);
    expect(g.cells[1][0]).toEqual({ row: 1, col: 0, devices: [4, 5], blocks: 2 });
    // a 3-D tensor split on its last dimension only: the last two dimensions are drawn
    const last: SpmdTensor = { ...t, blocks: [0, 1].map((k) => ({ tile: [0, 0, k], ranges: [[0, 4], [0, 6], [k, k + 1]] as [number, number][], devices: [k] })) };
    const g2 = meshGrid(last)!;
    expect([g2.rowsDim, g2.colsDim]).toEqual([1, 2]);
    expect(g2.rowRanges).toEqual(["[0:6]"]);
  });
});

describe("collectives and devices", () => {
  it("summarises like the Python text view", () => {
    const total = spmd.collectives.reduce((a, c) => a + c.bytes, 0);
    expect(total).toBe(RAW.collectives.reduce((a: number, c: { bytes: number }) => a + c.bytes, 0));
    expect(spmdHeadline(spmd)).toMatch(/^SPMD over 4 devices: 6 collectives moving [\d.]+ KiB per device per step$/);
    expect(groupsText([[0, 1], [2, 3]])).toBe("{0,1} {2,3}");
    expect(groupsText([[0], [1], [2], [3], [4]], 2)).toBe("{0} {1} \u2026 (5 groups)");
    expect(sourceText([{ cell: 1, line: 3 }, { cell: 1, line: 5 }])).toBe("[1]:3, [1]:5");
    expect(sourceText([], ["linear.py:134"])).toBe("linear.py:134");
    expect(sourceText([], [])).toBe("no source line");
    for (const c of spmd.collectives) expect(sourceText(c.lines, c.sources)).not.toBe("no source line");
  });

  it("gives each device its own colour", () => {
    const colours = new Set(Array.from({ length: 16 }, (_, d) => deviceColor(d)));
    expect(colours.size).toBe(16);
    expect(deviceColor(3)).toBe(deviceColor(3));
  });
});

describe("nodeShardings", () => {
  const graph: Graph = {
    name: "spmd", hash: "h", edges: [[2, 7]], roots: [7, 41],
    nodes: [node(2, { op: "xla::device_data", shape: "f32[16,32]{1,0}" }), node(6, { op: "aten::addmm", shape: "f32[16,64]{1,0}" }),
      node(7, { op: "xla::custom_sharding", shape: "f32[16,64]{1,0}" }), node(41, { op: "xla::custom_sharding", shape: "f32[64,32]{1,0}" }),
      node(50, { op: "xla::custom_sharding", shape: "f32[3,3]{1,0}" })],
  };
  const ir = [
    "IR (rebuilt from the HLO before optimization) {",
    "  %2 = f32[16,32]{1,0} xla::device_data(), location=xla_sharding.py:659, hlo=p2.4",
    "  %6 = f32[16,64]{1,0} aten::addmm(%2, %4, %5), location=linear.py:134, hlo=dot.5,reshape.6,add.10",
    "  %7 = f32[16,64]{1,0} xla::custom_sharding(%6), location=xla_sharding.py:659, hlo=custom-call.11, ROOT=0",
    "}",
  ].join("\n");

  it("reads the HLO names of the IR text", () => {
    expect(hloNamesOfNodes(ir).get(6)).toEqual(["dot.5", "reshape.6", "add.10"]);
    expect(hloNamesOfNodes(ir).get(7)).toEqual(["custom-call.11"]);
    expect(hloNamesOfNodes(null).size).toBe(0);
  });

  it("matches inputs and annotations through the HLO names, other annotations by shape in order", () => {
    const m = nodeShardings(graph, spmd, ir);
    expect(m.get(2)).toMatchObject({ via: "hlo", tensor: { name: "p2.4", role: "input 2" } });
    expect(m.get(7)).toMatchObject({ via: "hlo", tensor: { name: "custom-call.11" } });
    expect(m.get(41)).toMatchObject({ via: "order", tensor: { name: "custom-call.96" } });
    expect(m.get(50)).toEqual({ via: "none", tensor: null });
    expect(m.has(6)).toBe(false);
  });

  it("without HLO names matches annotation nodes only", () => {
    const m = nodeShardings(graph, spmd, undefined);
    expect(m.has(2)).toBe(false);
    expect(m.get(7)).toMatchObject({ via: "order", tensor: { name: "custom-call.11" } });
    expect(m.get(41)?.tensor?.name).toBe("custom-call.96");
    expect(nodeShardings(graph, null, ir).size).toBe(0);
  });
});

// --- DOM on a minimal fake document (fakedom.ts) -----------------------------------------------------

describe("the Sharding tab's DOM", () => {
  useFakeDocument();

  const EVIL = "<img src=x onerror=alert(1)>";
  function evilSpmd(): Spmd {
    const s = structuredClone(spmd);
    s.collectives[0].name = `all-reduce${EVIL}`;
    s.collectives[0].shape = `f32[8]${EVIL}`;
    s.collectives[0].lines = [{ cell: 1, line: 3, code: `y = f("${EVIL}")` }];
    const t = s.tensors.find((x) => x.name === "custom-call.11")!;
    t.shape = `f32[16,64]${EVIL}`;
    t.name = `custom-call.11${EVIL}`;
    t.lines = [{ cell: 1, line: 4, code: `xs.mark_sharding(h, mesh, "${EVIL}")` }];
    return s;
  }

  it("puts names, shapes and code in as text, never as markup", async () => {
    const { renderSharding } = await import("../src/panel/spmd");
    const s = evilSpmd();
    const el = renderSharding(s, { kernels: new Set([s.collectives[0].name]), onKernel: () => {} }) as unknown as FakeEl;
    const all = el.all();
    expect(all.some((e) => e.tagName === "IMG" || e.tagName === "img")).toBe(false);
    expect(el.textContent).toContain(`all-reduce${EVIL}`);
    expect(el.textContent).toContain(`f32[16,64]${EVIL}`);
    expect(el.textContent).toContain(`y = f("${EVIL}")`);
    // the SVG mesh picture of that tensor: a cell per block, labelled with its devices, coloured per device
    const card = all.find((e) => e.getAttribute("data-tensor") === `custom-call.11${EVIL}`)!;
    const cells = card.all().filter((e) => e.getAttribute("class") === "xla-mesh-cell");
    expect(cells.map((c) => c.getAttribute("data-devices"))).toEqual(["0", "1", "2", "3"]);
    expect(cells.map((c) => c.all().find((e) => e.tagName === "text")!.textContent)).toEqual(["dev 0", "dev 1", "dev 2", "dev 3"]);
    expect(cells[2].all().filter((e) => e.tagName === "rect")[0].getAttribute("fill")).toBe(deviceColor(2));
    expect(card.all().find((e) => e.tagName === "svg")!.ns).toBe("http://www.w3.org/2000/svg");
    // replicated tensors: one compact table row each
    const whole = all.filter((e) => e.tagName === "TR" && e.getAttribute("data-tensor") !== null && e.parent?.tagName === "TBODY");
    expect(whole.length).toBe(splitTensors(s).whole.length);
  });

  it("links a collective that is a kernel to the Fusion map", async () => {
    const { renderSharding } = await import("../src/panel/spmd");
    const picked: string[] = [];
    const el = renderSharding(spmd, { kernels: new Set(["all-reduce.2"]), onKernel: (k) => picked.push(k) }) as unknown as FakeEl;
    const links = el.all().filter((e) => e.getAttribute("data-kernel") !== null);
    expect(links.map((l) => l.getAttribute("data-kernel"))).toEqual(["all-reduce.2"]);
    links[0].dispatch("click");
    expect(picked).toEqual(["all-reduce.2"]);
    const rows = el.all().filter((e) => e.getAttribute("class") === "xla-collective-row");
    expect(rows.length).toBe(6);
    expect(rows[0].textContent).toContain("{0,1} {2,3}");
  });

  it("shows a node's sharding and says memory is per device", async () => {
    const { nodeShardingDetails } = await import("../src/panel/spmd");
    const { renderMemory } = await import("../src/panel/memory");
    const d = nodeShardingDetails({ tensor: tensor("p2.4"), via: "hlo" }) as unknown as FakeEl;
    expect(d.textContent).toContain("f32[16,32] \u2192 f32[8,32]");
    expect(d.textContent).toContain("split 2 x 1, each block on 2 devices");
    expect((nodeShardingDetails({ tensor: null, via: "none" }) as unknown as FakeEl).textContent).toContain("not in the graph's SPMD summary");
    const mem = renderMemory({ peak_bytes: 4096, parameter_bytes: 2048, allocations: 3, largest: [] }, 4) as unknown as FakeEl;
    expect(mem.textContent).toContain("per device (4 devices)");
    expect((renderMemory({ peak_bytes: 4096, largest: [] }) as unknown as FakeEl).textContent).not.toContain("per device");
  });
});
