// A minimal fake document for the tabs' DOM tests (no jsdom here): elements keep their children, attributes
// and listeners; text goes in as text nodes, and assigning markup throws, so a test fails if any view ever
// writes user data as HTML.
import { afterEach, beforeEach } from "vitest";

export class FakeNode {
  parent: FakeEl | null = null;
  constructor(readonly nodeType: number, public data = "") {}
  get textContent(): string { return this.data; }
  remove() { this.parent?.removeChild(this); }
}

export class FakeEl extends FakeNode {
  children: FakeNode[] = [];
  attrs = new Map<string, string>();
  listeners = new Map<string, ((e: unknown) => void)[]>();
  hidden = false;
  constructor(readonly tagName: string, readonly ns: string | null = null) { super(1); }
  setAttribute(k: string, v: string) { this.attrs.set(k, String(v)); }
  getAttribute(k: string) { return this.attrs.get(k) ?? null; }
  hasAttribute(k: string) { return this.attrs.has(k); }
  addEventListener(type: string, f: (e: unknown) => void) { this.listeners.set(type, [...(this.listeners.get(type) ?? []), f]); }
  dispatch(type: string) { for (const f of this.listeners.get(type) ?? []) f({ type, target: this, stopPropagation() {} }); }
  append(...nodes: (FakeNode | string)[]) { for (const n of nodes) this.adopt(typeof n === "string" ? new FakeNode(3, n) : n, this.children.length); }
  prepend(...nodes: (FakeNode | string)[]) { nodes.reverse().forEach((n) => this.adopt(typeof n === "string" ? new FakeNode(3, n) : n, 0)); }
  replaceChildren(...nodes: (FakeNode | string)[]) { for (const c of this.children) c.parent = null; this.children = []; this.append(...nodes); }
  private adopt(n: FakeNode, at: number) { n.parent?.removeChild(n); n.parent = this; this.children.splice(at, 0, n); }
  get firstChild() { return this.children[0] ?? null; }
  removeChild(n: FakeNode) { this.children = this.children.filter((c) => c !== n); n.parent = null; }
  override get textContent(): string { return this.children.map((c) => c.textContent).join(""); }
  set innerHTML(_: string) { throw new Error("markup must never be assigned"); }
  all(): FakeEl[] { return this.children.flatMap((c) => (c instanceof FakeEl ? [c, ...c.all()] : [])); }
}

export const fakeDocument = {
  createElement: (tag: string) => new FakeEl(tag.toUpperCase()),
  createElementNS: (ns: string, tag: string) => new FakeEl(tag, ns),
  createTextNode: (text: string) => new FakeNode(3, text),
};

/** In the enclosing describe: `document` is the fake one during each test. */
export function useFakeDocument() {
  const saved = (globalThis as { document?: unknown }).document;
  beforeEach(() => { (globalThis as { document?: unknown }).document = fakeDocument; });
  afterEach(() => { (globalThis as { document?: unknown }).document = saved; });
}
