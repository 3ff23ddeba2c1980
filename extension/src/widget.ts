// anywidget entry: `export default { initialize, render }`. The Graphviz WASM is not bundled: the
// kernel sends its bytes ({kind: "viz"}, buffers[0]), on request ({kind: "need-viz"}) or unasked; the
// module is imported once per page and shared by every panel.
// The panel model arrives in the widget's opening state; the kernel then lets it go (view/panel.py), so a
// page that asks the kernel for the state again gets an empty model and asks {kind: "need-model"}: the
// reply {kind: "model"} carries the model as JSON bytes (buffers[0]) or an error.
import { readModelReply, wantsModel } from "./core/modelreply";
import type { SourceRef } from "./core/model";
import { PanelView, SOURCE_EVENT } from "./panel/panel";
import { claimVizRequest, releaseVizRequest, sharedViz } from "./panel/viz";

interface AnyModel {
  get(name: string): unknown;
  on(event: string, cb: (...args: unknown[]) => void): void;
  off(event?: string | null, cb?: ((...args: unknown[]) => void) | null): void;
  send(content: unknown, callbacks?: unknown, buffers?: ArrayBuffer[]): void;
}

function listenForViz(model: AnyModel): () => void {
  const onMsg = (msg: unknown, buffers: unknown) => {
    const m = msg as { kind?: string } | null;
    if (m?.kind === "viz" && Array.isArray(buffers) && buffers.length) sharedViz().provide(buffers[0] as ArrayBuffer | DataView);
  };
  model.on("msg:custom", onMsg);
  return () => model.off("msg:custom", onMsg);
}

/** Once per widget model, before any view: take a viz the kernel pushes unasked. */
function initialize({ model }: { model: AnyModel }) {
  return listenForViz(model);
}

function render({ model, el }: { model: AnyModel; el: HTMLElement }) {
  const t0 = performance.now();
  const token = {};
  const viz = sharedViz();
  const stopListening = listenForViz(model);
  let poll: ReturnType<typeof setInterval> | undefined;
  const ask = () => { if (claimVizRequest(token)) model.send({ kind: "need-viz" }); };
  const getViz = () => {
    ask();
    // if the panel that asked goes away unanswered, another one asks
    poll ??= setInterval(ask, 2000);
    return viz.promise.finally(() => { clearInterval(poll); releaseVizRequest(token); });
  };
  // lines are links where the JupyterLab extension answers SOURCE_EVENT (it scrolls to the cell)
  let capture: unknown = {};
  const onSource = (ref: SourceRef) => el.dispatchEvent(new CustomEvent(SOURCE_EVENT, { bubbles: true, detail: { capture, ref } }));
  const view = new PanelView({ getViz, t0, onSource: document.body.dataset.xlaLabReveal === "1" ? onSource : undefined });
  el.classList.add("xla-lab-widget");
  el.append(view.el);
  const show = (m: unknown, t?: number) => {
    // the kernel opens the widget with the model as JSON text (xla_lab/view/panel.py get_state)
    if (typeof m === "string" && m) {
      try { m = JSON.parse(m); } catch { /* setModel reports it */ }
    }
    capture = (typeof m === "object" && m !== null && (m as { capture?: unknown }).capture) || {};
    view.setModel(m, t);
  };
  const onModel = () => show(model.get("model"));
  const onProgress = () => view.setProgress(model.get("progress"));
  const onModelReply = (msg: unknown, buffers: unknown) => {
    const reply = readModelReply(msg, buffers);
    if (reply && "error" in reply) view.showError(reply.error);
    else if (reply) show(reply.model);
  };
  model.on("change:model", onModel);
  model.on("change:progress", onProgress);
  model.on("msg:custom", onModelReply);
  onProgress();
  const initial = model.get("model");
  if (wantsModel(initial, model.get("has_capture"))) model.send({ kind: "need-model" });
  else show(initial, t0);
  return () => {
    clearInterval(poll);
    releaseVizRequest(token);
    stopListening();
    model.off("change:model", onModel);
    model.off("change:progress", onProgress);
    model.off("msg:custom", onModelReply);
    view.destroy();
  };
}

export default { initialize, render };
