// The Summary tab's stats (panel/summary.ts) on the fake document: what compiling syncs waited for their own
// step's execution is a stat of its own from 1 ms (as the text views say it: view/report.py totals_line),
// and 0 shows none.
import { describe, expect, it } from "vitest";
import { parsePanelModel } from "../src/core/model";
import { FakeEl, useFakeDocument } from "./fakedom";
import { validModel } from "./fixtures";

describe("the summary's stats", () => {
  useFakeDocument();
  const stats = async (wait: number) => {
    const { renderSummary } = await import("../src/panel/summary");
    const m = validModel() as any;
    m.summary.execution_wait_s = wait;
    const el = renderSummary(parsePanelModel(m)) as unknown as FakeEl;
    return el.all().filter((e) => (e.getAttribute("class") ?? "").split(" ").includes("xla-stat")).map((e) => e.textContent);
  };

  it("shows the syncs' wait for their step's execution from 1 ms, and nothing below", async () => {
    const shown = await stats(0.35);
    expect(shown.find((s) => s.includes("waited"))).toMatch(/^350\.0 ms\s*syncs waited for execution$/);
    expect((await stats(5e-4)).join()).not.toContain("waited");
    expect((await stats(0)).join()).not.toContain("waited");
    expect(parsePanelModel(validModel()).summary.execution_wait_s).toBe(0);
    const bad = validModel() as any;
    bad.summary.execution_wait_s = "slow";
    expect(() => parsePanelModel(bad)).toThrow(/model\.summary\.execution_wait_s: .*Expected "number"/);
  });
});
