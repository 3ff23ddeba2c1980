import { describe, expect, it } from "vitest";
import {
  CAPTURE_MIME, CaptureStore, QUIET_MIME, captureKey, defaultPair, captureOfIopub, captureOfOutput, compareSteps, quietCaptureOfIopub, recompileReason, resolveSourceLine,
  stepId, stepIdOf, stepLabel, stepListOf, stepRefOf,
} from "../src/core/captures";
import { chain, validModel } from "./fixtures";

/** A panel model of one run of cell `cellId`: `steps` graphs hashes, with batch `batch` in the shapes; `rows`: the
 * summary's step rows (none: one per step, as Python writes steps it does not fold). */
function runModel(cellId: string, count: number, startedAt: number, batch: number, steps: [string, string][] = [["ha", "miss"]], rows?: object[]) {
  const m = validModel() as Record<string, any>;
  const graphs: Record<string, unknown> = {};
  const artifacts: Record<string, unknown> = {};
  for (const [hash] of steps) {
    graphs[hash] = { ...chain(3, (i) => ({ line: i + 2, shape: `f32[${batch},4]`, op: ["aten::mm", "aten::add", "aten::relu"][i] })), hash };
    // the Python side may trim raw texts: no hlo_after here, and no metadata
    artifacts[hash] = { graph_hash: hash, hlo_before: `HloModule m\nENTRY e {\n  p = f32[${batch},4] parameter(0)\n}\n`, fusions: [], memory: null };
  }
  return {
    ...m, main_graph: steps[0][0], graphs,
    capture: { ...m.capture, cell_id: cellId, execution_count: count, started_at: startedAt, artifacts,
      steps: steps.map(([hash, cache], index) => ({ index, graph_name: "train", graph_hash: hash, cache, sync_cause: "torch_xla.sync()", sync_line: 7,
        sync_code: null, timings: {}, fallback_ops: {}, saved_s: null, recompile_reason: index === 1 ? "optimizer state created on step 0" : null })) },
    summary: { ...m.summary, steps: steps.length, recompiles: [],
      rows: rows ?? steps.map(([hash, cache], i) => ({ steps: String(i), first: i, last: i, count: 1, cache, cause: "torch_xla.sync()",
        ref: { cell: count, line: 7, code: null }, graph: hash, compile_s: null, execute_s: null, trace_s: null,
        text: `${i} | ${cache} | torch_xla.sync() @ [${count}]:7` })) },
  };
}

describe("captures in notebook outputs", () => {
  it("reads the capture of a saved output (nbformat) and ignores other outputs", () => {
    const model = runModel("cell-a", 3, 10, 8);
    expect(captureOfOutput({ output_type: "display_data", data: { "text/plain": "x", [CAPTURE_MIME]: model }, metadata: {} })).toBe(model);
    expect(captureOfOutput({ output_type: "execute_result", data: { [CAPTURE_MIME]: model }, execution_count: 3 })).toBe(model);
    expect(captureOfOutput({ output_type: "stream", name: "stdout", text: "hi" })).toBeNull();
    expect(captureOfOutput({ output_type: "error", ename: "E", evalue: "", traceback: [] })).toBeNull();
    expect(captureOfOutput({ output_type: "display_data", data: { "text/plain": "x" } })).toBeNull();
    expect(captureOfOutput(null)).toBeNull();
    // JupyterLab's output model .toJSON() has the same shape; a bare {data} too
    expect(captureOfOutput({ data: { [CAPTURE_MIME]: model } })).toBe(model);
  });

  it("reads the capture of a live iopub message", () => {
    const model = runModel("cell-a", 3, 10, 8);
    const msg = (type: string, content: object) => ({ header: { msg_type: type, msg_id: "1" }, parent_header: {}, metadata: {}, content, channel: "iopub" });
    expect(captureOfIopub(msg("display_data", { data: { [CAPTURE_MIME]: model }, metadata: {} }))).toBe(model);
    expect(captureOfIopub(msg("update_display_data", { data: { [CAPTURE_MIME]: model }, metadata: {}, transient: {} }))).toBe(model);
    expect(captureOfIopub(msg("status", { execution_state: "idle" }))).toBeNull();
    expect(captureOfIopub(msg("stream", { name: "stdout", text: "x" }))).toBeNull();
    expect(captureOfIopub({})).toBeNull();
  });

  it("keys a run without parsing it, also from JSON text", () => {
    const model = runModel("cell-a", 3, 10.5, 8);
    expect(captureKey(model)).toBe("cell-a|3|10.5");
    expect(captureKey(JSON.stringify(model))).toBe("cell-a|3|10.5");
    expect(captureKey("{oops")).toBeNull();
    expect(captureKey({ schema: "x" })).toBeNull();
  });
});

describe("CaptureStore", () => {
  it("lists a saved run and the live run of the same notebook cell once each, as runs 1 and 2", () => {
    // nbclient saved the output (cell id from the source), JupyterLab ran it again (its own cell id)
    const s = new CaptureStore();
    const saved = runModel("source-1a2b", 4, 10, 8);
    const live = runModel("5f0c-jupyterlab", 4, 20, 8);
    s.add(saved, "nb-cell-4", "saved");
    s.add(live, "nb-cell-4", "live");
    const cells = s.cells(["nb-cell-4"]);
    expect(cells).toHaveLength(1);
    expect(cells[0].runs.map((e) => [e.run, e.origin])).toEqual([[1, "saved"], [2, "live"]]);
    const labels = s.steps(["nb-cell-4"]).map(stepLabel);
    expect(new Set(labels).size).toBe(labels.length); // every compare choice tells itself apart
  });

  it("keeps runs of a cell, numbers them oldest first, and dedupes the same capture seen live and saved", () => {
    const s = new CaptureStore();
    const r2 = runModel("cell-a", 5, 20, 6);
    const row = (first: number, last: number, cache: string) => ({ steps: first === last ? String(first) : `${first}-${last} (${last - first + 1}x)`, first, last,
      count: last - first + 1, cache, cause: "torch_xla.sync()", ref: { cell: 3, line: 7, code: null }, graph: "hb", compile_s: null, execute_s: 0.1, trace_s: null,
      text: `${first === last ? first : `${first}-${last} (${last - first + 1}x)`} | ${cache} | torch_xla.sync() @ [3]:7` });
    const r1 = runModel("cell-a", 3, 10, 8, [["ha", "miss"], ["hb", "miss"], ["hb", "hit"], ["hb", "hit"]], [row(0, 0, "miss"), row(1, 1, "miss"), row(2, 3, "hit")]);
    expect(s.add(r2, null, "live")!.run).toBe(1);
    const e1 = s.add(r1, "nb-cell-1", "saved")!;
    expect(e1.run).toBe(1);
    expect(s.get(captureKey(r2)!)!.run).toBe(2);
    // the live one shows up in the outputs later: same entry, now tied to its cell
    const again = s.add(JSON.parse(JSON.stringify(r2)), "nb-cell-1", "live")!;
    expect(again).toBe(s.get(captureKey(r2)!));
    expect(again.cellModelId).toBe("nb-cell-1");
    expect(s.size).toBe(2);
    const cells = s.cells(["nb-cell-0", "nb-cell-1"]);
    expect(cells).toHaveLength(1);
    expect(cells[0].runs.map((e) => e.run)).toEqual([1, 2]);
    // steps in order; the summary's (folded) rows in the list, the line of a step from its row
    const steps = s.steps(["nb-cell-1"]);
    expect(steps.map((r) => `${r.entry.run}:${r.step.index}`)).toEqual(["1:0", "1:1", "1:2", "1:3", "2:0"]);
    expect(stepListOf(e1).map((r) => [r.first, r.last, r.cache])).toEqual([[0, 0, "miss"], [1, 1, "miss"], [2, 3, "hit"]]);
    expect(stepListOf(e1)[2].steps).toBe("2-3 (2x)");
    expect(stepRefOf(steps[3])).toEqual({ cell: 3, line: 7, code: null });
    expect(stepIdOf(e1, 2)).toBe(stepId(steps[2]));
    expect(stepLabel(steps[1])).toBe("[3] train run 1 (saved) \u00b7 step 1 (miss)");
    expect(s.find(stepId(steps[4]))!.step.index).toBe(0);
    expect(s.find("nope#1")).toBeNull();
    // the cell ran again: the old output is gone from the notebook, the run stays listed
    s.markPresent(new Set([captureKey(r2)!]));
    expect(e1.inNotebook).toBe(false);
  });

  it("refuses an output saved before summary.rows (its saved HTML shows instead), saying why", () => {
    const s = new CaptureStore();
    const old = runModel("cell-a", 3, 10, 8) as Record<string, any>;
    delete old.summary.rows;
    expect(s.add(old, "c", "saved")).toBeNull();
    expect(s.errors[0].message).toBe('invalid xla_lab panel model: model.summary: Instance does not have required property "rows".');
  });

  it("orders cells as the notebook does and reports unreadable captures without throwing", () => {
    const s = new CaptureStore();
    s.add(runModel("b", 2, 5, 8), "cell-b", "saved");
    s.add(runModel("a", 1, 9, 8), "cell-a", "saved");
    expect(s.cells(["cell-a", "cell-b"]).map((g) => g.cellId)).toEqual(["a", "b"]);
    expect(s.add({ schema: "xla_lab.panel/1", capture: { cell_id: "x", execution_count: 1, started_at: 1 }, graphs: { h: { nodes: "bad" } } }, "c", "saved")).toBeNull();
    expect(s.add("not json", "c", "saved")).toBeNull();
    expect(s.errors.length).toBe(2);
    expect(s.errors[0].message).toMatch(/model\.capture: .*required property/);
    expect(s.errors.map((e) => e.cellModelId)).toEqual(["c", "c"]); // the side panel names the cell
  });

  it("keeps a quiet cell's capture (never in the notebook's outputs) as a run of its cell", () => {
    const s = new CaptureStore();
    const saved = s.add(runModel("a", 1, 5, 8), "cell-a", "saved")!;
    const quiet = s.add(runModel("a", 2, 9, 8), null, "quiet")!;
    quiet.cellModelId = "cell-a";
    s.markPresent(new Set([saved.key]));
    expect(quiet.inNotebook).toBe(false);
    expect(s.cells(["cell-a"]).map((g) => g.runs.map((e) => e.origin))).toEqual([["saved", "quiet"]]);
    const steps = s.steps(["cell-a"]);
    expect(stepLabel(steps[steps.length - 1])).toContain("(quiet)");
    const msg = { header: { msg_type: "update_display_data" }, content: { data: { [QUIET_MIME]: { x: 1 } }, transient: { display_id: "q" } } };
    expect(quietCaptureOfIopub(msg)).toEqual({ x: 1 });
    expect(captureOfIopub(msg)).toBeNull(); // not an output of the cell
    expect(quietCaptureOfIopub({ ...msg, header: { msg_type: "display_data" } })).toBeNull();
  });

  it("completes a partial (quiet) run with the whole model the kernel sends, refusing another run's", async () => {
    const s = new CaptureStore();
    const full = runModel("q", 3, 7, 8);
    const partial = { ...full, partial: true, graphs: {}, main_graph: null, capture: { ...(full.capture as object), artifacts: {} } };
    const e = s.add(partial, "cell-q", "quiet")!;
    expect(e.model.partial).toBe(true);
    expect(await s.complete(e.key, runModel("q", 4, 7, 8))).toMatch(/another run/);
    expect(e.model.partial).toBe(true);
    expect(await s.complete(e.key, full)).toBeNull();
    expect(e.model.partial).toBe(false);
    expect(Object.keys(e.model.graphs)).toEqual(["ha"]);
    expect(e.origin).toBe("quiet");
    expect(await s.complete("nope", full)).toMatch(/no longer listed/);
  });
});

describe("compareSteps", () => {
  it("explains a recompile between two runs: different graphs, the shape that changed, HLO texts (absent ones null)", () => {
    const s = new CaptureStore();
    s.add(runModel("cell-a", 3, 10, 8, [["ha", "miss"]]), "c", "saved");
    s.add(runModel("cell-a", 5, 20, 6, [["hc", "miss"]]), "c", "live");
    const [a, b] = s.steps(["c"]);
    const cmp = compareSteps(a, b);
    expect(cmp.sameGraph).toBe(false);
    expect(cmp.diff.counts.changed).toBe(3);
    expect(cmp.reason[0]).toMatch(/^different graphs: ha vs hc; step B was a cache miss/);
    expect(cmp.reason.join("\n")).toContain("shape changed: aten::mm: f32[8,4] \u2192 f32[6,4] ([1]:2)");
    expect(cmp.hlo.before[0]).toContain("f32[8,4]");
    expect(cmp.hlo.before[1]).toContain("f32[6,4]");
    expect(cmp.hlo.after).toEqual([null, null]);
  });

  it("says when two steps ran the same graph, and gives the recorded recompile reason", () => {
    const s = new CaptureStore();
    s.add(runModel("cell-a", 3, 10, 8, [["ha", "miss"], ["hb", "miss"], ["hb", "hit"]]), "c", "saved");
    const [s0, s1, s2] = s.steps(["c"]);
    expect(compareSteps(s1, s2).reason[0]).toMatch(/^same graph \(hash hb\): step B reused the compiled graph/);
    expect(compareSteps(s1, s2).diff.identical).toBe(true);
    expect(recompileReason(s1)).toBe("optimizer state created on step 0");
    expect(compareSteps(s0, s1).reason).toContain("recorded reason: optimizer state created on step 0");
  });
});

describe("defaultPair", () => {
  it("offers the last recompile of a cell against the cell's step before it", () => {
    const s = new CaptureStore();
    s.add(runModel("train", 3, 10, 8, [["ha", "miss"], ["hb", "miss"], ["hb", "hit"]]), "c1", "live");
    s.add(runModel("train", 5, 20, 6, [["hc", "miss"], ["hc", "hit"]]), "c1", "live");
    s.add(runModel("big", 6, 30, 6, [["hd", "miss"]]), "c2", "live");
    const steps = s.steps(["c1", "c2"]);
    const [a, b] = defaultPair(steps)!;
    expect([a.entry.run, a.step.index, b.entry.run, b.step.index]).toEqual([1, 2, 2, 0]);
    expect(defaultPair(steps.slice(0, 1))).toBeNull();
  });
});

describe("resolveSourceLine", () => {
  // captured lines count from the cell body: torch_xla.sync() is line 3 of this %%xla cell
  const cell = "%%xla --name train\nfor step in range(3):\n    loss = f(x)\n    torch_xla.sync()";
  it("maps a body line to the notebook line, checking its text against the captured code", () => {
    expect(resolveSourceLine(cell, 3, "torch_xla.sync()")).toBe(4);
    expect(resolveSourceLine(cell, 2, null)).toBe(3);
    expect(resolveSourceLine("a = 1\nb = 2", 2, "b = 2")).toBe(2); // a plain cell has no magic line
  });
  it("finds the code nearest to the guess when the cell was edited, and clamps what it cannot find", () => {
    expect(resolveSourceLine(cell.replace("\n", "\n# a new line\n"), 3, "torch_xla.sync()")).toBe(5);
    expect(resolveSourceLine(cell, 99, "not there")).toBe(4);
    expect(resolveSourceLine("x\ny", -3, null)).toBe(1);
  });
});
