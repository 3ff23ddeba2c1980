// The Graphviz WASM module, loaded once per page. In the cell widget the kernel sends its bytes
// ({kind: "viz"}, buffers[0]) and they are imported through a Blob URL; the module is cached on
// globalThis so every panel of the page shares it.

export interface VizLike {
  renderSVGElement(dot: string, options?: { engine?: string }): SVGSVGElement;
}
export type VizLoader = () => Promise<VizLike>;

const KEY = "__xla_lab_viz__";
type Slot = { promise?: Promise<VizLike>; resolve?: (bytes: ArrayBuffer | ArrayBufferView) => void; asker?: object };

function slot(): Slot {
  const g = globalThis as unknown as Record<string, Slot>;
  return (g[KEY] ??= {});
}

async function importBytes(bytes: ArrayBuffer | ArrayBufferView): Promise<VizLike> {
  const part = bytes instanceof ArrayBuffer ? bytes : new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const url = URL.createObjectURL(new Blob([part as BlobPart], { type: "text/javascript" }));
  try {
    const mod = await import(/* @vite-ignore */ url);
    return await mod.instance();
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** The page's viz promise; the first caller that has bytes to offer settles it. */
export function sharedViz(): { promise: Promise<VizLike>; provide: (bytes: ArrayBuffer | ArrayBufferView) => void; pending: boolean } {
  const sl = slot();
  const pending = !sl.promise;
  if (!sl.promise) {
    sl.promise = new Promise<VizLike>((resolve, reject) => {
      sl.resolve = (bytes) => {
        sl.resolve = undefined;
        importBytes(bytes).then(resolve, (e) => { sl.promise = undefined; reject(e); });
      };
    });
  }
  return { promise: sl.promise, provide: (b) => sl.resolve?.(b), pending };
}

export function vizReady(): boolean {
  return !!slot().promise && !slot().resolve;
}

/**
 * Whether the caller should ask its kernel for the bytes: only one request is outstanding per page
 * (a busy kernel answers queued requests late, and each answer is ~1.2 MB). The asker gives the claim
 * back with releaseVizRequest(token) when its view goes away unanswered, so another panel can ask.
 */
export function claimVizRequest(token: object): boolean {
  const sl = slot();
  if (!sl.resolve || sl.asker) return false;
  sl.asker = token;
  return true;
}

export function releaseVizRequest(token: object) {
  const sl = slot();
  if (sl.asker === token) sl.asker = undefined;
}
