// HLO text: syntax-highlighting tokens, metadata stripping, and a line diff.

export type TokenKind = "comment" | "string" | "keyword" | "name" | "kernel" | "opcode" | "type" | "number" | "attr" | "punct" | "text";
export interface Token { kind: TokenKind; text: string }

const KEYWORDS = new Set(["HloModule", "ENTRY", "ROOT", "true", "false"]);
const TYPE_RE = /^(?:pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f16|bf16|f32|f64|f8e4m3fn|f8e5m2|c64|c128|token|tuple)(?=\[|\b)/;

/**
 * Split one line of HLO text into tokens. `kernels` are names (without "%") to mark as kernel links.
 * The concatenation of the token texts is always the input line.
 */
export function tokenizeHloLine(line: string, kernels?: ReadonlySet<string>): Token[] {
  const out: Token[] = [];
  const push = (kind: TokenKind, text: string) => {
    if (!text) return;
    const last = out[out.length - 1];
    if (last && last.kind === kind && (kind === "text" || kind === "punct")) last.text += text;
    else out.push({ kind, text });
  };
  let i = 0;
  let sawEquals = false;
  let sawOpcode = false;
  while (i < line.length) {
    const rest = line.slice(i);
    const c = line[i];
    if (rest.startsWith("//") || rest.startsWith("/*")) {
      const end = rest.startsWith("/*") ? rest.indexOf("*/", 2) : -1;
      const len = end >= 0 ? end + 2 : rest.length;
      push("comment", rest.slice(0, len));
      i += len;
      continue;
    }
    if (c === '"') {
      let j = i + 1;
      while (j < line.length && line[j] !== '"') j += line[j] === "\\" ? 2 : 1;
      push("string", line.slice(i, Math.min(j + 1, line.length)));
      i = Math.min(j + 1, line.length);
      continue;
    }
    let m = TYPE_RE.exec(rest);
    if (m && (i === 0 || !/[\w.%-]/.test(line[i - 1]))) {
      // the element type plus its dimensions and layout: f32[4,8]{1,0}
      let j = i + m[0].length;
      for (const [open, close] of [["[", "]"], ["{", "}"]]) {
        if (line[j] === open) {
          const k = line.indexOf(close, j);
          if (k > 0) j = k + 1;
        }
      }
      push("type", line.slice(i, j));
      i = j;
      continue;
    }
    m = /^%?[A-Za-z_][\w.\-]*/.exec(rest);
    if (m) {
      const word = m[0];
      const bare = word.replace(/^%/, "");
      const next = line.slice(i + word.length);
      if (KEYWORDS.has(word)) push("keyword", word);
      else if (kernels?.has(bare) && (word.startsWith("%") || !/^\(/.test(next))) push("kernel", word);
      else if (/^=/.test(next) && !sawEquals) push("name", word);
      else if (/^=/.test(next)) push("attr", word);
      else if (sawEquals && !sawOpcode && /^\(/.test(next)) { push("opcode", word); sawOpcode = true; }
      else if (word.startsWith("%")) push("name", word);
      else push("text", word);
      i += word.length;
      continue;
    }
    m = /^-?\d+(?:\.\d+)?(?:e[+-]?\d+)?/i.exec(rest);
    if (m && (i === 0 || !/[\w.]/.test(line[i - 1]))) {
      push("number", m[0]);
      i += m[0].length;
      continue;
    }
    if (c === "=") sawEquals = true;
    push(/[()[\]{},=:]/.test(c) ? "punct" : "text", c);
    i++;
  }
  return out;
}

/** Drop `, metadata={...}` (source locations) from an HLO line, for reading and for diffing. */
/**
 * A line without its `, metadata={...}` groups: the one rule of both languages (xla_lab/hlo/parser.py strip_metadata;
 * the golden tests/fixtures/hlo/strip_metadata.json). A group ends at the `}` closing its `{`, braces nest, quoted
 * strings are opaque (a backslash escapes the next character), and a group left open runs to the end of the line.
 */
export function stripMetadata(line: string): string {
  const needle = ", metadata={";
  let k = line.indexOf(needle);
  while (k >= 0) {
    let depth = 0, j = k + needle.length - 1;
    for (; j < line.length; j++) {
      const c = line[j];
      if (c === '"') {
        j++;
        while (j < line.length && line[j] !== '"') j += line[j] === "\\" ? 2 : 1;
      } else if (c === "{") depth++;
      else if (c === "}" && --depth === 0) break;
    }
    line = line.slice(0, k) + line.slice(j + 1);
    k = line.indexOf(needle, k);
  }
  return line;
}

export type DiffOp = "same" | "del" | "add";
export interface DiffRow { op: DiffOp; a: number | null; b: number | null } // line indexes (0-based)

/**
 * Line diff of `a` -> `b` (Myers, O((N+M)D) time, O(D^2) memory); beyond `maxEdits` edits the middle is reported as one
 * deleted block followed by one added block, so huge unrelated modules cannot stall the browser.
 */
export function diffLines(a: readonly string[], b: readonly string[], maxEdits = 2000): DiffRow[] {
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const rows: DiffRow[] = [];
  for (let i = 0; i < pre; i++) rows.push({ op: "same", a: i, b: i });
  const A = a.slice(pre, a.length - suf), B = b.slice(pre, b.length - suf);
  const mid = myers(A, B, maxEdits);
  if (mid) for (const r of mid) rows.push({ op: r.op, a: r.a === null ? null : r.a + pre, b: r.b === null ? null : r.b + pre });
  else {
    for (let i = 0; i < A.length; i++) rows.push({ op: "del", a: i + pre, b: null });
    for (let j = 0; j < B.length; j++) rows.push({ op: "add", a: null, b: j + pre });
  }
  for (let k = 0; k < suf; k++) rows.push({ op: "same", a: a.length - suf + k, b: b.length - suf + k });
  return rows;
}

function myers(a: readonly string[], b: readonly string[], maxD: number): DiffRow[] | null {
  const n = a.length, m = b.length;
  if (n === 0 || m === 0) {
    return [...a.map((_, i) => ({ op: "del" as const, a: i, b: null })), ...b.map((_, j) => ({ op: "add" as const, a: null, b: j }))];
  }
  // intern lines so comparisons are integer compares
  const ids = new Map<string, number>();
  const ia = a.map((s) => { let v = ids.get(s); if (v === undefined) ids.set(s, (v = ids.size)); return v; });
  const ib = b.map((s) => { let v = ids.get(s); if (v === undefined) ids.set(s, (v = ids.size)); return v; });
  const max = Math.min(n + m, maxD);
  const off = max + 1;
  let v = new Int32Array(2 * max + 3);
  // trace[d] holds v[-d..d] before round d (memory ~D^2, not D * (N+M))
  const trace: Int32Array[] = [];
  for (let d = 0; d <= max; d++) {
    trace.push(v.slice(off - d, off + d + 1));
    const nv = v;
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && nv[off + k - 1] < nv[off + k + 1]) ? nv[off + k + 1] : nv[off + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && ia[x] === ib[y]) { x++; y++; }
      nv[off + k] = x;
      if (x >= n && y >= m) return backtrack(trace, off, n, m, d, nv);
    }
    v = nv;
  }
  return null;
}

function backtrack(trace: Int32Array[], off: number, n: number, m: number, dEnd: number, last: Int32Array): DiffRow[] {
  const rows: DiffRow[] = [];
  let x = n, y = m;
  for (let d = dEnd; d > 0; d--) {
    const t = trace[d]; // index k -> t[k + d]
    const at = (k: number) => t[k + d];
    const k = x - y;
    const prevK = k === -d || (k !== d && at(k - 1) < at(k + 1)) ? k + 1 : k - 1;
    const px = at(prevK), py = px - prevK;
    while (x > px && y > py) { x--; y--; rows.push({ op: "same", a: x, b: y }); }
    if (x === px) { y--; rows.push({ op: "add", a: null, b: y }); }
    else { x--; rows.push({ op: "del", a: x, b: null }); }
  }
  while (x > 0 && y > 0) { x--; y--; rows.push({ op: "same", a: x, b: y }); }
  void last;
  return rows.reverse();
}

export interface SideRow { op: "same" | "change" | "del" | "add"; a: number | null; b: number | null }

/** Diff rows paired for a side-by-side view: a run of deletions next to the following additions. */
export function sideBySide(rows: readonly DiffRow[]): SideRow[] {
  const out: SideRow[] = [];
  let i = 0;
  while (i < rows.length) {
    if (rows[i].op === "same") { out.push({ op: "same", a: rows[i].a, b: rows[i].b }); i++; continue; }
    const dels: number[] = [], adds: number[] = [];
    while (i < rows.length && rows[i].op !== "same") {
      if (rows[i].op === "del") dels.push(rows[i].a!);
      else adds.push(rows[i].b!);
      i++;
    }
    const n = Math.max(dels.length, adds.length);
    for (let k = 0; k < n; k++) {
      const a = k < dels.length ? dels[k] : null, b = k < adds.length ? adds[k] : null;
      out.push({ op: a !== null && b !== null ? "change" : a !== null ? "del" : "add", a, b });
    }
  }
  return out;
}
