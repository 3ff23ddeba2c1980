import { describe, expect, it } from "vitest";
import { readModelReply, wantsModel } from "../src/core/modelreply";

const bytes = (s: string) => new TextEncoder().encode(s);

describe("asking the kernel for a panel model it let go", () => {
  it("asks only for a capture panel whose state came back empty", () => {
    expect(wantsModel({}, true)).toBe(true);
    expect(wantsModel(null, true)).toBe(true);
    expect(wantsModel({ schema: "xla_lab.panel/1" }, true)).toBe(false);
    expect(wantsModel({}, false)).toBe(false); // a progress-only panel
  });
  it("reads the model from the reply's buffer, as ArrayBuffer or a view", () => {
    const b = bytes('{"schema": "xla_lab.panel/1", "x": [1, "é"]}');
    expect(readModelReply({ kind: "model" }, [b.buffer])).toEqual({ model: { schema: "xla_lab.panel/1", x: [1, "é"] } });
    const padded = new Uint8Array(b.length + 4);
    padded.set(b, 2);
    expect(readModelReply({ kind: "model" }, [new DataView(padded.buffer, 2, b.length)])).toEqual(
      { model: { schema: "xla_lab.panel/1", x: [1, "é"] } });
  });
  it("says why there is no model", () => {
    expect(readModelReply({ kind: "model", error: "xla_lab no longer keeps this capture" }, [])).toEqual(
      { error: "xla_lab no longer keeps this capture" });
    expect(readModelReply({ kind: "model" }, [])).toEqual({ error: "the kernel sent no panel model" });
    expect("error" in readModelReply({ kind: "model" }, [bytes("{not json").buffer])!).toBe(true);
  });
  it("ignores other messages", () => {
    expect(readModelReply({ kind: "viz" }, [new ArrayBuffer(1)])).toBeNull();
    expect(readModelReply(null, [])).toBeNull();
  });
});
