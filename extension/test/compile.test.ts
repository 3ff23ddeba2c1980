// The panel's `compile` section (panel_model.compile_model): its validator on a real sample (fixtures/
// compile_panel.json (recorded before execution_wait_ns was: null there): a 2-layer TransformerEncoder train step compiled by XLA's CPU client), the phase bar,
// the one-line comparison of two runs (the strings Python's compare_line writes for the same inputs), and
// the Compile tab's DOM on the fake document.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  compareCompileEntries, compareCompiles, compilesBySize, fmtCompileSeconds, grownLine, phaseSegments, pyFixed, sortCompileKernels, threadNote,
} from "../src/core/compile";
import { parsePanelModel, type CompileEntry, type CompileLine } from "../src/core/model";
import { FakeEl, useFakeDocument } from "./fakedom";
import { validModel } from "./fixtures";

const SAMPLE = JSON.parse(readFileSync(new URL("./fixtures/compile_panel.json", import.meta.url), "utf8")) as Record<string, any>[];
const raw = () => structuredClone(SAMPLE);
const withCompile = (compile: unknown) => ({ ...(validModel() as object), compile });
const parseCompile = (compile: unknown): CompileEntry[] => parsePanelModel(withCompile(compile)).compile;

describe("the compile section's validator", () => {
  it("accepts the real sample and keeps it as it came", () => {
    const [c] = parsePanelModel(withCompile(raw())).compile;
    expect(c).toEqual(SAMPLE[0]);
    expect(c.compile_ns).toBeCloseTo(2.975675926e9);
    expect(c.counts).toEqual({ hlo_before: 1318, hlo_after: 10208, kernels: 228, functions: 141 });
    expect(c.phases.map((p) => p.name)).toEqual(["HLO passes", "kernel emission", "LLVM codegen", "backend: untraced",
      "client: before the HLO passes", "client: outside the compiler"]);
    expect(c.phases.reduce((a, p) => a + p.ns, 0)).toBeCloseTo(c.compile_ns, -3);
    expect(c.kernels).toHaveLength(104);
    expect(c.kernels[0].lines[0]).toMatchObject({ cell: 1, line: 3 });
    expect(c.lines[0]).toMatchObject({ label: "[1]:3", kernels: 104, ref: { cell: 1, line: 3 } });
    expect(c.untimed.map((u) => u.kernels.length).reduce((a, b) => a + b, 0)).toBe(124);
    expect(c.passes.find((p) => p.name === "RunInvariantCheckers")?.count).toBe(54);
  });

  it("reads a run without compiles as no compiles; a section that is not a list is refused", () => {
    expect(parsePanelModel(validModel()).compile).toEqual([]);
    expect(() => parsePanelModel(withCompile(null))).toThrow(/model\.compile: /);
  });

  it("reads optional figures as null, and a line without a reference", () => {
    const c = raw()[0];
    c.lowering_ns = null; c.kernel_threads = null; c.module = null; c.graph_name = null;
    c.counts = {}; c.codegen = {};
    c.kernels[0].op_count = null;
    c.lines.push({ ref: null, label: "(no line)", ns: 5, share: 0, kernels: 1, top_kernels: ["x"] });
    c.advice = [{ kind: "heavy_line", text: "split it", where: "[1]:3", line: { file: "m.py", line: 9, code: "y = f(x)" } }];
    const [p] = parseCompile([c]);
    expect([p.lowering_ns, p.kernel_threads, p.module, p.graph_name, p.kernels[0].op_count]).toEqual([null, null, null, null, null]);
    expect(p.execution_wait_ns).toBeNull();  // (captures saved before it was recorded)
    expect(p.counts).toEqual({});
    expect(p.lines[1].ref).toBeNull();
    expect(p.advice[0].line).toEqual({ file: "m.py", line: 9, code: "y = f(x)" });
  });

  it("rejects a wrong type anywhere with its path", () => {
    const bad = (edit: (c: Record<string, any>) => void) => { const c = raw(); edit(c[0]); return () => parsePanelModel(withCompile(c)); };
    expect(() => parsePanelModel(withCompile({}))).toThrow("model.compile: Instance type \"object\" is invalid. Expected \"array\".");
    expect(() => parsePanelModel(withCompile(["x"]))).toThrow(/model\.compile\[0\]: .*Expected "object"/);
    expect(bad((c) => { c.compile_ns = "2.9e9"; })).toThrow(/model\.compile\[0\]\.compile_ns: .*Expected "number"/);
    expect(bad((c) => { delete c.graph_hash; })).toThrow(/model\.compile\[0\]: .*required property "graph_hash"/);
    expect(bad((c) => { c.phases[1].share = "23%"; })).toThrow(/model\.compile\[0\]\.phases\[1\]\.share: /);
    expect(bad((c) => { c.passes[4].count = "54"; })).toThrow(/model\.compile\[0\]\.passes\[4\]\.count: .*Expected "integer"/);
    expect(bad((c) => { c.counts.kernels = "228"; })).toThrow(/model\.compile\[0\]\.counts\.kernels: /);
    expect(bad((c) => { c.codegen = [1]; })).toThrow(/model\.compile\[0\]\.codegen: .*Expected "object"/);
    expect(bad((c) => { c.kernels[3].lines[0].line = "3"; })).toThrow(/model\.compile\[0\]\.kernels\[3\]\.lines\[0\]\.line: /);
    expect(bad((c) => { c.kernels[0].aten_ops = "aten::add"; })).toThrow(/model\.compile\[0\]\.kernels\[0\]\.aten_ops: .*Expected "array"/);
    expect(bad((c) => { c.untimed[2].kernels = [1]; })).toThrow(/model\.compile\[0\]\.untimed\[2\]\.kernels\[0\]: .*Expected "string"/);
    expect(bad((c) => { c.lines[0].kernels = ["a", "b"]; })).toThrow(/model\.compile\[0\]\.lines\[0\]\.kernels: .*Expected "integer"/);
    expect(bad((c) => { c.model_lines[0].ref = "[1]:3"; })).toThrow(/model\.compile\[0\]\.model_lines\[0\]\.ref: /);
    expect(bad((c) => { c.advice = [{ kind: "x", text: 5, where: null, line: null }]; })).toThrow(/model\.compile\[0\]\.advice\[0\]\.text: .*Expected "string"/);
    expect(bad((c) => { c.text = ["ok", 7]; })).toThrow(/model\.compile\[0\]\.text\[1\]: .*Expected "string"/);
  });
});

describe("the phase bar", () => {
  it("is one segment per phase of the sample, side by side, filling the bar", () => {
    const [c] = parseCompile(raw());
    const segs = phaseSegments(c);
    expect(segs.map((s) => s.name)).toEqual(c.phases.map((p) => p.name));
    expect(segs.map((s) => s.tone)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(segs.reduce((a, s) => a + s.width, 0)).toBeCloseTo(100, 6);
    for (let i = 1; i < segs.length; i++) expect(segs[i].left).toBeCloseTo(segs[i - 1].left + segs[i - 1].width, 9);
    expect(segs[2]).toMatchObject({ name: "LLVM codegen", label: "LLVM codegen 1.73 s (58.2%)" });
    expect(segs[2].width).toBeCloseTo(58.1663, 3);
  });

  it("leaves out phases without time, gives unknown phases the spare tones, and scales shares over 100%", () => {
    const segs = phaseSegments({ phases: [
      { name: "HLO passes", ns: 6, share: 0.6 }, { name: "idle", ns: 0, share: 0 }, { name: "new phase", ns: 3, share: 0.3 },
      { name: "another", ns: 2, share: 0.2 }, { name: "LLVM codegen", ns: 1, share: 0.1 }] });
    expect(segs.map((s) => [s.name, s.tone])).toEqual([["HLO passes", 0], ["new phase", 6], ["another", 7], ["LLVM codegen", 2]]);
    expect(segs.map((s) => Math.round(s.width * 1000) / 1000)).toEqual([50, 25, 16.667, 8.333]);
    expect(segs[3].left + segs[3].width).toBeCloseTo(100, 9);
    expect(phaseSegments({ phases: [] })).toEqual([]);
  });
});

/** A compile of `ns` with `kernels` kernels and cell lines [cell]:line fed by `n` kernels each. */
function entry(ns: number, kernels: number | null, lines: [number, number, number][] = []): CompileEntry {
  const [base] = parseCompile(raw());
  const rows: CompileLine[] = lines.map(([cell, line, n]) => ({ ref: { cell, line, code: "x" }, label: `[${cell}]:${line}`, ns: 1, share: 0, kernels: n, top_kernels: [] }));
  return { ...base, compile_ns: ns, counts: { ...base.counts, kernels }, lines: rows };
}

describe("compareCompiles: the Compare line (Python's compare_line gives the same strings)", () => {
  const A = entry(3.0e9, 228, [[5, 3, 104], [5, 12, 20]]);
  const B = entry(6.3e9, 408, [[7, 3, 110], [7, 12, 200], [5, 12, 20]]);

  it("names the ratio, the kernels B has more of, and the line whose kernels grew most", () => {
    expect(compareCompiles([A], [B])).toBe("B compiled 2.1x longer than A (6.30 s vs 3.00 s): 180 more kernels, most from [7]:12");
    // lines matched by label: the first line of B that grew most
    expect(compareCompileEntries(entry(1e9, 5, [[1, 1, 5]]), entry(1.125e9, 8, [[1, 2, 4], [1, 3, 4]])))
      .toBe("B compiled 1.1x longer than A (1.12 s vs 1.00 s): 3 more kernels, most from [1]:2");
    expect(compareCompileEntries(A, entry(0, 1))).toBe("B compiled 0.0x shorter than A (0.00 s vs 3.00 s): 227 fewer kernels");
    expect(compareCompileEntries(entry(0, 1), entry(1e9, 12, [[1, 1, 3]]))).toBe("B compiled infx longer than A (1.00 s vs 0.00 s): 11 more kernels, most from [1]:1");
  });

  it("says fewer kernels without a line, and no line when none grew", () => {
    expect(compareCompiles([B], [A])).toBe("B compiled 0.5x shorter than A (3.00 s vs 6.30 s): 180 fewer kernels");
    expect(compareCompileEntries(entry(2e9, 5, [[1, 1, 5]]), entry(2e9, 8, [[1, 1, 5]]))).toBe("B compiled 1.0x longer than A (2.00 s vs 2.00 s): 3 more kernels");
  });

  it("leaves out the kernels when their count is the same or unknown; rounds ties as Python does", () => {
    expect(compareCompileEntries(entry(4e9, 10), entry(9e9, 10))).toBe("B compiled 2.2x longer than A (9.00 s vs 4.00 s)");
    expect(compareCompileEntries(entry(4e9, null), entry(1e9, 12))).toBe("B compiled 0.2x shorter than A (1.00 s vs 4.00 s)");
    expect([pyFixed(2.25, 1), pyFixed(0.125, 2), pyFixed(0.15, 1), pyFixed(1.005, 2), pyFixed(2.35, 1), pyFixed(0.5, 0), pyFixed(1.5, 0)])
      .toEqual(["2.2", "0.12", "0.1", "1.00", "2.4", "0", "2"]);
    expect([fmtCompileSeconds(null), fmtCompileSeconds(2975675926)]).toEqual(["?", "2.98 s"]);
  });

  it("compares the largest compile of each run, and needs a compile section in both", () => {
    const small = entry(0.5e9, 20, [[7, 12, 1]]);
    expect(compareCompiles([small, A], [B, small])).toBe(compareCompileEntries(A, B));
    expect(compilesBySize([small, A, B]).map((c) => c.compile_ns)).toEqual([6.3e9, 3.0e9, 0.5e9]);
    expect(compareCompiles([], [B])).toBeNull();
    expect(compareCompiles([A], [])).toBeNull();
  });

  it("finds the grown line by label, a line without a reference by its label", () => {
    const noRef: CompileLine = { ref: null, label: "(no line)", ns: 1, share: 0, kernels: 9, top_kernels: [] };
    expect(grownLine(A.lines, [...B.lines, noRef])?.label).toBe("[7]:12");
    expect(grownLine([], [noRef])?.label).toBe("(no line)");
    expect(grownLine(B.lines, B.lines)).toBeNull();
    expect(grownLine(B.lines, B.lines.map((ln) => ({ ...ln, kernels: ln.kernels - 1 })))).toBeNull();
  });
});

describe("the kernel table's order and the thread note", () => {
  const [c] = parseCompile(raw());
  it("sorts by compile time (longest first), name, kind or op count", () => {
    const byTime = sortCompileKernels(c.kernels, "ns");
    expect(byTime[0].name).toBe("bitcast_concatenate_fusion.1.clone");
    for (let i = 1; i < byTime.length; i++) expect(byTime[i - 1].ns).toBeGreaterThanOrEqual(byTime[i].ns);
    const names = sortCompileKernels(c.kernels, "name").map((k) => k.name);
    expect(names).toEqual([...names].sort());
    const withNull = [{ ...c.kernels[0], name: "a", op_count: null }, { ...c.kernels[1], name: "b", op_count: 3 }, { ...c.kernels[2], name: "c", op_count: 9 }];
    expect(sortCompileKernels(withNull, "op_count").map((k) => k.name)).toEqual(["c", "b", "a"]);
    expect(sortCompileKernels(withNull, "op_count", false).map((k) => k.name)).toEqual(["b", "c", "a"]);
  });

  it("says thread time exceeds the wall time it overlaps, with the compile's figures", () => {
    expect(threadNote(c)).toBe("Kernel emission and LLVM codegen run on several threads at once, so their thread times (the kernels' times included) " +
      "exceed the wall time they overlap (kernel emission on 2 threads: 1.33 s of thread time in 698.10 ms of wall time; " +
      "LLVM codegen on 2 threads: 3.43 s of thread time in 1.73 s of wall time).");
    expect(threadNote({ ...c, kernel_threads: null, kernel_thread_ns: null, codegen: { ns: null, functions: null, parts: null, thread_ns: null, threads: null } }))
      .toBe("Kernel emission and LLVM codegen run on several threads at once, so their thread times (the kernels' times included) exceed the wall time they overlap.");
  });
});

describe("the Compile tab's DOM", () => {
  useFakeDocument();
  const EVIL = "<img src=x onerror=alert(1)>";
  const byClass = (el: FakeEl, cls: string) => el.all().filter((e) => (e.getAttribute("class") ?? "").split(" ").includes(cls));
  const rowsOf = (el: FakeEl) => byClass(el, "xla-compile-kernel-table")[0].all().filter((e) => e.tagName === "TR" && e.getAttribute("data-kernel") !== null);

  it("shows the sync's wait for the step's own execution after the compile, from 1 ms", async () => {
    const { renderCompile } = await import("../src/panel/compile");
    const [c] = parseCompile(raw());
    const labels = (wait: number | null) => byClass(renderCompile([{ ...c, execution_wait_ns: wait }]) as unknown as FakeEl, "xla-stat")
      .map((s) => s.textContent);
    expect(labels(3.5e8)).toContain("350.00 msthen waited for its execution");
    expect(labels(2e5).join()).not.toContain("waited");
    expect(labels(null).join()).not.toContain("waited");
  });

  it("shows each compile, largest first: headline, phase bar, passes, kernels, lines, untimed kernels, the thread note", async () => {
    const { renderCompile } = await import("../src/panel/compile");
    const [c] = parseCompile(raw());
    const small = { ...c, graph_hash: "b".repeat(32), graph_name: "eval", step: 7, compile_ns: 1e9 };
    const el = renderCompile([small, c, { ...small, graph_hash: "c".repeat(32), compile_ns: 0.5e9 }]) as unknown as FakeEl;
    const entries = byClass(el, "xla-compile-entry");
    expect(entries.map((e) => e.getAttribute("data-graph"))).toEqual([c.graph_hash, small.graph_hash, "c".repeat(32)]);
    // the two largest open, the rest folded to their headline
    expect(entries.map((e) => e.hasAttribute("open"))).toEqual([true, true, false]);
    const first = entries[0];
    expect(byClass(first, "xla-compile-title")[0].textContent).toBe("Compile of step 0 (cell_1): 2.98 s CompileTime");
    const stats = byClass(first, "xla-stat").map((s) => s.textContent);
    expect(stats).toEqual(["2.98 sCompileTime", "41.04 mslowering (before it)", "1,318HLO before", "10,208HLO after", "228kernels", "141functions compiled", "90.3%explained"]);
    const segs = byClass(first, "xla-phase-seg");
    expect(segs.map((s) => s.getAttribute("data-phase"))).toEqual(c.phases.map((p) => p.name));
    expect(segs[2].getAttribute("style")).toBe("width:58.17%");
    expect(segs[2].getAttribute("title")).toBe("LLVM codegen 1.73 s (58.2%)");
    expect(byClass(first, "xla-phase-legend")[0].textContent).toContain("kernel emission 698.10 ms (23.5%)");
    expect(byClass(first, "xla-compile-threads")[0].textContent).toBe(threadNote(c));
    const passes = byClass(first, "xla-compile-pass-table")[0].all().filter((e) => e.tagName === "TR" && e.getAttribute("data-pass") !== null);
    expect(passes.map((p) => p.getAttribute("data-pass"))).toEqual(["fusion", "copy-insertion", "algsimp", "cpu-parallel-task-assigner", "RunInvariantCheckers", ...passes.slice(5).map((p) => p.getAttribute("data-pass"))]);
    expect(passes[4].textContent).toContain("HLO verifier (RunInvariantCheckers)");
    expect(passes).toHaveLength(8);
    expect(byClass(first, "xla-compile-pipeline-table")[0].textContent).toContain("HLO passes after layout assignment");
    expect(byClass(first, "xla-compile-kernels")[0].all().find((e) => e.tagName === "H4")!.textContent).toBe("Kernels by compile time (104 timed of 228)");
    expect(byClass(first, "xla-compile-line").map((r) => r.getAttribute("data-line"))).toEqual(["[1]:3"]);
    // the model's lines are the cell's here: said, not repeated
    expect(first.textContent).toContain("The model's own lines (the innermost frames outside torch) are the cell's lines above.");
    const untimed = byClass(first, "xla-compile-untimed")[0];
    expect(untimed.all().find((e) => e.tagName === "H4")!.textContent).toBe("Kernels without a compile time of their own (124)");
    expect(untimed.all().filter((e) => e.getAttribute("data-reason") !== null)).toHaveLength(3);
    expect(byClass(first, "xla-compile-text")[0].textContent).toContain(c.text[0]);
    expect(byClass(first, "xla-compile-advice")).toHaveLength(0);
  });

  it("sorts the kernels, shows them all on request, links lines to the notebook and kernels to the Fusion map", async () => {
    const { renderCompile } = await import("../src/panel/compile");
    const [c] = parseCompile(raw());
    const shown: unknown[] = [], opened: [string, string][] = [];
    const el = renderCompile([c], { onSource: (r) => shown.push(r), onKernel: (hsh, k) => opened.push([hsh, k]),
      hasKernel: (_, k) => k !== "bitcast_concatenate_fusion.clone" }) as unknown as FakeEl;
    let rows = rowsOf(el);
    expect(rows).toHaveLength(50);
    expect(rows[0].getAttribute("data-kernel")).toBe("bitcast_concatenate_fusion.1.clone");
    const more = byClass(el, "xla-show-all").find((b) => b.textContent === "show all 104 kernels")!;
    more.dispatch("click");
    expect(rowsOf(el)).toHaveLength(104);
    const nameHead = el.all().find((e) => e.getAttribute("data-sort") === "name")!;
    nameHead.dispatch("click");
    rows = rowsOf(el);
    const names = rows.map((r) => r.getAttribute("data-kernel")!);
    expect(names).toEqual([...names].sort());
    expect(el.all().find((e) => e.getAttribute("data-sort") === "name")!.getAttribute("aria-sort")).toBe("ascending");
    // a kernel the Fusion map has opens there; one it lacks is not a link
    rows[0].dispatch("click");
    expect(opened).toEqual([[c.graph_hash, names[0]]]);
    const unlinked = rows.find((r) => r.getAttribute("data-kernel") === "bitcast_concatenate_fusion.clone")!;
    expect(unlinked.getAttribute("class")).toBe("xla-compile-kernel-row");
    unlinked.dispatch("click");
    expect(opened).toHaveLength(1);
    // a line reference shows its line in the notebook
    byClass(rows[0], "xla-source-link")[0].dispatch("click");
    byClass(byClass(el, "xla-compile-line")[0], "xla-source-link")[0].dispatch("click");
    expect(shown).toEqual([{ cell: 1, line: 3, code: c.lines[0].ref!.code }, { cell: 1, line: 3, code: c.lines[0].ref!.code }]);
  });

  it("puts names, reasons, code and advice in as text, never as markup", async () => {
    const { renderCompile } = await import("../src/panel/compile");
    const c = raw()[0];
    c.graph_name = `g${EVIL}`; c.module = `m${EVIL}`;
    c.kernels[0].name = `k${EVIL}`; c.kernels[0].kind = `kind${EVIL}`; c.kernels[0].lines[0].code = `code${EVIL}`;
    c.phases[0].name = `phase${EVIL}`; c.passes[0].name = `pass${EVIL}`; c.pipelines[0].name = `pipe${EVIL}`;
    c.untimed[0].reason = `why${EVIL}`; c.untimed[0].kernels[0] = `u${EVIL}`;
    c.lines[0].ref.code = `line${EVIL}`; c.ops[0].op = `op${EVIL}`; c.text[0] = `text${EVIL}`;
    c.advice = [{ kind: "heavy_line", text: `advice${EVIL}`, where: null, line: { cell: 1, line: 3, code: EVIL } }];
    const el = renderCompile(parseCompile([c]), { onSource: () => undefined }) as unknown as FakeEl;
    expect(el.all().some((e) => e.tagName.toUpperCase() === "IMG")).toBe(false);
    for (const t of [`g${EVIL}`, `m${EVIL}`, `k${EVIL}`, `kind${EVIL}`, `phase${EVIL}`, `pass${EVIL}`, `pipe${EVIL}`, `why${EVIL}`, `u${EVIL}`, `line${EVIL}`, `op${EVIL}`, `text${EVIL}`, `advice${EVIL}`]) {
      expect(el.textContent).toContain(t);
    }
    expect(byClass(el, "xla-advice")[0].getAttribute("data-kind")).toBe("heavy_line");
  });

  it("says so when there is no compile", async () => {
    const { renderCompile } = await import("../src/panel/compile");
    expect((renderCompile([]) as unknown as FakeEl).textContent).toContain("No compile profile");
  });
});
