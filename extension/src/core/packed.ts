// A saved output's capture payload may be packed (xla_lab/view/saved_output.py): the panel model as
// gzipped JSON in one base64 string, with the run's key beside it so runs can be told apart without
// inflating them. Inflated here with the browser's own DecompressionStream. Pure logic: no DOM.

export const PACKING = "gzip+base64";
/** a payload that claims to inflate to more is refused (notebooks are untrusted input) */
export const MAX_UNPACKED_BYTES = 512 * 1024 * 1024;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

export function isPacked(raw: unknown): raw is Obj {
  return isObj(raw) && raw.packed !== undefined;
}

/** The run key of a packed payload ({cell_id, execution_count, started_at}), else null. */
export function packedKey(raw: unknown): Obj | null {
  return isPacked(raw) && isObj(raw.key) ? raw.key : null;
}

function base64Bytes(text: string): Uint8Array<ArrayBuffer> {
  let bin: string;
  try {
    bin = atob(text);
  } catch {
    throw new Error("the packed capture is not base64");
  }
  const out = new Uint8Array(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The panel model of a payload: itself when not packed, else inflated and parsed. */
export async function unpackCapture(raw: unknown): Promise<unknown> {
  if (!isPacked(raw)) return raw;
  if (raw.packed !== PACKING) throw new Error(`unknown packing of an xla_lab capture: ${String(raw.packed).slice(0, 40)}`);
  const size = raw.bytes;
  if (typeof size !== "number" || !Number.isInteger(size) || size < 0 || size > MAX_UNPACKED_BYTES) {
    throw new Error(`a packed xla_lab capture must say its size (at most ${MAX_UNPACKED_BYTES} bytes)`);
  }
  if (typeof raw.data !== "string") throw new Error("a packed xla_lab capture has no data");
  const stream = new Blob([base64Bytes(raw.data)]).stream().pipeThrough(new DecompressionStream("gzip"));
  const reader = stream.getReader();
  const out = new Uint8Array(size);
  let n = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (n + value.length > size) throw new Error(`the packed xla_lab capture inflates to more than its ${size} bytes`);
      out.set(value, n);
      n += value.length;
    }
  } catch (e) {
    void reader.cancel().catch(() => undefined);
    const msg = (e as Error).message || String(e);
    throw new Error(msg.includes("packed xla_lab capture") ? msg : `the packed xla_lab capture is damaged: ${msg}`);
  }
  if (n !== size) throw new Error(`the packed xla_lab capture inflates to ${n} bytes, not ${size}`);
  return JSON.parse(new TextDecoder().decode(out));
}
