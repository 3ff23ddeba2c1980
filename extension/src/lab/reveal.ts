// Click-through from a graph node / kernel to the notebook: scroll the cell into view and mark the line.
import type { ICodeCellModel } from "@jupyterlab/cells";
import type { NotebookPanel } from "@jupyterlab/notebook";
import { resolveSourceLine } from "../core/captures";
import type { SourceRef } from "../core/model";

export interface RevealTarget {
  /** the cell whose output holds the capture (notebook cell model id), if known */
  cellModelId: string | null;
  /** the capture's cell_id (JupyterLab sends the cell model id with each execute request) */
  captureCellId: string;
  /** the capture's execution count: a ref with this `cell` is the capture's own cell */
  executionCount: number | null;
}

const MARK = "xla-lab-line-mark";

/** The index of the notebook cell a source ref points at, or -1. */
export function cellIndexOf(panel: NotebookPanel, t: RevealTarget, ref: SourceRef): number {
  const cells = panel.content.widgets;
  const byId = (id: string | null) => (id ? cells.findIndex((c) => c.model.id === id) : -1);
  const byCount = (n: number | null) => (n == null ? -1 : cells.findIndex((c) => c.model.type === "code" && (c.model as ICodeCellModel).executionCount === n));
  const own = byId(t.cellModelId) >= 0 ? byId(t.cellModelId) : byId(t.captureCellId);
  if (ref.cell == null || ref.cell === t.executionCount) return own >= 0 ? own : byCount(ref.cell ?? null);
  const other = byCount(ref.cell);
  return other >= 0 ? other : own;
}

export async function revealSource(panel: NotebookPanel, t: RevealTarget, ref: SourceRef): Promise<boolean> {
  const nb = panel.content;
  const idx = cellIndexOf(panel, t, ref);
  if (idx < 0) return false;
  nb.activeCellIndex = idx;
  try { await nb.scrollToItem(idx, "center"); } catch { /* older notebooks: scrollIntoView below */ }
  const cell = nb.widgets[idx];
  if (!cell) return false;
  const rect = cell.node.getBoundingClientRect(), view = nb.node.getBoundingClientRect();
  if (rect.bottom < view.top || rect.top > view.bottom) cell.node.scrollIntoView({ block: "center" });
  const line = resolveSourceLine(cell.model.sharedModel.getSource(), ref.line, ref.code);
  for (const old of Array.from(document.querySelectorAll(`.${MARK}`))) old.remove();
  for (const old of Array.from(document.querySelectorAll(".xla-lab-source-cell"))) { old.classList.remove("xla-lab-source-cell"); delete (old as HTMLElement).dataset.xlaLabLine; }
  cell.node.classList.add("xla-lab-source-cell");
  cell.node.dataset.xlaLabLine = String(line);
  // a rendered markdown cell has no editor to mark
  await cell.ready;
  const editor = cell.editor;
  if (!editor) return true;
  try { editor.setCursorPosition({ line: line - 1, column: 0 }); } catch { /* the editor may be read-only / detached */ }
  const host = cell.node.querySelector<HTMLElement>(".jp-InputArea-editor") ?? editor.host;
  const lineEl = host.querySelectorAll<HTMLElement>(".cm-content .cm-line")[line - 1];
  let top: number, height: number;
  const hostRect = host.getBoundingClientRect();
  if (lineEl) {
    const r = lineEl.getBoundingClientRect();
    top = r.top - hostRect.top; height = r.height;
  } else {
    const c = editor.getCoordinateForPosition({ line: line - 1, column: 0 });
    if (!c) return true;
    top = c.top - hostRect.top; height = Math.max(14, c.bottom - c.top);
  }
  if (getComputedStyle(host).position === "static") host.style.position = "relative";
  const mark = document.createElement("div");
  mark.className = MARK;
  mark.dataset.line = String(line);
  mark.style.top = `${top}px`;
  mark.style.height = `${height}px`;
  host.append(mark);
  return true;
}
