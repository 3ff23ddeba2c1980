// Captures of a notebook, for the JupyterLab side panel: found in cell outputs (saved in the .ipynb or
// arriving live), kept per notebook with their earlier runs, listed as cells / runs / steps, and two steps
// compared (graph diff, HLO diff, the recompile reason). Pure logic: no DOM, no JupyterLab.
import { diffGraphs, describeDiff, type GraphDiff } from "./graphdiff";
import { parsePanelModel, type Graph, type PanelModel, type SourceRef, type Step, type StepRow } from "./model";
import { isPacked, packedKey, unpackCapture } from "./packed";
import { rowOfStep } from "./steps";

export const CAPTURE_MIME = "application/vnd.xla-lab.capture+json";
/** A `%%xla -q` cell's capture, sent to the side panel only (an update of a display nobody shows, so the
 * notebook keeps no output; xla_lab/view/panel.py quiet_message). */
export const QUIET_MIME = "application/vnd.xla-lab.quiet-capture+json";

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

/** The capture payload of one output (nbformat dict, or JupyterLab's output model .toJSON()), else null. */
export function captureOfOutput(output: unknown): unknown | null {
  if (!isObj(output)) return null;
  const t = output.output_type;
  if (t !== undefined && t !== "display_data" && t !== "execute_result" && t !== "update_display_data") return null;
  const data = output.data;
  if (!isObj(data)) return null;
  const raw = data[CAPTURE_MIME];
  return raw === undefined || raw === null ? null : raw;
}

/** The capture payload of a live iopub message (display_data / execute_result / update_display_data). */
export function captureOfIopub(msg: unknown): unknown | null {
  if (!isObj(msg) || !isObj(msg.header) || !isObj(msg.content)) return null;
  const t = msg.header.msg_type;
  if (t !== "display_data" && t !== "execute_result" && t !== "update_display_data") return null;
  return captureOfOutput({ output_type: t, data: msg.content.data });
}

/** The capture payload of a quiet cell's iopub message, else null. */
export function quietCaptureOfIopub(msg: unknown): unknown | null {
  if (!isObj(msg) || !isObj(msg.header) || !isObj(msg.content) || !isObj(msg.content.data)) return null;
  if (msg.header.msg_type !== "update_display_data") return null;
  const raw = msg.content.data[QUIET_MIME];
  return raw === undefined || raw === null ? null : raw;
}

/** A stable key of one run of one cell, read without parsing the whole model (cheap for huge graphs). */
export function captureKey(raw: unknown): string | null {
  let v = raw;
  if (typeof v === "string") { try { v = JSON.parse(v); } catch { return null; } }
  const c = packedKey(v) ?? (isObj(v) && isObj(v.capture) ? v.capture : null);
  if (c === null) return null;
  return `${String(c.cell_id ?? "")}|${String(c.execution_count ?? "")}|${String(c.started_at ?? "")}`;
}

export interface CaptureEntry {
  key: string;
  /** the notebook cell (model id) whose output holds it, when known */
  cellModelId: string | null;
  model: PanelModel;
  /** the raw payload, for the per-cell renderer */
  raw: unknown;
  /** "saved": read from the notebook file; "live": arrived while this page watched; "quiet": a `%%xla -q`
   * cell's, sent to the side panel only (never in the notebook) */
  origin: Origin;
  /** 1-based run number among the captures of the same cell, oldest first */
  run: number;
  /** false once the cell's output no longer holds it (the cell ran again) */
  inNotebook: boolean;
}

export type Origin = "saved" | "live" | "quiet";

export interface StepRef { entry: CaptureEntry; step: Step }

/** An output that could not be read, and the notebook cell (model id) that holds it, if known. */
export interface ReadError { message: string; cellModelId: string | null }

/** Captures of one notebook, earlier runs included. */
export class CaptureStore {
  private readonly byKey = new Map<string, CaptureEntry>();
  private readonly bad = new Set<string>();
  private readonly inflating = new Map<string, Promise<CaptureEntry | null>>();
  /** why outputs could not be read (the latest 20), each once */
  readonly errors: ReadError[] = [];

  /** Add (or refresh) a capture; returns the entry, or null if the payload is not a readable panel model. */
  add(raw: unknown, cellModelId: string | null, origin: Origin): CaptureEntry | null {
    const key = captureKey(raw);
    if (key === null) { this.error("an output carries an unreadable xla_lab capture", cellModelId); return null; }
    if (this.bad.has(key)) return null;
    const old = this.byKey.get(key);
    if (old) {
      if (cellModelId && !old.cellModelId) { old.cellModelId = cellModelId; this.renumber(); }
      old.inNotebook = old.inNotebook || cellModelId !== null;
      return old;
    }
    let model: PanelModel;
    try {
      model = parsePanelModel(raw);
    } catch (e) {
      this.error((e as Error).message, cellModelId);
      this.bad.add(key); // not parsed again on every scan
      return null;
    }
    const entry: CaptureEntry = { key, cellModelId, model, raw, origin, run: 0, inNotebook: cellModelId !== null && origin !== "quiet" };
    this.byKey.set(key, entry);
    this.renumber();
    return entry;
  }

  /** Like `add`, for payloads that may be packed (saved outputs): a new packed one is inflated first. */
  addPayload(raw: unknown, cellModelId: string | null, origin: Origin): Promise<CaptureEntry | null> {
    const key = captureKey(raw);
    if (!isPacked(raw) || key === null || this.byKey.has(key) || this.bad.has(key)) {
      return Promise.resolve(this.add(raw, cellModelId, origin));
    }
    const pending = this.inflating.get(key);
    if (pending) return pending.then((e) => (e ? this.add(raw, cellModelId, origin) : null));
    const job = unpackCapture(raw)
      .then((model) => {
        if (captureKey(model) !== key) throw new Error("the packed capture's key does not match its contents");
        return this.add(model, cellModelId, origin);
      })
      .catch((e: unknown) => {
        this.error((e as Error).message || String(e), cellModelId);
        this.bad.add(key);
        return null;
      })
      .finally(() => this.inflating.delete(key));
    this.inflating.set(key, job);
    return job;
  }

  /** The whole model of a partial entry (a quiet run), from the kernel: same run, so the entry keeps its
   * place; returns why not when the payload is not that run's readable model. */
  async complete(key: string, raw: unknown): Promise<string | null> {
    const e = this.byKey.get(key);
    if (!e) return "that run is no longer listed";
    try {
      const unpacked = await unpackCapture(raw);
      const model = parsePanelModel(unpacked);
      if (captureKey(model) !== key) return "the kernel sent another run's capture";
      e.model = model;
      e.raw = unpacked;
      return null;
    } catch (err) {
      return (err as Error).message || String(err);
    }
  }

  /**
   * Mark which captures the notebook's outputs still hold (keys seen in the latest scan); the others
   * stay listed as earlier runs.
   */
  markPresent(keys: ReadonlySet<string>) {
    for (const e of this.byKey.values()) e.inNotebook = keys.has(e.key);
  }

  private error(message: string, cellModelId: string | null) {
    if (this.errors.some((e) => e.message === message && e.cellModelId === cellModelId)) return;
    this.errors.push({ message, cellModelId });
    if (this.errors.length > 20) this.errors.splice(0, this.errors.length - 20);
  }

  get size() { return this.byKey.size; }
  get(key: string) { return this.byKey.get(key); }

  private renumber() {
    for (const list of groupByCell(this.byKey.values()).values()) list.forEach((e, i) => { e.run = i + 1; });
  }

  /**
   * Entries grouped by cell, in notebook order (`cellOrder`: cell model ids top to bottom; cells not
   * in it last), runs oldest first.
   */
  cells(cellOrder: readonly string[] = []): { cellId: string; cellModelId: string | null; runs: CaptureEntry[] }[] {
    const pos = new Map(cellOrder.map((id, i) => [id, i]));
    const groups = groupByCell(this.byKey.values());
    const out = [...groups].map(([cellId, runs]) => {
      const cm = runs.map((r) => r.cellModelId).find((x) => x) ?? (pos.has(cellId) ? cellId : null);
      return { cellId, cellModelId: cm, runs };
    });
    const rank = (g: { cellModelId: string | null; runs: CaptureEntry[] }) => (g.cellModelId != null && pos.has(g.cellModelId) ? pos.get(g.cellModelId)! : Infinity);
    out.sort((x, y) => rank(x) - rank(y) || byTime(x.runs[0], y.runs[0]));
    return out;
  }

  /** Every step of every capture, notebook order, as compare choices. */
  steps(cellOrder: readonly string[] = []): StepRef[] {
    const out: StepRef[] = [];
    for (const g of this.cells(cellOrder)) for (const e of g.runs) for (const s of e.model.capture.steps) out.push({ entry: e, step: s });
    return out;
  }

  find(id: string): StepRef | null {
    const k = id.lastIndexOf("#");
    if (k < 0) return null;
    const e = this.byKey.get(id.slice(0, k));
    const idx = Number(id.slice(k + 1));
    const s = e?.model.capture.steps.find((st) => st.index === idx);
    return e && s ? { entry: e, step: s } : null;
  }
}

/** Captures grouped by cell. Two captures are of the same cell when they share the notebook cell whose
 * output holds them, or the cell id the kernel recorded: a saved output and the live run of the same cell
 * carry different kernel-side ids (nbclient's and JupyterLab's) but sit in one notebook cell. */
function groupByCell(entries: Iterable<CaptureEntry>): Map<string, CaptureEntry[]> {
  const parent = new Map<string, string>();
  const find = (x: string): string => {
    let r = x;
    while (parent.get(r) !== r) r = parent.get(r)!;
    parent.set(x, r);
    return r;
  };
  const link = (a: string, b: string) => { parent.set(find(a), find(b)); };
  const idsOf = (e: CaptureEntry) => [e.model.capture.cell_id ? `c:${e.model.capture.cell_id}` : null, e.cellModelId ? `m:${e.cellModelId}` : null, `k:${e.key}`]
    .filter((x): x is string => x !== null);
  const all = [...entries];
  for (const e of all) for (const id of idsOf(e)) if (!parent.has(id)) parent.set(id, id);
  for (const e of all) { const [first, ...rest] = idsOf(e); for (const id of rest) link(id, first); }
  const roots = new Map<string, CaptureEntry[]>();
  for (const e of all) {
    const r = find(idsOf(e)[0]);
    const list = roots.get(r);
    if (list) list.push(e); else roots.set(r, [e]);
  }
  const out = new Map<string, CaptureEntry[]>();
  for (const list of roots.values()) {
    list.sort(byTime);
    const first = list[0];
    out.set(first.model.capture.cell_id || first.cellModelId || first.key, list);
  }
  return out;
}

function byTime(a: CaptureEntry, b: CaptureEntry) {
  return (a.model.capture.started_at - b.model.capture.started_at) || ((a.model.capture.execution_count ?? 0) - (b.model.capture.execution_count ?? 0));
}

/**
 * The comparison to offer first: the last step that compiled although its cell had run a step before,
 * against that earlier step (usually "why did run N compile again?"); else the last two steps.
 */
export function defaultPair(steps: readonly StepRef[]): [StepRef, StepRef] | null {
  if (steps.length < 2) return null;
  for (let j = steps.length - 1; j > 0; j--) {
    const b = steps[j];
    if (b.step.cache === "hit") continue;
    for (let i = j - 1; i >= 0; i--) {
      if (steps[i].entry.model.capture.cell_id === b.entry.model.capture.cell_id) return [steps[i], b];
    }
  }
  return [steps[steps.length - 2], steps[steps.length - 1]];
}

/** "<capture key>#<step index>": a step's id in the side panel (CaptureStore.find reads it). */
export const stepIdOf = (e: CaptureEntry, index: number) => `${e.key}#${index}`;
export const stepId = (r: StepRef) => stepIdOf(r.entry, r.step.index);

/** "[5] train" */
export function captureTitle(e: CaptureEntry): string {
  const c = e.model.capture;
  const name = c.graph_name ?? c.steps.find((s) => s.graph_name)?.graph_name ?? null;
  const shown = name && name.length > 60 ? `${name.slice(0, 60)}\u2026` : name; // (a label: never a page of text)
  return `[${c.execution_count ?? " "}]${shown ? ` ${shown}` : ""}`;
}

export function stepLabel(r: StepRef): string {
  const saved = r.entry.origin === "saved" ? " (saved)" : r.entry.origin === "quiet" ? " (quiet)" : "";
  return `${captureTitle(r.entry)} run ${r.entry.run}${saved} \u00b7 step ${r.step.index} (${r.step.cache})`;
}

/** The step list of a capture: the summary's rows, as the Python side folded them (steps 2-99, 98x hit). */
export function stepListOf(e: CaptureEntry): StepRow[] {
  return e.model.summary.rows;
}

/** The line step `r` synced at (its row's, as the Python side names it). */
export function stepRefOf(r: StepRef): SourceRef | null {
  return rowOfStep(r.entry.model.summary.rows, r.step.index)?.ref ?? null;
}

export function graphOfStep(r: StepRef): Graph | null {
  return r.entry.model.graphs[r.step.graph_hash] ?? null;
}

/** Why step `r` compiled (or didn't): the recorded reason, else the summary's, else what its cache says. */
export function recompileReason(r: StepRef): string | null {
  if (r.step.recompile_reason) return r.step.recompile_reason;
  const s = r.entry.model.summary.recompiles.find((x) => x.step === r.step.index);
  return s ? s.reason : null;
}

export interface Comparison {
  a: StepRef; b: StepRef;
  sameGraph: boolean;
  diff: GraphDiff;
  /** the textual answer to "why did B compile again?" */
  reason: string[];
  hlo: { before: [string | null, string | null]; after: [string | null, string | null] };
}

export function compareSteps(a: StepRef, b: StepRef): Comparison {
  const ga = graphOfStep(a), gb = graphOfStep(b);
  const sameGraph = a.step.graph_hash === b.step.graph_hash && !!a.step.graph_hash;
  const diff = diffGraphs(ga, gb);
  const art = (r: StepRef) => r.entry.model.capture.artifacts[r.step.graph_hash];
  const text = (v: unknown) => (typeof v === "string" && v ? v : null);
  const reason: string[] = [];
  const rec = recompileReason(b);
  if (sameGraph) reason.push(`same graph (hash ${b.step.graph_hash.slice(0, 12)}): step B ${b.step.cache === "hit" ? "reused the compiled graph" : `was a cache ${b.step.cache}`}`);
  else {
    reason.push(`different graphs: ${a.step.graph_hash.slice(0, 12) || "?"} vs ${b.step.graph_hash.slice(0, 12) || "?"}; step B was a cache ${b.step.cache}`);
    if (rec) reason.push(`recorded reason: ${rec}`);
    if (!ga || !gb) reason.push(`no captured graph for step ${!ga ? "A" : "B"}`);
    else reason.push(...describeDiff(diff));
  }
  return {
    a, b, sameGraph, diff, reason,
    hlo: { before: [text(art(a)?.hlo_before), text(art(b)?.hlo_before)], after: [text(art(a)?.hlo_after), text(art(b)?.hlo_after)] },
  };
}

/**
 * The 1-based line of `cellText` that a captured source line refers to. Captured lines count from the
 * cell body (a `%%xla` cell's first line is the magic, not code), so the guess is `line` + 1 there. The guess
 * stands if its text is `code`; else the nearest line whose text is `code` (the cell may have been edited
 * since), else the guess clamped to the cell.
 */
export function resolveSourceLine(cellText: string, line: number, code?: string | null): number {
  const lines = cellText.split("\n");
  const guess = line + (lines[0]?.startsWith("%%") ? 1 : 0);
  const norm = (s: string) => s.trim();
  const want = code ? norm(code) : null;
  const clamp = Math.min(Math.max(1, guess), Math.max(1, lines.length));
  if (!want || norm(lines[clamp - 1] ?? "") === want) return clamp;
  let best = -1;
  for (let i = 0; i < lines.length; i++) {
    if (norm(lines[i]) === want && (best < 0 || Math.abs(i + 1 - guess) < Math.abs(best - guess))) best = i + 1;
  }
  return best > 0 ? best : clamp;
}
