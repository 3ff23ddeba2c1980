// Tiny DOM helpers. Text always goes in through textContent: no user string ever reaches innerHTML.
import { lineRef } from "../core/format";
import { kernelLineParts, type KernelLines } from "../core/kernels";
import type { SourceRef } from "../core/model";

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: (Child | Child[])[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** A long identifier (a kernel name such as `subtract_multiply_fusion.clone`) as text that may wrap
 * after its `_` and `.` separators rather than mid-word. */
export function breakable(name: string): (string | HTMLElement)[] {
  const out: (string | HTMLElement)[] = [];
  for (const part of name.split(/(?<=[_.])/)) {
    if (out.length) out.push(document.createElement("wbr"));
    out.push(part);
  }
  return out;
}

export const SVG_NS = "http://www.w3.org/2000/svg";

export function s<K extends keyof SVGElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: (Child | Child[])[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el: Element, attrs: Attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (k === "class") el.setAttribute("class", String(v));
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el: Element, children: (Child | Child[])[]) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/** `text`, cut at `max` characters with a button that shows the rest: a 600,000-character name or
 * warning from an untrusted notebook must not make a panel 100,000 px tall. */
export function clipped(text: string, max = 300): Node {
  if (text.length <= max) return document.createTextNode(text);
  const span = h("span", { class: "xla-clipped" }, text.slice(0, max) + "\u2026 ");
  const more = h("button", { type: "button", class: "xla-link xla-show-all" }, `show all ${text.length.toLocaleString()} characters`);
  more.addEventListener("click", (e) => { e.stopPropagation(); span.textContent = text; });
  span.append(more);
  return span;
}

/** The first `max` items rendered, and a button that renders the rest. */
export function clippedList<T>(parent: HTMLElement, items: readonly T[], render: (item: T) => Node, max = 20): HTMLElement {
  parent.append(...items.slice(0, max).map(render));
  if (items.length > max) {
    const more = h("button", { type: "button", class: "xla-link xla-show-all" }, `show ${items.length - max} more`);
    more.addEventListener("click", () => { more.remove(); parent.append(...items.slice(max).map(render)); });
    parent.append(more);
  }
  return parent;
}

type LineLike = { cell?: number | null; line: number | null; code?: string | null; file?: string | null };

/** One source line as its `lineRef` text, a link to its cell when `onSource` is given (cell lines only:
 * a file's line has no cell to show). */
export function lineLink(l: LineLike, onSource?: (ref: SourceRef) => void): Node {
  const text = lineRef(l);
  if (!onSource || l.line == null || l.file) return document.createTextNode(text);
  const a = h("span", { class: "xla-source-link", role: "link", tabindex: "0", title: "show this line in the notebook" }, text);
  const ref: SourceRef = { cell: l.cell ?? null, line: l.line, code: l.code ?? null };
  a.addEventListener("click", (e) => { e.stopPropagation(); onSource(ref); });
  return a;
}

/** Source lines as `lineRef` text (`[5]:3, [5]:7 +2`), each a link to its cell when `onSource` is given. */
export function lineLinks(lines: readonly LineLike[], onSource?: (ref: SourceRef) => void, max = 3): HTMLElement {
  const out = h("span", { class: "xla-line-refs" });
  lines.slice(0, max).forEach((l, i) => {
    if (i) out.append(", ");
    out.append(lineLink(l, onSource));
  });
  if (lines.length > max) out.append(` +${lines.length - max}`);
  return out;
}

/** A kernel's lines as kernelLineText writes them (`[5]:3 (modeling_bert.py:413)`), its cell lines links. */
export function kernelLineLinks(k: KernelLines, onSource?: (ref: SourceRef) => void, limit = 4): HTMLElement {
  const out = h("span", { class: "xla-line-refs" });
  for (const p of kernelLineParts(k, limit)) out.append(typeof p === "string" ? p : lineLink(p, onSource));
  return out;
}
