// The golden file that pytest reads too (tests/fixtures/captures/golden.json, written by the Python side from
// real captures): line references and step rows must read the same in both languages.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { lineRef } from "../src/core/format";
import { parsePanelModel, type SourceRef, type StepRow } from "../src/core/model";
import { stepRowText } from "../src/core/steps";
import { validModel } from "./fixtures";

interface Golden {
  schema: string;
  refs: { ref: SourceRef; text: string }[];
  captures: Record<string, { rows: StepRow[]; warnings: string[] }>;
}

const golden = JSON.parse(readFileSync(new URL("../../tests/fixtures/captures/golden.json", import.meta.url), "utf8")) as Golden;

describe("golden.json (shared with pytest)", () => {
  it("is the golden format", () => {
    expect(golden.schema).toBe("xla_lab.golden/1");
    expect(golden.refs.length).toBeGreaterThan(0);
    expect(Object.keys(golden.captures).length).toBeGreaterThan(0);
  });

  it("writes every line reference as Python does", () => {
    for (const { ref, text } of golden.refs) expect(lineRef(ref), JSON.stringify(ref)).toBe(text);
  });

  describe.each(Object.entries(golden.captures))("capture %s", (_, capture) => {
    it("writes every step row as Python does", () => {
      for (const row of capture.rows) expect(stepRowText(row), JSON.stringify(row)).toBe(row.text);
    });

    it("keeps the rows and warnings unchanged through the panel model's parser", () => {
      const m = validModel() as Record<string, any>;
      m.summary = { ...m.summary, rows: capture.rows, warnings: capture.warnings };
      const parsed = parsePanelModel(JSON.parse(JSON.stringify(m)));
      expect(parsed.summary.rows).toStrictEqual(capture.rows);
      expect(parsed.summary.warnings).toStrictEqual(capture.warnings);
    });
  });
});
