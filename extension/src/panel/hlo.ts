// The HLO tab: before / after optimization side by side, highlighted, with a diff toggle.
import { diffLines, sideBySide, stripMetadata, tokenizeHloLine } from "../core/hlo";
import { h } from "./dom";

const MAX_LINES = 3000;
// kernels are instructions of the optimized module: only the "after" column links them
const NONE: ReadonlySet<string> = new Set();

export interface HloViewOptions {
  kernels: ReadonlySet<string>; onKernel: (name: string) => void;
  /** column headings (default: before / after optimization); the side panel compares two steps */
  heads?: [string, string];
  /** open with the diff on */
  diff?: boolean;
}

function lineEl(text: string | null, n: number | null, kernels: ReadonlySet<string>, cls = ""): HTMLElement {
  const el = h("div", { class: `xla-hlo-line ${cls}` }, h("span", { class: "xla-ln" }, n === null ? "" : String(n + 1)));
  if (text === null) return el;
  const code = h("span", { class: "xla-hlo-code" });
  for (const t of tokenizeHloLine(text, kernels)) {
    if (t.kind === "text") code.append(t.text);
    else if (t.kind === "kernel") {
      code.append(h("a", { class: "xla-tok-kernel", role: "link", tabindex: 0, "data-kernel": t.text.replace(/^%/, ""), title: "show in the fusion map" }, t.text));
    } else code.append(h("span", { class: `xla-tok-${t.kind}` }, t.text));
  }
  el.append(code);
  return el;
}

export function renderHlo(before: string | null | undefined, after: string | null | undefined, opts: HloViewOptions): HTMLElement {
  if (!before && !after) {
    return h("p", { class: "xla-muted xla-empty" }, "No HLO for this graph (XLA's dump was off: load xla_lab before touching an XLA device).");
  }
  let diff = !!opts.diff, meta = false, limit = MAX_LINES;
  const diffBox = h("input", { type: "checkbox", class: "xla-diff-toggle", checked: diff });
  const metaBox = h("input", { type: "checkbox" });
  const body = h("div", { class: "xla-hlo-body" });
  const info = h("span", { class: "xla-muted" });
  const wrap = h("div", { class: "xla-hlo" },
    h("div", { class: "xla-toolbar" }, h("label", { class: "xla-toggle" }, diffBox, " diff"), h("label", { class: "xla-toggle" }, metaBox, " metadata"), info),
    body);
  diffBox.addEventListener("change", () => { diff = diffBox.checked; draw(); });
  metaBox.addEventListener("change", () => { meta = metaBox.checked; draw(); });
  body.addEventListener("click", (e) => {
    const a = (e.target as Element).closest?.("[data-kernel]");
    if (a) opts.onKernel(a.getAttribute("data-kernel")!);
  });
  body.addEventListener("keydown", (e) => {
    const a = (e.target as Element).closest?.("[data-kernel]");
    if (a && e.key === "Enter") opts.onKernel(a.getAttribute("data-kernel")!);
  });

  const prep = (t: string | null | undefined) => (t ?? "").replace(/\n$/, "").split("\n").map((l) => (meta ? l : stripMetadata(l)));
  function draw() {
    body.replaceChildren();
    const a = prep(before), b = prep(after);
    const colA = h("div", { class: "xla-hlo-col" }), colB = h("div", { class: "xla-hlo-col" });
    let truncated = false;
    if (!diff) {
      a.slice(0, limit).forEach((l, i) => colA.append(lineEl(l, i, NONE)));
      b.slice(0, limit).forEach((l, i) => colB.append(lineEl(l, i, opts.kernels)));
      truncated = a.length > limit || b.length > limit;
      info.textContent = `${a.length} lines before, ${b.length} after`;
    } else {
      const rows = sideBySide(diffLines(a, b));
      let changed = 0;
      for (const r of rows.slice(0, limit)) {
        if (r.op !== "same") changed++;
        colA.append(lineEl(r.a === null ? null : a[r.a], r.a, NONE, r.op === "same" ? "" : r.a === null ? "xla-diff-blank" : "xla-diff-del"));
        colB.append(lineEl(r.b === null ? null : b[r.b], r.b, opts.kernels, r.op === "same" ? "" : r.b === null ? "xla-diff-blank" : "xla-diff-add"));
      }
      truncated = rows.length > limit;
      info.textContent = `${changed} changed rows`;
    }
    body.append(h("div", { class: "xla-hlo-grid" },
      h("div", { class: "xla-hlo-head" }, opts.heads?.[0] ?? "before optimization"), h("div", { class: "xla-hlo-head" }, opts.heads?.[1] ?? "after optimization"), colA, colB));
    if (truncated) {
      const more = h("button", { type: "button", class: "xla-btn" }, `show all lines`);
      more.addEventListener("click", () => { limit = Infinity; draw(); });
      body.append(h("p", { class: "xla-muted" }, `showing the first ${limit} lines `, more));
    }
  }
  draw();
  return wrap;
}
