import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { diffLines, sideBySide, stripMetadata, tokenizeHloLine } from "../src/core/hlo";

const LINE = '  %fusion.3 = f32[4,8]{1,0} fusion(f32[4,8]{1,0} %p.1, f32[] %c), kind=kLoop, calls=%fused_computation.3, metadata={op_type="aten__add" source_file="/x/a b.py" source_line=12}';

describe("HLO tokens", () => {
  it("round-trips and classifies", () => {
    const toks = tokenizeHloLine(LINE, new Set(["fusion.3"]));
    expect(toks.map((t) => t.text).join("")).toBe(LINE);
    const kinds = (k: string) => toks.filter((t) => t.kind === k).map((t) => t.text);
    expect(kinds("kernel")).toEqual(["%fusion.3"]);
    expect(kinds("opcode")).toEqual(["fusion"]);
    expect(kinds("type")).toContain("f32[4,8]{1,0}");
    expect(kinds("string")).toEqual(['"aten__add"', '"/x/a b.py"']);
    expect(kinds("attr")).toEqual(expect.arrayContaining(["kind", "calls", "metadata"]));
    expect(kinds("number")).toContain("12");
  });

  it("marks keywords and keeps odd text intact", () => {
    for (const line of ["ENTRY %main (p: f32[2]) -> f32[2] {", "  ROOT %t = (f32[2], s32[]) tuple(%a, %b)", "HloModule m, entry_computation_layout={()->f32[]}", '"unterminated', "}", ""]) {
      expect(tokenizeHloLine(line).map((t) => t.text).join("")).toBe(line);
    }
    expect(tokenizeHloLine("ENTRY %main {")[0]).toEqual({ kind: "keyword", text: "ENTRY" });
  });

  it("strips metadata by the rule both languages share (the golden)", () => {
    const golden = JSON.parse(readFileSync(fileURLToPath(new URL("../../tests/fixtures/hlo/strip_metadata.json", import.meta.url)), "utf8"));
    expect(golden.cases.length).toBeGreaterThan(5);
    for (const c of golden.cases) {
      expect(c.input.split("\n").map(stripMetadata).join("\n"), c.name).toBe(c.expected);
    }
  });

  it("strips metadata, braces inside strings included", () => {
    expect(stripMetadata(LINE)).toBe("  %fusion.3 = f32[4,8]{1,0} fusion(f32[4,8]{1,0} %p.1, f32[] %c), kind=kLoop, calls=%fused_computation.3");
    expect(stripMetadata('%a = f32[] add(%x, %y), metadata={op_name="a}b"}, sharding={replicated}')).toBe("%a = f32[] add(%x, %y), sharding={replicated}");
    expect(stripMetadata("%a = f32[] parameter(0)")).toBe("%a = f32[] parameter(0)");
  });
});

describe("diff", () => {
  const apply = (a: string[], b: string[]) => {
    const rows = diffLines(a, b);
    // rebuild both sides from the rows
    expect(rows.filter((r) => r.op !== "add").map((r) => a[r.a!])).toEqual(a);
    expect(rows.filter((r) => r.op !== "del").map((r) => b[r.b!])).toEqual(b);
    return rows;
  };

  it("finds a minimal edit script", () => {
    const rows = apply(["a", "b", "c", "d"], ["a", "x", "c", "d", "e"]);
    expect(rows.map((r) => r.op)).toEqual(["same", "del", "add", "same", "same", "add"]);
    expect(apply([], ["x"]).map((r) => r.op)).toEqual(["add"]);
    expect(apply(["x"], []).map((r) => r.op)).toEqual(["del"]);
    expect(apply(["a", "b"], ["a", "b"]).every((r) => r.op === "same")).toBe(true);
  });

  it("matches the LCS length on random inputs", () => {
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % 5);
    for (let t = 0; t < 50; t++) {
      const a = Array.from({ length: rnd() * 4 }, () => String(rnd()));
      const b = Array.from({ length: rnd() * 4 }, () => String(rnd()));
      const rows = apply(a, b);
      const dp = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
      for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--)
        dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
      expect(rows.filter((r) => r.op === "same")).toHaveLength(dp[0][0]);
    }
  });

  it("gives up gracefully past the edit budget", () => {
    const a = Array.from({ length: 3000 }, (_, i) => `a${i}`), b = Array.from({ length: 3000 }, (_, i) => `b${i}`);
    const rows = diffLines(["head", ...a, "tail"], ["head", ...b, "tail"], 100);
    expect(rows[0].op).toBe("same");
    expect(rows.filter((r) => r.op === "del")).toHaveLength(3000);
    expect(rows.filter((r) => r.op === "add")).toHaveLength(3000);
    expect(rows[rows.length - 1].op).toBe("same");
  });

  it("pairs deletions with additions side by side", () => {
    const rows = sideBySide(diffLines(["a", "b", "c"], ["a", "x", "y", "c"]));
    expect(rows).toEqual([
      { op: "same", a: 0, b: 0 }, { op: "change", a: 1, b: 1 }, { op: "add", a: null, b: 2 }, { op: "same", a: 2, b: 3 },
    ]);
  });
});

describe("real XLA dumps (tests/fixtures/hlo)", () => {
  const dir = fileURLToPath(new URL("../../tests/fixtures/hlo/", import.meta.url));
  const names = readdirSync(dir).filter((f) => f.endsWith(".before.txt")).map((f) => f.replace(".before.txt", ""));

  it("tokenizes every line losslessly, finds opcodes", () => {
    expect(names.length).toBeGreaterThan(3);
    for (const name of names) {
      for (const part of ["before", "after"]) {
        const lines = readFileSync(join(dir, `${name}.${part}.txt`), "utf8").split("\n");
        let opcodes = 0;
        for (const line of lines) {
          const toks = tokenizeHloLine(line);
          expect(toks.map((t) => t.text).join("")).toBe(line);
          opcodes += toks.filter((t) => t.kind === "opcode").length;
        }
        expect(opcodes).toBeGreaterThan(lines.length / 4);
      }
    }
  });

  it("diffs before / after quickly", () => {
    for (const name of names) {
      const [a, b] = ["before", "after"].map((p) => readFileSync(join(dir, `${name}.${p}.txt`), "utf8").split("\n").map(stripMetadata));
      const t = performance.now();
      const rows = diffLines(a, b);
      expect(performance.now() - t).toBeLessThan(1500);
      expect(rows.filter((r) => r.op !== "add").length).toBe(a.length);
      expect(rows.filter((r) => r.op !== "del").length).toBe(b.length);
    }
  });
});
