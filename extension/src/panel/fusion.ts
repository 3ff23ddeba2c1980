// The Fusion map tab: the kernels of the optimized module (sortable, expandable) and the cell source
// annotated with the kernels each line feeds.
import { kernelColor as hashColor } from "../core/dot";
import { fmtBytes, fmtCount, lineRef } from "../core/format";
import { annotateSource, fileLines, sortKernels, type AnnotatedLine, type KernelSortKey } from "../core/kernels";
import type { Kernel, ModelFile, SourceLine, SourceRef } from "../core/model";
import { h, kernelLineLinks } from "./dom";

export interface FusionView { el: HTMLElement; focusKernel(name: string): void }

const COLS: [KernelSortKey | null, string][] = [["name", "kernel"], ["kind", "kind"], [null, "shape"], ["flops", "flops"], ["bytes", "bytes"], ["members", "members"], [null, "aten ops"], [null, "lines"]];

/** `onSource`: when set, a kernel's cell lines are links to the notebook; with `openShowsSource` (the side
 * panel), opening a kernel shows its first line too. */
export function renderFusion(kernels: readonly Kernel[], source: readonly SourceLine[], onSource?: (ref: SourceRef) => void,
  modelFiles: readonly ModelFile[] = [], kernelColor: (kernel: string) => string = hashColor, openShowsSource = false): FusionView {
  let key: KernelSortKey = "flops";
  let desc = true;
  const open = new Set<string>();
  const table = h("table", { class: "xla-table xla-kernels" });
  const el = h("div", { class: "xla-fusion" });
  if (!kernels.length) el.append(h("p", { class: "xla-muted xla-empty" }, "No kernels: the optimized HLO of this graph was not captured."));
  else el.append(h("p", { class: "xla-muted" }, `${kernels.length} kernels. Click a column to sort, a row to see its members, aten ops and lines.`), h("div", { class: "xla-scroll" }, table));

  function drawTable() {
    const head = h("tr", null, COLS.map(([k, label]) => {
      const th = h("th", k ? { class: "xla-sortable", "data-sort": k, "aria-sort": k === key ? (desc ? "descending" : "ascending") : "none" } : null,
        label + (k === key ? (desc ? " \u25be" : " \u25b4") : ""));
      if (k) th.addEventListener("click", () => { if (key === k) desc = !desc; else { key = k; desc = k === "flops" || k === "bytes" || k === "members"; } drawTable(); });
      return th;
    }));
    const body = h("tbody");
    for (const k of sortKernels(kernels, key, desc)) {
      const tr = h("tr", { class: "xla-kernel-row", "data-kernel": k.name, "aria-expanded": open.has(k.name) ? "true" : "false" },
        h("td", null, h("span", { class: "xla-swatch", style: `background:${kernelColor(k.name)}` }), h("code", null, k.name)),
        h("td", null, k.kind + (k.collective ? " (collective)" : "")), h("td", null, h("code", null, k.shape)),
        h("td", { class: "xla-num" }, fmtCount(k.flops, "FLOP")), h("td", { class: "xla-num" }, fmtBytes(k.bytes)),
        h("td", { class: "xla-num" }, String(k.members.length)),
        h("td", null, k.aten_ops.slice(0, 3).map((o) => o.replace(/^aten::/, "")).join(", ") + (k.aten_ops.length > 3 ? ` +${k.aten_ops.length - 3}` : "")),
        h("td", null, kernelLineLinks(k, onSource), k.lines_inferred ? " (inferred)" : ""));
      tr.addEventListener("click", () => {
        if (open.has(k.name)) open.delete(k.name); else { open.add(k.name); if (openShowsSource && onSource && k.lines.length) onSource(k.lines[0]); }
        drawTable();
      });
      body.append(tr);
      if (open.has(k.name)) body.append(h("tr", { class: "xla-kernel-detail" }, h("td", { colspan: COLS.length }, detail(k))));
    }
    table.replaceChildren(h("thead", null, head), body);
  }

  function detail(k: Kernel): HTMLElement {
    return h("div", { class: "xla-kernel-detail-body" },
      h("div", null, h("b", null, "members: "), h("code", null, k.members.join(", ") || "-")),
      h("div", null, h("b", null, "aten ops: "), k.aten_ops.join(", ") || "-"),
      h("div", null, h("b", null, k.lines_inferred ? "lines (inferred from its inputs): " : "lines: "),
        k.lines.length ? h("ul", null, k.lines.map((l) => {
          const li = h("li", null, `${lineRef(l)} `, l.code ? h("code", null, l.code) : "");
          if (onSource && !l.file) {
            li.classList.add("xla-source-link");
            li.addEventListener("click", (e) => { e.stopPropagation(); onSource(l); });
          }
          return li;
        })) : "-"),
      fileLines(k).length ? h("div", null, h("b", null, "model lines (outside the cell): "),
        h("ul", null, fileLines(k).map((l) => h("li", { title: l.file ?? "" }, `${lineRef(l)}${l.function ? ` (${l.function})` : ""} `,
          l.code ? h("code", null, l.code) : "")))) : null,
      k.sources.length ? h("div", null, h("b", null, "library frames: "), k.sources.join(", ")) : null,
      h("div", null, h("b", null, "computation: "), h("code", null, k.computation ?? "-")));
  }

  drawTable();

  // annotated source, like %%cython -a: heat by the work of the kernels each line feeds
  const annotated = (rows: AnnotatedLine[], fns?: string[]) => {
    const src = h("div", { class: "xla-annotated", role: "list" });
    rows.forEach((r, i) => {
      const line = h("div", { class: "xla-ann-line", role: "listitem", style: `--xla-heat:${r.heat.toFixed(3)}`, "data-line": r.line },
        h("span", { class: "xla-ln" }, String(r.line)), h("span", { class: "xla-ann-code" }, r.code || " ", fns?.[i] ? h("span", { class: "xla-muted" }, `  (${fns[i]})`) : ""),
        h("span", { class: "xla-ann-kernels" }, r.kernels.slice(0, 6).map((name) => {
          const a = h("button", { type: "button", class: "xla-chip", "data-kernel": name, style: `border-color:${kernelColor(name)}` }, name);
          a.addEventListener("click", (e) => { e.stopPropagation(); focusKernel(name); });
          return a;
        }), r.kernels.length > 6 ? ` +${r.kernels.length - 6}` : ""));
      src.append(line);
    });
    return src;
  };
  const rows = annotateSource(source, kernels);
  if (rows.length) el.append(h("h4", null, "Cell source, line by line: the kernels each line feeds (shade: their flops + bytes)"), annotated(rows));
  for (const f of modelFiles) {
    const fileRows = annotateSource(f.lines, kernels);
    if (!fileRows.length) continue;
    el.append(h("h4", { class: "xla-model-file", "data-file": f.file }, `Model file ${f.file}: the lines that feed kernels`),
      annotated(fileRows, f.lines.map((l) => l.function)));
  }

  function focusKernel(name: string) {
    open.add(name);
    drawTable();
    const row = table.querySelector<HTMLElement>(`tr[data-kernel="${CSS.escape(name)}"]`);
    if (row) {
      row.classList.add("xla-flash");
      row.scrollIntoView?.({ block: "nearest" });
      setTimeout(() => row.classList.remove("xla-flash"), 1500);
    }
  }
  return { el, focusKernel };
}
