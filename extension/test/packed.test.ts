import { readdirSync, readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { CAPTURE_MIME, CaptureStore, captureKey } from "../src/core/captures";
import { parsePanelModel } from "../src/core/model";
import { MAX_UNPACKED_BYTES, PACKING, isPacked, unpackCapture } from "../src/core/packed";
import { validModel } from "./fixtures";

/** Packed as xla_lab/view/saved_output.py packs it. */
function pack(model: Record<string, unknown>, over: Record<string, unknown> = {}): Record<string, unknown> {
  const text = Buffer.from(JSON.stringify(model), "utf8");
  const c = model.capture as unknown as Record<string, unknown>;
  return { schema: model.schema, packed: PACKING, key: { cell_id: c.cell_id, execution_count: c.execution_count, started_at: c.started_at },
    bytes: text.length, data: gzipSync(text).toString("base64"), ...over };
}

describe("packed capture payloads", () => {
  it("inflates and validates every output the tutorials saved (Python packed them)", async () => {
    const dir = new URL("../../notebooks/", import.meta.url);
    let outputs = 0;
    for (const name of readdirSync(dir).filter((f) => f.endsWith(".ipynb")).sort()) {
      const nb = JSON.parse(readFileSync(new URL(name, dir), "utf8")) as { cells: { outputs?: { data?: Record<string, unknown> }[] }[] };
      for (const out of nb.cells.flatMap((c) => c.outputs ?? [])) {
        const packed = out.data?.[CAPTURE_MIME] as Record<string, any> | undefined;
        if (packed === undefined) continue;
        expect(isPacked(packed), name).toBe(true);
        const model = await unpackCapture(packed) as unknown as Record<string, unknown>;
        const parsed = parsePanelModel(model);
        expect(parsed.capture.cell_id, name).toBe(packed.key.cell_id);
        expect(captureKey(packed)).toBe(captureKey(model));
        expect(Object.keys(parsed.graphs).length, name).toBeGreaterThan(0);
        outputs += 1;
      }
    }
    expect(outputs).toBeGreaterThanOrEqual(15);
  });

  it("passes unpacked payloads through and keeps non-ASCII text", async () => {
    const m = validModel();
    expect(await unpackCapture(m)).toBe(m);
    (m.capture as unknown as Record<string, unknown>).source = "x = 'é→λ'";
    expect(await unpackCapture(pack(m))).toEqual(m);
  });

  it("refuses damaged, oversized and lying payloads with a clear message", async () => {
    const m = validModel();
    await expect(unpackCapture(pack(m, { packed: "zstd" }))).rejects.toThrow(/unknown packing/);
    await expect(unpackCapture(pack(m, { bytes: MAX_UNPACKED_BYTES + 1 }))).rejects.toThrow(/must say its size/);
    await expect(unpackCapture(pack(m, { bytes: "12" }))).rejects.toThrow(/must say its size/);
    await expect(unpackCapture(pack(m, { data: "%%%" }))).rejects.toThrow(/not base64/);
    await expect(unpackCapture(pack(m, { data: Buffer.from("not gzip").toString("base64") }))).rejects.toThrow(/damaged/);
    const p = pack(m);
    await expect(unpackCapture({ ...p, bytes: (p.bytes as number) - 1 })).rejects.toThrow(/more than its/);
    await expect(unpackCapture({ ...p, bytes: (p.bytes as number) + 1 })).rejects.toThrow(/not \d+/);
  });

  it("a store reads packed outputs once, and remembers the ones it cannot read", async () => {
    const store = new CaptureStore();
    const p = pack(validModel());
    const [a, b] = await Promise.all([store.addPayload(p, "cell-1", "saved"), store.addPayload(p, null, "saved")]);
    expect(a).not.toBeNull();
    expect(b).toBe(a);
    expect(store.size).toBe(1);
    expect(a!.model.capture.cell_id).toBe("c1");
    const bad = pack({ ...validModel(), capture: { ...(validModel().capture as object), started_at: 2 } }, { data: "AAAA" });
    expect(await store.addPayload(bad, null, "saved")).toBeNull();
    expect(store.errors.some((e) => e.message.includes("damaged"))).toBe(true);
    const lying = pack(validModel(), { key: { cell_id: "other", execution_count: 1, started_at: 9 } });
    expect(await store.addPayload(lying, null, "saved")).toBeNull();
    expect(store.errors.some((e) => e.message.includes("key does not match"))).toBe(true);
    expect(store.size).toBe(1);
  });
});
