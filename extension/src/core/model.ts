// The panel model (schema "xla_lab.panel/1", built by xla_lab/view/panel_model.py): its types and its
// validator. Both come from the JSON Schema Python writes from its own types (xla_lab/view/panel_format.py):
// gen-types.mjs generates ./generated/panel.ts (the types) and ./generated/schema.ts (the schema) at build
// time, and @cfworker/json-schema reads that schema as data (22 KB, and no code built at run time; an ajv
// standalone validator of it was 250 KB). Nothing here restates the format. A model that does not validate
// is refused with the place it breaks the schema (a saved output then shows its saved HTML). Pure logic.

import { Validator } from "@cfworker/json-schema";
import type * as T from "./generated/panel";
import { PANEL_JSON_SCHEMA } from "./generated/schema";

export const PANEL_SCHEMA: string = PANEL_JSON_SCHEMA.properties.schema.const; // "xla_lab.panel/1"

export type PanelModel = T.PanelModel;
export type Capture = T.CaptureDocument;
export type Artifacts = T.GraphArtifacts;
export type Step = T.StepRecord;
/** A source line: a cell's (`cell`: its prompt, null when unknown) or a file's (`file`). lineRef (format.ts)
 * shows it: `[5]:3`, `modeling_bert.py:413`, `[?]:3`. */
export type SourceRef = T.Line;
export type Kernel = T.Kernel;
export type BufferInfo = T.Buffer;
export type Memory = T.Memory;
export type Graph = T.Graph;
export type GraphNode = T.GraphNode;
export type Summary = T.Summary;
/** One row of the step table (summary.rows), folded by the Python side: a run of steps with the same graph,
 * cache result, cause and line. `text` is the row's one-line form (stepRowText). */
export type StepRow = T.StepRow;
export type RankRow = T.RankRow;
export type SourceLine = T.SourceLine;
export type ModelFile = T.ModelFile;
export type Run = T.Run;
export type RunStep = T.RunStep;
export type Profile = T.ProfileTab;
export type ProfileKernel = T.ProfileKernel;
export type ProfileLine = T.ProfileLine;
export type ProfileStep = T.ProfileStep;
export type ProfileCompareRow = T.CompareRow;
export type CompileEntry = T.CompileEntry;
export type CompilePhase = T.Phase;
export type CompilePipeline = T.Pipeline;
export type CompilePass = T.Pass;
export type CompileCounts = T.CompileCounts;
export type CompileCodegen = T.CompileCodegen;
export type CompileKernel = T.CompileKernel;
export type CompileLine = T.CompileLine;
export type CompileAdvice = T.CompileAdvice;

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
let validator: Validator | null = null;

/** Why `o` is not a panel model by the schema (the innermost place it breaks it), else null. */
function schemaError(o: unknown): string | null {
  validator ??= new Validator(PANEL_JSON_SCHEMA as object, "7", true);
  const result = validator.validate(o);
  if (result.valid) return null;
  // the deepest place (of a union, the branch that got furthest), its last word (the list runs outside in)
  const inner = result.errors.reduce((a, b) => (b.instanceLocation.length >= a.instanceLocation.length ? b : a));
  return `${pathOf(inner.instanceLocation)}: ${inner.error}`;
}

/** `#/compile/0/graph_hash` (a JSON pointer) as `model.compile[0].graph_hash`. */
function pathOf(pointer: string): string {
  return pointer.replace(/^#/, "").split("/").filter(Boolean).reduce((path, seg) => {
    const key = decodeURIComponent(seg).replace(/~1/g, "/").replace(/~0/g, "~");
    return /^\d+$/.test(key) ? `${path}[${key}]` : /^[A-Za-z_]\w*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
  }, "model");
}

/** What the schema cannot say: graph nodes with unique ids, edges between them, main_graph among the graphs. */
function graphError(m: PanelModel): string | null {
  for (const [h, g] of Object.entries(m.graphs)) {
    const ids = new Set<number>();
    for (const n of g.nodes) {
      if (ids.has(n.id)) return `graph ${JSON.stringify(h)} has two nodes with id ${n.id}`;
      ids.add(n.id);
    }
    const bad = g.edges.find(([s, d]) => !ids.has(s) || !ids.has(d));
    if (bad) return `graph ${JSON.stringify(h)} has an edge to a node that does not exist (${bad[0]} -> ${bad[1]})`;
  }
  if (m.main_graph !== null && !(m.main_graph in m.graphs) && Object.keys(m.graphs).length > 0) {
    return `main_graph ${JSON.stringify(m.main_graph)} is not in model.graphs`;
  }
  return null;
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
  const schema = typeof raw === "object" && raw !== null ? (raw as { schema?: unknown }).schema : undefined;
  if (typeof schema !== "string" || !schema.startsWith("xla_lab.panel/")) {
    throw new PanelModelError(`not an xla_lab panel model (schema=${JSON.stringify(schema ?? null)})`);
  }
  if (schema !== PANEL_SCHEMA) {
    throw new PanelModelError(`panel model schema ${JSON.stringify(schema)} is not readable by this panel (${PANEL_SCHEMA})`);
  }
  const why = schemaError(raw) ?? graphError(raw as PanelModel);
  if (why !== null) throw new PanelModelError(`invalid xla_lab panel model: ${why}`);
  return raw as PanelModel;
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

