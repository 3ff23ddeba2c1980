// The JupyterLab extension: an inline renderer for the capture MIME type (the cell panel, loaded lazily)
// and the "XLA Lab" side panel of the active notebook. Graphviz is a lazily loaded chunk of this
// extension (served from its static files), not something the kernel sends.
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from "@jupyterlab/application";
import { INotebookTracker, type NotebookPanel } from "@jupyterlab/notebook";
import { IRenderMimeRegistry } from "@jupyterlab/rendermime";
import type { IRenderMime } from "@jupyterlab/rendermime-interfaces";
import { LabIcon } from "@jupyterlab/ui-components";
import { Widget } from "@lumino/widgets";
import { CAPTURE_MIME } from "../core/captures";
import { unpackCapture } from "../core/packed";
import { parsePanelModel, type PanelModel, type SourceRef } from "../core/model";
import { SOURCE_EVENT } from "../panel/panel";
import type { VizLike } from "../panel/viz";
import { revealSource } from "./reveal";
import { loadViews, XlaSidebar } from "./sidebar";

let vizPromise: Promise<VizLike> | null = null;
/** Graphviz (WASM), imported once on first use from the extension's own chunk. */
export function labViz(): Promise<VizLike> {
  vizPromise ??= import("@viz-js/viz").then((m) => m.instance() as unknown as Promise<VizLike>);
  vizPromise.catch(() => { vizPromise = null; });
  return vizPromise;
}

const ICON = new LabIcon({
  name: "xla-lab:icon",
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<circle cx="5" cy="6" r="2.5"/><circle cx="19" cy="6" r="2.5"/><circle cx="12" cy="18" r="2.5"/>' +
    '<path d="M6.5 7.5l4.5 8.5h2l4.5-8.5-1.5-.8L12 14.6 8 6.7z"/></g></svg>',
});

const WIDGET_MIME = "application/vnd.jupyter.widget-view+json";
/** marks a summary-only `%%xla` output (`%xla save summary`): it carries no capture (view/panel.py) */
const SUMMARY_MIME = "application/vnd.xla-lab.summary+json";

/**
 * A `%%xla` output carries the cell panel twice: as an anywidget view and as the capture itself. A live
 * widget wins (it shows compile progress and updates); but the widget of an output read from the file
 * has no model any more ("Loading widget..." / "model not found"), so for those the notebook draws the
 * capture with this extension's renderer, or, for a summary-only output, its HTML summary. Saved =
 * rendered while the notebook was still loading.
 */
function preferCaptureForSavedWidgets(panel: NotebookPanel) {
  const rm = panel.content.rendermime;
  const saved = new Set<string>();
  const preferred = rm.preferredMimeType.bind(rm);
  rm.preferredMimeType = (bundle, safe) => {
    const m = preferred(bundle, safe);
    if (m !== WIDGET_MIME) return m;
    const instead = CAPTURE_MIME in bundle && rm.getFactory(CAPTURE_MIME) ? CAPTURE_MIME
      : SUMMARY_MIME in bundle && "text/html" in bundle ? "text/html" : null;
    if (instead === null) return m;
    const view = bundle[WIDGET_MIME] as { model_id?: unknown } | null;
    const id = String(view?.model_id ?? "");
    if (!panel.context.isReady) saved.add(id);
    return saved.has(id) ? instead : m;
  };
}

type Reveal = (capture: { cell_id?: unknown; execution_count?: unknown }, ref: SourceRef) => void;

class CaptureRenderer extends Widget implements IRenderMime.IRenderer {
  private view: { destroy(): void } | null = null;
  private saved: IRenderMime.IRenderer | null = null;
  constructor(private readonly mimeType: string, private readonly reveal: Reveal, private readonly rendermime: IRenderMimeRegistry) {
    super();
    this.addClass("xla-lab-rendered");
  }
  /** An output whose capture this version cannot read (an older or damaged one) shows the HTML summary saved
   * beside it, with why; false when there is none. */
  private async renderSaved(model: IRenderMime.IMimeModel, why: string): Promise<boolean> {
    if (typeof model.data["text/html"] !== "string" || !this.rendermime.getFactory("text/html")) return false;
    const html = this.rendermime.createRenderer("text/html");
    await html.renderModel(model);
    const note = document.createElement("div");
    note.className = "xla-lab-saved-note";
    note.textContent = `xla_lab shows this output's saved summary: its capture cannot be read here (${why.slice(0, 300)})`;
    this.view?.destroy();
    this.view = null;
    this.saved?.dispose();
    this.saved = html;
    this.node.replaceChildren(note, html.node);
    return true;
  }
  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const t0 = performance.now();
    let raw: unknown = model.data[this.mimeType];
    let unpackError: string | null = null;
    try {
      raw = await unpackCapture(raw); // saved outputs are packed (xla_lab/view/saved_output.py)
    } catch (e) {
      unpackError = (e as Error).message || String(e);
    }
    let checked: PanelModel | undefined;
    if (unpackError === null) {
      try {
        checked = parsePanelModel(raw);
      } catch (e) {
        if (await this.renderSaved(model, (e as Error).message)) return;
      }
    }
    const { PanelView } = await loadViews();
    this.view?.destroy();
    const capture = ((typeof raw === "object" && raw && (raw as { capture?: object }).capture) || {}) as { cell_id?: unknown; execution_count?: unknown };
    const view = new PanelView({ getViz: labViz, t0, onSource: (ref) => this.reveal(capture, ref) });
    this.view = view;
    this.saved?.dispose();
    this.saved = null;
    this.node.replaceChildren(view.el);
    if (unpackError !== null) view.showError(unpackError);
    else view.setModel(raw, t0, checked);
  }
  dispose() {
    this.view?.destroy();
    this.saved?.dispose();
    super.dispose();
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: "xla-lab:plugin",
  description: "XLA Lab: the capture renderer and the side panel of captured graphs, HLO and recompiles",
  autoStart: true,
  requires: [INotebookTracker, IRenderMimeRegistry],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, rendermime: IRenderMimeRegistry) => {
    const reveal: Reveal = (capture, ref) => {
      const id = typeof capture.cell_id === "string" ? capture.cell_id : "";
      const panel = tracker.find((p) => p.content.widgets.some((c) => c.model.id === id)) ?? tracker.currentWidget;
      if (panel) void revealSource(panel, { cellModelId: null, captureCellId: id, executionCount: typeof capture.execution_count === "number" ? capture.execution_count : null }, ref);
    };
    // below the widget view (rank 0): a live anywidget panel wins; above text/html (50)
    rendermime.addFactory({ safe: true, mimeTypes: [CAPTURE_MIME], defaultRank: 40, createRenderer: (o) => new CaptureRenderer(o.mimeType, reveal, rendermime) }, 40);
    tracker.widgetAdded.connect((_, panel) => preferCaptureForSavedWidgets(panel));
    // the live cell panel (an anywidget, which knows nothing of JupyterLab) asks for its line links with
    // an event (widget.ts); the flag tells it someone answers
    document.addEventListener(SOURCE_EVENT, (ev) => {
      const d = (ev as CustomEvent).detail as { capture?: Parameters<Reveal>[0]; ref?: SourceRef } | null;
      if (d?.capture && d.ref) reveal(d.capture, d.ref);
    });
    document.body.dataset.xlaLabReveal = "1";

    const sidebar = new XlaSidebar({
      tracker, getViz: labViz,
      showDetail: (w: Widget, panel: NotebookPanel | null) => {
        // a tab of its own beside the notebook: a split would squeeze the notebook's panels (drag the tab
        // to split when both are wanted)
        if (!w.isAttached) app.shell.add(w, "main", { mode: "tab-after", ref: panel?.id ?? null });
        app.shell.activateById(w.id);
      },
      activate: (w: Widget) => app.shell.activateById(w.id),
    });
    sidebar.title.icon = ICON;
    app.shell.add(sidebar, "right", { rank: 600 });
    app.commands.addCommand("xla-lab:open-panel", {
      label: "Show the XLA Lab panel", caption: "captured graphs, HLO and recompiles of the active notebook",
      execute: () => app.shell.activateById(sidebar.id),
    });
  },
};

export default [plugin];
