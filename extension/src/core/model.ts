// The panel model (schema "xla_lab.panel/1", built by xla_lab/view/panel_model.py): types and a validating parser.
// Pure logic: no DOM. The parser checks structure, not every optional field; it rejects what would make
// the views crash (wrong types where the views index or iterate) with a message naming the path.

import { stepRowText, unfoldedRows } from "./steps";

export const PANEL_SCHEMA = "xla_lab.panel/1";

/** A source line: a cell's (`cell`: its prompt, null when unknown) or a file's (`file`). lineRef (format.ts)
 * shows it: `[5]:3`, `modeling_bert.py:413`, `[?]:3`. */
export interface SourceRef { cell: number | null; line: number; file?: string | null; code?: string | null; function?: string | null }

export interface Kernel {
  name: string; kind: string; computation?: string;
  members: string[]; aten_ops: string[]; lines: SourceRef[]; sources: string[];
  shape: string; flops: number; bytes: number; collective?: boolean; lines_inferred?: boolean;
  /** the model's own lines: innermost frame outside torch / torch_xla (a cell, a module, a library) */
  model_lines: SourceRef[];
}

export interface BufferInfo {
  allocation?: number; bytes: number; kind: string; parameter?: number | null;
  instruction?: string | null; shape?: string; values?: number; source?: SourceRef | null;
}

export interface Memory {
  peak_bytes?: number; parameter_bytes?: number; output_bytes?: number; temp_bytes?: number;
  constant_bytes?: number; live_out_bytes?: number; allocations?: number; largest?: BufferInfo[];
}

export interface Artifacts {
  graph_hash: string; graph_name?: string | null;
  hlo_before?: string | null; hlo_after?: string | null;
  fusions?: Kernel[] | null; memory?: Memory | null;
  [k: string]: unknown;
}

export interface Step {
  index: number; graph_name: string | null; graph_hash: string; cache: string;
  sync_cause: string; sync_line?: number | null; sync_code?: string | null;
  timings: Record<string, number | null>; fallback_ops?: Record<string, number>;
  recompile_reason?: string | null; ir_nodes?: number | null;
}

export interface Capture {
  schema: string; cell_id: string; execution_count: number | null; source: string; started_at: number;
  graph_name?: string | null; steps: Step[]; artifacts: Record<string, Artifacts>;
  wall_s?: number | null; error?: string | null; notes?: string[];
  [k: string]: unknown;
}

export interface GraphNode {
  id: number; op: string; shape: string | null; cell: number | null; line: number | null;
  code: string | null; scope: string | null; kernel: string | null;
}

export interface Graph {
  name: string; hash: string; nodes: GraphNode[]; edges: [number, number][]; roots: number[];
  /** Why the graph has no nodes, when the kernel says (lean capture records no graph before optimization). */
  absent?: string | null;
}

/** One row of the step table (summary.rows), folded by the Python side (panel_model.py): a run of steps
 * with the same graph, cache result, cause and line. `text` is the row's one-line form (stepRowText). */
export interface StepRow {
  /** "0", or "3-199 (197x)" for a folded run */
  steps: string; first: number; last: number; count: number;
  cache: string; cause: string; ref: SourceRef | null;
  /** the graph's hash, 12 characters */
  graph: string;
  compile_s: number | null; execute_s: number | null; trace_s: number | null;
  text: string;
}

export interface Summary {
  /** the step table; a saved output without it gets one row per step (steps.ts unfoldedRows) */
  rows: StepRow[];
  steps: number; compiles: number; cache_hits: number; precompiled: number;
  trace_s: number; compile_s: number; execute_s: number; transfer_s: number;
  /** What syncs waited for their own step's execution, where measured (0 in outputs saved before it). */
  execution_wait_s: number;
  recompiles: { step: number; reason: string }[]; warnings: string[];
  /** The ranks of the cell's multi-process launches (xmp.spawn, torch_xla.launch); [] when none. */
  ranks: RankRow[];
}

export interface RankRow {
  launch: number; rank: number; device: string; steps: number; compiled: number; compile_s: number;
  step_s: number; mean_step_s: number | null; status: string; line: string;
}

export interface SourceLine { line: number; code: string; kernels: string[] }

/** A model file (a local module, a library such as transformers): its lines that feed kernels. */
export interface ModelFile { file: string; lines: (SourceLine & { function: string })[] }

export interface RunStep {
  index: number; cache: string;
  trace_s: number | null; compile_s: number | null; execute_s: number | null; transfer_s: number | null;
  /** What the step's sync waited for its own execution, when a profiler session measured it (absent in older outputs). */
  execution_wait_s?: number | null;
}

export interface Run { execution_count: number | null; started_at: number; steps: RunStep[] }

/** Measured time of a profiled cell (%%xla --profile): built by panel_model.profile_model. */
export interface ProfileKernel {
  graph_hash: string; name: string; kind: string; count: number; total_ns: number; mean_ns: number; longest_ns: number;
  share: number; flops: number; bytes: number; flops_per_s: number | null; bytes_per_s: number | null;
  roof_share: number | null; bound: string | null;
  /** the Python side's roofline words ("0.01% of the compute roof"), so the tab and the summary say the same */
  roof_text?: string | null;
  /** every recorded run (count: those its time is made of); what its time leaves out, in words */
  runs?: number | null; left_out_text?: string | null;
  /** the median run's duration (null: saved before it was recorded; mean_ns stands in) */
  median_ns?: number | null;
  /** cell lines, the model's lines and library frames, as a fusion kernel's (kernelLineText shows them) */
  lines: SourceRef[]; model_lines: SourceRef[]; sources: string[];
  /** an output saved before the lines were references: they as one text, shown as it is */
  lines_text?: string;
}
export interface ProfileLine {
  /** the Python side's text of the line (the tab shows lineRef of cell / line / file instead) */
  label?: string; cell: number | null; line: number | null; file: string | null; code: string | null;
  total_ns: number; share: number; kernels: string[];
}
export interface ProfileStep {
  step: number; cache: string; start_ns: number; span_ns: number; busy_ns: number; kernel_ns: number;
  idle_before_ns: number; host: Record<string, number>; execute_s: number | null;
  /** the step's kernels' compute time (each instant shared by the runs beside it; null: saved before it was measured) */
  compute_ns?: number | null;
  /** compute time of the runs left out of their kernels' time (one-time warm-ups, runs beside a compile) */
  left_out_ns?: number | null;
}
export interface ProfileCompareRow {
  name: string; before_mean_ns: number | null; after_mean_ns: number | null; before_total_ns: number; after_total_ns: number;
}
export interface Profile {
  peaks: { flops_per_s: number; bytes_per_s: number; source: string } | null;
  kernels: ProfileKernel[]; kernels_more: number; lines: ProfileLine[]; model_lines: ProfileLine[];
  ops: { op: string; total_ns: number; share: number }[]; steps: ProfileStep[];
  compare: { with: number | null; before_step_ns: number; after_step_ns: number; rows: ProfileCompareRow[] } | null;
  /** the cell's first steps that the session recorded (%%xla --profile-steps), of all its steps */
  recorded_steps?: number; cell_steps?: number;
}

/** Where one compile's seconds went (panel_model.compile_model): one entry per graph the run compiled. */
export interface CompilePhase { name: string; ns: number; share: number }
export interface CompilePipeline { name: string; ns: number }
/** an HLO pass by its own time; RunInvariantCheckers is the HLO verifier (run after many passes: `count`) */
export interface CompilePass { name: string; ns: number; count: number }
export interface CompileCounts { hlo_before: number | null; hlo_after: number | null; kernels: number | null; functions: number | null }
/** LLVM codegen: machine code of `functions` in `parts` on `threads` threads (`thread_ns` can exceed `ns`) */
export interface CompileCodegen { ns: number | null; functions: number | null; parts: number | null; thread_ns: number | null; threads: number | null }
/** a kernel's emission time (its HLO to LLVM IR, on a codegen thread) and the lines it came from */
export interface CompileKernel {
  name: string; kind: string; ns: number; share: number; op_count: number | null;
  lines: SourceRef[]; model_lines: SourceRef[]; aten_ops: string[];
}
/** a line's share of kernel compile time: `kernels` is how many kernels it fed, `top_kernels` the longest */
export interface CompileLine { ref: SourceRef | null; label: string; ns: number; share: number; kernels: number; top_kernels: string[] }
export interface CompileAdvice { kind: string; text: string; where: string | null; line: SourceRef | null }
export interface CompileEntry {
  graph_hash: string; graph_name: string | null; step: number | null; module: string | null;
  /** torch_xla's CompileTime of this compile; `lowering_ns` came before it in torch_xla; `execution_wait_ns`:
   *  after it, the sync waited that long for the step's own execution (donated inputs freed on its thread) */
  compile_ns: number; lowering_ns: number | null; execution_wait_ns: number | null;
  /** share of CompileTime inside traced compiler steps */
  explained: number;
  /** they add up to compile_ns */
  phases: CompilePhase[]; pipelines: CompilePipeline[]; passes: CompilePass[];
  counts: CompileCounts; codegen: CompileCodegen;
  /** kernel emission's threads and thread time (which can exceed its wall time) */
  kernel_threads: number | null; kernel_thread_ns: number | null;
  kernels: CompileKernel[]; untimed: { reason: string; kernels: string[] }[];
  lines: CompileLine[]; model_lines: CompileLine[]; ops: { op: string; ns: number; share: number }[];
  advice: CompileAdvice[];
  /** the same summary the terminal prints */
  text: string[];
}

export interface PanelModel {
  schema: string; capture: Capture; summary: Summary; main_graph: string | null;
  graphs: Record<string, Graph>; source_lines: SourceLine[]; model_files: ModelFile[]; runs: Run[];
  profile: Profile | null;
  /** the compiles of this run, where their time went; [] when none (and in outputs saved before it existed) */
  compile: CompileEntry[];
  /** a quiet cell's steps and summary only: the side panel asks the kernel for the rest when needed */
  partial: boolean;
}

export interface Progress {
  state: "idle" | "compiling" | "running" | "done"; what: string; elapsed_s: number;
  expected_s: number | null; step: number | null;
}

export class PanelModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PanelModelError";
  }
}

type Obj = Record<string, unknown>;

function fail(path: string, what: string, got: unknown): never {
  const kind = got === null ? "null" : Array.isArray(got) ? "array" : typeof got;
  throw new PanelModelError(`invalid xla_lab panel model: ${path} must be ${what} (got ${kind})`);
}
function obj(v: unknown, path: string): Obj {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(path, "an object", v);
  return v as Obj;
}
function arr(v: unknown, path: string): unknown[] {
  if (!Array.isArray(v)) fail(path, "an array", v);
  return v;
}
function num(v: unknown, path: string): number {
  if (typeof v !== "number" || !Number.isFinite(v)) fail(path, "a finite number", v);
  return v;
}
function numOrNull(v: unknown, path: string): number | null {
  return v === null || v === undefined ? null : num(v, path);
}
function str(v: unknown, path: string): string {
  if (typeof v !== "string") fail(path, "a string", v);
  return v;
}
function strOrNull(v: unknown, path: string): string | null {
  return v === null || v === undefined ? null : str(v, path);
}
function strList(v: unknown, path: string): string[] {
  return arr(v ?? [], path).map((x, i) => str(x, `${path}[${i}]`));
}

function parseNode(v: unknown, path: string): GraphNode {
  const o = obj(v, path);
  return {
    id: num(o.id, `${path}.id`),
    op: str(o.op, `${path}.op`),
    shape: strOrNull(o.shape, `${path}.shape`),
    cell: numOrNull(o.cell, `${path}.cell`),
    line: numOrNull(o.line, `${path}.line`),
    code: strOrNull(o.code, `${path}.code`),
    scope: strOrNull(o.scope, `${path}.scope`),
    kernel: strOrNull(o.kernel, `${path}.kernel`),
  };
}

export function parseGraph(v: unknown, path = "graph"): Graph {
  const o = obj(v, path);
  const nodes = arr(o.nodes, `${path}.nodes`).map((n, i) => parseNode(n, `${path}.nodes[${i}]`));
  const ids = new Set<number>();
  for (const n of nodes) {
    if (ids.has(n.id)) throw new PanelModelError(`invalid xla_lab panel model: ${path} has two nodes with id ${n.id}`);
    ids.add(n.id);
  }
  const edges = arr(o.edges ?? [], `${path}.edges`).map((e, i) => {
    const p = `${path}.edges[${i}]`;
    const pair = arr(e, p);
    if (pair.length !== 2) fail(p, "a [src, dst] pair", e);
    const s = num(pair[0], `${p}[0]`), d = num(pair[1], `${p}[1]`);
    if (!ids.has(s) || !ids.has(d)) {
      throw new PanelModelError(`invalid xla_lab panel model: ${p} refers to a node that does not exist (${s} -> ${d})`);
    }
    return [s, d] as [number, number];
  });
  const roots = arr(o.roots ?? [], `${path}.roots`).map((r, i) => num(r, `${path}.roots[${i}]`));
  const absent = strOrNull(o.absent ?? null, `${path}.absent`);
  return { name: str(o.name ?? "graph", `${path}.name`), hash: str(o.hash ?? "", `${path}.hash`), nodes, edges, roots,
    ...(absent ? { absent } : {}) };
}

/** A SourceRef as it came (its optional fields kept as given, null included), checked. */
export function parseRef(v: unknown, path: string): SourceRef {
  const lo = obj(v, path);
  const ref: SourceRef = { ...lo, cell: numOrNull(lo.cell ?? null, `${path}.cell`), line: num(lo.line, `${path}.line`) };
  for (const k of ["file", "code", "function"] as const) if (lo[k] !== undefined) ref[k] = strOrNull(lo[k], `${path}.${k}`);
  return ref;
}

function parseStepRow(v: unknown, path: string): StepRow {
  const o = obj(v, path);
  const row: StepRow = {
    ...(o as unknown as StepRow),
    steps: str(o.steps, `${path}.steps`),
    first: num(o.first, `${path}.first`), last: num(o.last, `${path}.last`), count: num(o.count, `${path}.count`),
    cache: str(o.cache, `${path}.cache`), cause: str(o.cause ?? "", `${path}.cause`),
    ref: o.ref == null ? null : parseRef(o.ref, `${path}.ref`),
    graph: str(o.graph ?? "", `${path}.graph`),
    compile_s: numOrNull(o.compile_s, `${path}.compile_s`), execute_s: numOrNull(o.execute_s, `${path}.execute_s`),
    trace_s: numOrNull(o.trace_s, `${path}.trace_s`),
    text: "",
  };
  row.text = o.text === undefined ? stepRowText(row) : str(o.text, `${path}.text`);
  return row;
}

function parseKernel(v: unknown, path: string): Kernel {
  const o = obj(v, path);
  return {
    ...(o as unknown as Kernel),
    name: str(o.name, `${path}.name`),
    kind: str(o.kind ?? "", `${path}.kind`),
    members: strList(o.members, `${path}.members`),
    aten_ops: strList(o.aten_ops, `${path}.aten_ops`),
    lines: arr(o.lines ?? [], `${path}.lines`).map((l, i) => parseRef(l, `${path}.lines[${i}]`)),
    model_lines: arr(o.model_lines ?? [], `${path}.model_lines`).map((l, i) => parseRef(l, `${path}.model_lines[${i}]`)),
    sources: strList(o.sources, `${path}.sources`),
    shape: str(o.shape ?? "", `${path}.shape`),
    flops: num(o.flops ?? 0, `${path}.flops`),
    bytes: num(o.bytes ?? 0, `${path}.bytes`),
  };
}

function parseCapture(v: unknown, path: string): Capture {
  const o = obj(v, path);
  const steps = arr(o.steps ?? [], `${path}.steps`).map((s, i) => {
    const p = `${path}.steps[${i}]`;
    const so = obj(s, p);
    num(so.index, `${p}.index`);
    str(so.cache, `${p}.cache`);
    const timings: Record<string, number | null> = {};
    for (const [k, v] of Object.entries(obj(so.timings ?? {}, `${p}.timings`))) timings[k] = numOrNull(v, `${p}.timings.${k}`);
    return { ...so, timings } as unknown as Step;
  });
  const rawArtifacts = obj(o.artifacts ?? {}, `${path}.artifacts`);
  const artifacts: Record<string, Artifacts> = {};
  for (const [h, a] of Object.entries(rawArtifacts)) {
    const p = `${path}.artifacts[${JSON.stringify(h)}]`;
    const ao = obj(a, p);
    strOrNull(ao.hlo_before, `${p}.hlo_before`);
    strOrNull(ao.hlo_after, `${p}.hlo_after`);
    const fusions = ao.fusions == null ? null
      : arr(ao.fusions, `${p}.fusions`).map((k, i) => parseKernel(k, `${p}.fusions[${i}]`));
    const memory = ao.memory == null ? null : (obj(ao.memory, `${p}.memory`) as Memory);
    if (memory?.largest != null) arr(memory.largest, `${p}.memory.largest`);
    artifacts[h] = { ...ao, graph_hash: String(ao.graph_hash ?? h), fusions, memory } as Artifacts;
  }
  return {
    ...o, schema: str(o.schema ?? "", `${path}.schema`), cell_id: str(o.cell_id ?? "", `${path}.cell_id`),
    execution_count: numOrNull(o.execution_count, `${path}.execution_count`),
    source: str(o.source ?? "", `${path}.source`), started_at: num(o.started_at ?? 0, `${path}.started_at`),
    steps, artifacts,
  } as Capture;
}

const SUMMARY_NUMBERS = ["steps", "compiles", "cache_hits", "precompiled", "trace_s", "compile_s", "execute_s", "transfer_s",
  "execution_wait_s"] as const;

/** The summary; `capture` gives the rows of an output saved before summary.rows existed (one per step). */
function parseSummary(v: unknown, path: string, capture: Capture): Summary {
  const o = obj(v, path);
  const out: Obj = {};
  out.rows = o.rows == null ? unfoldedRows(capture) : arr(o.rows, `${path}.rows`).map((r, i) => parseStepRow(r, `${path}.rows[${i}]`));
  for (const k of SUMMARY_NUMBERS) out[k] = num(o[k] ?? 0, `${path}.${k}`);
  out.recompiles = arr(o.recompiles ?? [], `${path}.recompiles`).map((r, i) => {
    const ro = obj(r, `${path}.recompiles[${i}]`);
    return { step: num(ro.step, `${path}.recompiles[${i}].step`), reason: str(ro.reason, `${path}.recompiles[${i}].reason`) };
  });
  out.warnings = strList(o.warnings, `${path}.warnings`);
  out.ranks = arr(o.ranks ?? [], `${path}.ranks`).map((r, i) => parseRankRow(r, `${path}.ranks[${i}]`));
  return out as unknown as Summary;
}

const RANK_NUMBERS = ["launch", "rank", "steps", "compiled", "compile_s", "step_s"] as const;

function parseRankRow(v: unknown, path: string): RankRow {
  const o = obj(v, path);
  const out: Obj = {};
  for (const k of RANK_NUMBERS) out[k] = num(o[k], `${path}.${k}`);
  out.mean_step_s = numOrNull(o.mean_step_s, `${path}.mean_step_s`);
  for (const k of ["device", "status", "line"]) out[k] = str(o[k] ?? "", `${path}.${k}`);
  return out as unknown as RankRow;
}

function parseRun(v: unknown, path: string): Run {
  const o = obj(v, path);
  return {
    execution_count: numOrNull(o.execution_count, `${path}.execution_count`),
    started_at: num(o.started_at ?? 0, `${path}.started_at`),
    steps: arr(o.steps ?? [], `${path}.steps`).map((s, i) => {
      const p = `${path}.steps[${i}]`;
      const so = obj(s, p);
      return {
        index: num(so.index, `${p}.index`), cache: str(so.cache ?? "", `${p}.cache`),
        trace_s: numOrNull(so.trace_s, `${p}.trace_s`), compile_s: numOrNull(so.compile_s, `${p}.compile_s`),
        execute_s: numOrNull(so.execute_s, `${p}.execute_s`), transfer_s: numOrNull(so.transfer_s, `${p}.transfer_s`),
        execution_wait_s: numOrNull(so.execution_wait_s, `${p}.execution_wait_s`),
      };
    }),
  };
}

/** Validate a panel model received from the kernel (or read from a saved output). */
export function parsePanelModel(raw: unknown): PanelModel {
  if (typeof raw === "string") {
    try {
      raw = JSON.parse(raw);
    } catch (e) {
      throw new PanelModelError(`invalid xla_lab panel model: not JSON (${(e as Error).message})`);
    }
  }
  const o = obj(raw, "model");
  const schema = o.schema;
  if (typeof schema !== "string" || !schema.startsWith("xla_lab.panel/")) {
    throw new PanelModelError(`not an xla_lab panel model (schema=${JSON.stringify(schema ?? null)})`);
  }
  if (schema !== PANEL_SCHEMA) {
    throw new PanelModelError(`panel model schema ${JSON.stringify(schema)} is not readable by this panel (${PANEL_SCHEMA})`);
  }
  const graphsRaw = obj(o.graphs ?? {}, "model.graphs");
  const graphs: Record<string, Graph> = {};
  for (const [h, g] of Object.entries(graphsRaw)) graphs[h] = parseGraph(g, `model.graphs[${JSON.stringify(h)}]`);
  const main = strOrNull(o.main_graph, "model.main_graph");
  if (main !== null && !(main in graphs) && Object.keys(graphs).length > 0) {
    throw new PanelModelError(`invalid xla_lab panel model: main_graph ${JSON.stringify(main)} is not in model.graphs`);
  }
  const capture = parseCapture(o.capture, "model.capture");
  return {
    schema,
    capture,
    summary: parseSummary(o.summary, "model.summary", capture),
    main_graph: main,
    graphs,
    source_lines: arr(o.source_lines ?? [], "model.source_lines").map((l, i) => {
      const lo = obj(l, `model.source_lines[${i}]`);
      return { line: num(lo.line, `model.source_lines[${i}].line`), code: str(lo.code ?? "", `model.source_lines[${i}].code`),
        kernels: strList(lo.kernels, `model.source_lines[${i}].kernels`) };
    }),
    model_files: arr(o.model_files ?? [], "model.model_files").map((f, i) => {
      const p = `model.model_files[${i}]`, fo = obj(f, p);
      return { file: str(fo.file, `${p}.file`), lines: arr(fo.lines ?? [], `${p}.lines`).map((l, j) => {
        const lo = obj(l, `${p}.lines[${j}]`);
        return { line: num(lo.line, `${p}.lines[${j}].line`), code: str(lo.code ?? "", `${p}.lines[${j}].code`),
          function: str(lo.function ?? "", `${p}.lines[${j}].function`), kernels: strList(lo.kernels, `${p}.lines[${j}].kernels`) };
      }) };
    }),
    runs: arr(o.runs ?? [], "model.runs").map((r, i) => parseRun(r, `model.runs[${i}]`)),
    profile: o.profile == null ? null : parseProfile(o.profile, "model.profile"),
    compile: parseCompile(o.compile, "model.compile"),
    partial: o.partial === true,
  };
}

export function parseProgress(raw: unknown): Progress | null {
  if (typeof raw !== "object" || raw === null) return null;
  const o = raw as Obj;
  const state = o.state;
  if (state !== "idle" && state !== "compiling" && state !== "running" && state !== "done") return null;
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  return { state, what: typeof o.what === "string" ? o.what : "", elapsed_s: n(o.elapsed_s) ?? 0,
    expected_s: n(o.expected_s), step: n(o.step) };
}

/** Kernels of the graph `hash` (the artifacts' fusion map), [] when none. */
export function kernelsOf(m: PanelModel, hash: string | null): Kernel[] {
  if (!hash) return [];
  return m.capture.artifacts[hash]?.fusions ?? [];
}

/** The graph the panel opens on: main_graph, else the first graph. */
export function mainGraphHash(m: PanelModel): string | null {
  if (m.main_graph && m.main_graph in m.graphs) return m.main_graph;
  const keys = Object.keys(m.graphs);
  if (keys.length) return keys[0];
  const art = Object.keys(m.capture.artifacts);
  return art.length ? art[0] : null;
}

function numMap(v: unknown, path: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, x] of Object.entries(obj(v ?? {}, path))) out[k] = num(x, `${path}[${JSON.stringify(k)}]`);
  return out;
}

function parseProfileLine(v: unknown, path: string): ProfileLine {
  const o = obj(v, path);
  return { label: str(o.label ?? "", `${path}.label`), cell: numOrNull(o.cell, `${path}.cell`), line: numOrNull(o.line, `${path}.line`),
    file: strOrNull(o.file, `${path}.file`), code: strOrNull(o.code, `${path}.code`), total_ns: num(o.total_ns, `${path}.total_ns`),
    share: num(o.share, `${path}.share`), kernels: strList(o.kernels, `${path}.kernels`) };
}

/** A profiled kernel's lines: references (as a fusion kernel's), or the one text of an older saved output. */
function profileKernelLines(ko: Obj, p: string): Pick<ProfileKernel, "lines" | "model_lines" | "sources" | "lines_text"> {
  const refs = (key: "lines" | "model_lines") => arr(ko[key] ?? [], `${p}.${key}`).map((l, i) => parseRef(l, `${p}.${key}[${i}]`));
  const model_lines = refs("model_lines"), sources = strList(ko.sources, `${p}.sources`);
  if (typeof ko.lines === "string") return { lines: [], model_lines, sources, lines_text: ko.lines };
  return { lines: refs("lines"), model_lines, sources };
}

/** The Profile tab's data; a wrong type anywhere the tab reads is rejected with its path. */
export function parseProfile(v: unknown, path: string): Profile {
  const o = obj(v, path);
  let peaks: Profile["peaks"] = null;
  if (o.peaks != null) {
    const p = obj(o.peaks, `${path}.peaks`);
    peaks = { flops_per_s: num(p.flops_per_s, `${path}.peaks.flops_per_s`), bytes_per_s: num(p.bytes_per_s, `${path}.peaks.bytes_per_s`),
      source: str(p.source ?? "", `${path}.peaks.source`) };
  }
  const kernels = arr(o.kernels ?? [], `${path}.kernels`).map((k, i) => {
    const p = `${path}.kernels[${i}]`, ko = obj(k, p);
    return { graph_hash: str(ko.graph_hash ?? "", `${p}.graph_hash`), name: str(ko.name, `${p}.name`), kind: str(ko.kind ?? "", `${p}.kind`),
      count: num(ko.count, `${p}.count`), total_ns: num(ko.total_ns, `${p}.total_ns`), mean_ns: num(ko.mean_ns, `${p}.mean_ns`),
      longest_ns: num(ko.longest_ns ?? 0, `${p}.longest_ns`), share: num(ko.share, `${p}.share`), flops: num(ko.flops ?? 0, `${p}.flops`),
      bytes: num(ko.bytes ?? 0, `${p}.bytes`), flops_per_s: numOrNull(ko.flops_per_s, `${p}.flops_per_s`),
      bytes_per_s: numOrNull(ko.bytes_per_s, `${p}.bytes_per_s`), roof_share: numOrNull(ko.roof_share, `${p}.roof_share`),
      bound: strOrNull(ko.bound, `${p}.bound`), roof_text: strOrNull(ko.roof_text, `${p}.roof_text`),
      runs: numOrNull(ko.runs, `${p}.runs`), median_ns: numOrNull(ko.median_ns, `${p}.median_ns`), left_out_text: strOrNull(ko.left_out_text, `${p}.left_out_text`), ...profileKernelLines(ko, p) };
  });
  const steps = arr(o.steps ?? [], `${path}.steps`).map((st, i) => {
    const p = `${path}.steps[${i}]`, so = obj(st, p);
    return { step: num(so.step, `${p}.step`), cache: str(so.cache ?? "?", `${p}.cache`), start_ns: num(so.start_ns, `${p}.start_ns`),
      span_ns: num(so.span_ns, `${p}.span_ns`), busy_ns: num(so.busy_ns, `${p}.busy_ns`), kernel_ns: num(so.kernel_ns, `${p}.kernel_ns`),
      idle_before_ns: num(so.idle_before_ns, `${p}.idle_before_ns`), host: numMap(so.host, `${p}.host`),
      execute_s: numOrNull(so.execute_s, `${p}.execute_s`), compute_ns: numOrNull(so.compute_ns, `${p}.compute_ns`),
      left_out_ns: numOrNull(so.left_out_ns, `${p}.left_out_ns`) };
  });
  let compare: Profile["compare"] = null;
  if (o.compare != null) {
    const c = obj(o.compare, `${path}.compare`);
    compare = { with: numOrNull(c.with, `${path}.compare.with`), before_step_ns: num(c.before_step_ns, `${path}.compare.before_step_ns`),
      after_step_ns: num(c.after_step_ns, `${path}.compare.after_step_ns`),
      rows: arr(c.rows ?? [], `${path}.compare.rows`).map((r, i) => {
        const p = `${path}.compare.rows[${i}]`, ro = obj(r, p);
        return { name: str(ro.name, `${p}.name`), before_mean_ns: numOrNull(ro.before_mean_ns, `${p}.before_mean_ns`),
          after_mean_ns: numOrNull(ro.after_mean_ns, `${p}.after_mean_ns`), before_total_ns: num(ro.before_total_ns ?? 0, `${p}.before_total_ns`),
          after_total_ns: num(ro.after_total_ns ?? 0, `${p}.after_total_ns`) };
      }) };
  }
  return { peaks, kernels, kernels_more: num(o.kernels_more ?? 0, `${path}.kernels_more`),
    lines: arr(o.lines ?? [], `${path}.lines`).map((l, i) => parseProfileLine(l, `${path}.lines[${i}]`)),
    model_lines: arr(o.model_lines ?? [], `${path}.model_lines`).map((l, i) => parseProfileLine(l, `${path}.model_lines[${i}]`)),
    ops: arr(o.ops ?? [], `${path}.ops`).map((x, i) => { const p = `${path}.ops[${i}]`, xo = obj(x, p);
      return { op: str(xo.op, `${p}.op`), total_ns: num(xo.total_ns, `${p}.total_ns`), share: num(xo.share, `${p}.share`) }; }),
    steps, compare };
}

function refOrNull(v: unknown, path: string): SourceRef | null {
  return v == null ? null : parseRef(v, path);
}
function refList(v: unknown, path: string): SourceRef[] {
  return arr(v ?? [], path).map((l, i) => parseRef(l, `${path}[${i}]`));
}

function parseCompileLine(v: unknown, path: string): CompileLine {
  const o = obj(v, path);
  return { ref: refOrNull(o.ref, `${path}.ref`), label: str(o.label ?? "", `${path}.label`), ns: num(o.ns, `${path}.ns`),
    share: num(o.share ?? 0, `${path}.share`), kernels: num(o.kernels ?? 0, `${path}.kernels`), top_kernels: strList(o.top_kernels, `${path}.top_kernels`) };
}

/** One compile's entry; a wrong type anywhere the Compile tab or the comparison reads is rejected with its path. */
export function parseCompileEntry(v: unknown, path: string): CompileEntry {
  const o = obj(v, path);
  const list = <T>(key: string, f: (x: Obj, p: string) => T): T[] =>
    arr(o[key] ?? [], `${path}.${key}`).map((x, i) => { const p = `${path}.${key}[${i}]`; return f(obj(x, p), p); });
  const counts = obj(o.counts ?? {}, `${path}.counts`), codegen = obj(o.codegen ?? {}, `${path}.codegen`);
  return {
    graph_hash: str(o.graph_hash, `${path}.graph_hash`), graph_name: strOrNull(o.graph_name, `${path}.graph_name`),
    step: numOrNull(o.step, `${path}.step`), module: strOrNull(o.module, `${path}.module`),
    compile_ns: num(o.compile_ns, `${path}.compile_ns`), lowering_ns: numOrNull(o.lowering_ns, `${path}.lowering_ns`),
    execution_wait_ns: numOrNull(o.execution_wait_ns, `${path}.execution_wait_ns`),
    explained: num(o.explained ?? 0, `${path}.explained`),
    phases: list("phases", (x, p) => ({ name: str(x.name, `${p}.name`), ns: num(x.ns, `${p}.ns`), share: num(x.share, `${p}.share`) })),
    pipelines: list("pipelines", (x, p) => ({ name: str(x.name, `${p}.name`), ns: num(x.ns, `${p}.ns`) })),
    passes: list("passes", (x, p) => ({ name: str(x.name, `${p}.name`), ns: num(x.ns, `${p}.ns`), count: num(x.count ?? 1, `${p}.count`) })),
    counts: { hlo_before: numOrNull(counts.hlo_before, `${path}.counts.hlo_before`), hlo_after: numOrNull(counts.hlo_after, `${path}.counts.hlo_after`),
      kernels: numOrNull(counts.kernels, `${path}.counts.kernels`), functions: numOrNull(counts.functions, `${path}.counts.functions`) },
    codegen: { ns: numOrNull(codegen.ns, `${path}.codegen.ns`), functions: numOrNull(codegen.functions, `${path}.codegen.functions`),
      parts: numOrNull(codegen.parts, `${path}.codegen.parts`), thread_ns: numOrNull(codegen.thread_ns, `${path}.codegen.thread_ns`),
      threads: numOrNull(codegen.threads, `${path}.codegen.threads`) },
    kernel_threads: numOrNull(o.kernel_threads, `${path}.kernel_threads`), kernel_thread_ns: numOrNull(o.kernel_thread_ns, `${path}.kernel_thread_ns`),
    kernels: list("kernels", (x, p) => ({ name: str(x.name, `${p}.name`), kind: str(x.kind ?? "", `${p}.kind`), ns: num(x.ns, `${p}.ns`),
      share: num(x.share ?? 0, `${p}.share`), op_count: numOrNull(x.op_count, `${p}.op_count`), lines: refList(x.lines, `${p}.lines`),
      model_lines: refList(x.model_lines, `${p}.model_lines`), aten_ops: strList(x.aten_ops, `${p}.aten_ops`) })),
    untimed: list("untimed", (x, p) => ({ reason: str(x.reason ?? "", `${p}.reason`), kernels: strList(x.kernels, `${p}.kernels`) })),
    lines: list("lines", (x, p) => parseCompileLine(x, p)),
    model_lines: list("model_lines", (x, p) => parseCompileLine(x, p)),
    ops: list("ops", (x, p) => ({ op: str(x.op, `${p}.op`), ns: num(x.ns, `${p}.ns`), share: num(x.share ?? 0, `${p}.share`) })),
    advice: list("advice", (x, p) => ({ kind: str(x.kind ?? "", `${p}.kind`), text: str(x.text, `${p}.text`),
      where: strOrNull(x.where, `${p}.where`), line: refOrNull(x.line, `${p}.line`) })),
    text: strList(o.text, `${path}.text`),
  };
}

/** The panel's `compile` section: a list, one entry per compile; absent (an older saved output) or null: []. */
export function parseCompile(v: unknown, path = "model.compile"): CompileEntry[] {
  return arr(v ?? [], path).map((c, i) => parseCompileEntry(c, `${path}[${i}]`));
}
