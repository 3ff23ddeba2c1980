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

  it("rejects a wrong schema with a clear message", () => {
    expect(() => parsePanelModel({ schema: "something/1" })).toThrow(/not an xla_lab panel model/);
    expect(() => parsePanelModel({ ...validModel(), schema: "xla_lab.panel/9" })).toThrow(/not readable by this panel/);
    expect(() => parsePanelModel("{not json")).toThrow(PanelModelError);
    expect(() => parsePanelModel(null)).toThrow(/model must be an object \(got null\)/);
  });

  it("names the path of a malformed field", () => {
    const m = validModel() as any;
    m.graphs.h.nodes[1].op = 42;
    expect(() => parsePanelModel(m)).toThrow("model.graphs[\"h\"].nodes[1].op must be a string (got number)");
    const m2 = validModel() as any;
    m2.graphs.h.edges.push([0, 99]);
    expect(() => parsePanelModel(m2)).toThrow(/edges\[2\] refers to a node that does not exist/);
    const m3 = validModel() as any;
    m3.summary.compile_s = "fast";
    expect(() => parsePanelModel(m3)).toThrow(/model.summary.compile_s must be a finite number/);
    const m4 = validModel() as any;
    m4.capture.artifacts.h.fusions[0].members = "add.1";
    expect(() => parsePanelModel(m4)).toThrow(/fusions\[0\].members must be an array/);
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
