// The kernel lets a displayed panel's model go (xla_lab/view/panel.py): a widget whose state comes back
// empty asks {kind: "need-model"}, and the reply {kind: "model"} carries the model as JSON bytes
// (buffers[0]) or an error. DOM-free, so it is tested on its own.

/** Should this widget ask the kernel for its model (it has a capture, but its state came back empty)? */
export function wantsModel(initial: unknown, hasCapture: unknown): boolean {
  const empty = initial == null || initial === "" || (typeof initial === "object" && Object.keys(initial as object).length === 0);
  return hasCapture === true && empty;
}

export type ModelReply = { model: unknown } | { error: string };

/** A custom message read as a reply to need-model; null if it is another kind of message. */
export function readModelReply(msg: unknown, buffers: unknown): ModelReply | null {
  const m = msg as { kind?: unknown; error?: unknown } | null;
  if (!m || typeof m !== "object" || m.kind !== "model") return null;
  if (typeof m.error === "string" && m.error) return { error: m.error };
  if (!Array.isArray(buffers) || !buffers.length) return { error: "the kernel sent no panel model" };
  const raw = buffers[0] as ArrayBuffer | ArrayBufferView;
  const bytes = raw instanceof ArrayBuffer ? new Uint8Array(raw) : new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  try {
    return { model: JSON.parse(new TextDecoder().decode(bytes)) };
  } catch (e) {
    return { error: `the panel model could not be read: ${(e as Error).message}` };
  }
}
