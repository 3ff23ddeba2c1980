"""``XlaPanel``: the per-cell panel under a ``%%xla`` cell (an anywidget).

Python builds the data (``panel_model``); the browser code (``static/panel.js``, built from
``extension/src`` by npm) draws the tabs. Two synced traitlets, ``model`` and ``progress``, and one
custom message: the browser asks ``{"kind": "need-viz"}`` and gets ``{"kind": "viz"}`` with the bytes
of ``static/viz-standalone.mjs`` (Graphviz in WebAssembly) as a buffer, so the WASM never sits in
widget state. The output bundle also carries the panel model under its own MIME type, a
deterministic ``text/plain`` and a static ``text/html``, so exports, nbval and notebooks reopened
without a kernel still show the capture.

When the front end is not built (``static/panel.js`` missing), ``FRONTEND_BUILT`` is False: the
magics then display ``StaticPanel`` (the same bundle without the widget view) and ``XlaPanel`` itself
renders a short note saying how to build it.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from xla_lab.capture.records import CellCapture

from .panel_model import MIME, panel_model, saved_payload
from .static_html import capture_html
from .summary import MAX_ROWS, to_text

STATIC = Path(__file__).parent / "static"
PANEL_JS = STATIC / "panel.js"
PANEL_CSS = STATIC / "panel.css"
VIZ_MODULE = STATIC / "viz-standalone.mjs"
BUILD_HINT = ("the interactive xla_lab panel is not built (xla_lab/view/static/panel.js is missing): run "
              "`make env` (or `npm ci && npm run build` in extension/); the static summary is shown instead")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

FRONTEND_BUILT = PANEL_JS.is_file()
_VIZ_PUSHED = False  # Graphviz already sent to the browser by this kernel

_FALLBACK_ESM = """
function render({ model, el }) {
  const note = document.createElement("div");
  note.textContent = %s;
  note.style.cssText = "font-family: var(--jp-code-font-family, monospace); font-size: 12px; " +
    "color: var(--jp-warn-color0, #b7791f);";
  el.appendChild(note);
}
export default { render };
""" % repr(BUILD_HINT)


def _bundle(capture: CellCapture | None, runs, max_rows: int | None, model: dict | None = None) -> dict:
    if capture is None:
        return {"text/plain": "xla_lab panel (no capture yet)",
                "text/html": "<div>xla_lab panel (no capture yet)</div>"}
    return {MIME: saved_payload(model or panel_model(capture, runs)), "text/plain": to_text(capture, max_rows),
            "text/html": capture_html(capture, max_rows=max_rows)}


class XlaPanel(anywidget.AnyWidget):
    """The panel of one capture (``XlaPanel(capture, runs)``), or, with no capture, an empty panel
    that shows compile progress (``progress``) while a cell runs."""

    _esm = PANEL_JS if FRONTEND_BUILT else _FALLBACK_ESM
    if PANEL_CSS.is_file():
        _css = PANEL_CSS

    model = traitlets.Dict().tag(sync=True)
    progress = traitlets.Dict().tag(sync=True)

    def __init__(self, capture: CellCapture | None = None, runs=(), *, max_rows: int | None = MAX_ROWS, **kwargs):
        self._capture = capture
        self._runs = list(runs)
        self._max_rows = max_rows
        if capture is not None and "model" not in kwargs:
            kwargs["model"] = panel_model(capture, self._runs)
        kwargs.setdefault("progress", {"state": "done" if capture is not None else "idle", "what": "",
                                       "elapsed_s": 0.0, "expected_s": None, "step": None})
        super().__init__(**kwargs)
        self.on_msg(self._on_custom_msg)

    def _ipython_display_(self) -> None:
        """Display, then hand the browser Graphviz right away: a page's first panel would otherwise
        ask for it and wait until the kernel is idle (after a whole "Run all"). Once per kernel; a
        reloaded page asks again with ``need-viz``."""
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        global _VIZ_PUSHED
        if not _VIZ_PUSHED and self._capture is not None and self.comm is not None:
            _VIZ_PUSHED = True
            self.send(*viz_message())

    @property
    def capture(self) -> CellCapture | None:
        return self._capture

    def _on_custom_msg(self, widget, content, buffers) -> None:
        if isinstance(content, dict) and content.get("kind") == "need-viz":
            self.send(*viz_message())

    def _repr_mimebundle_(self, **kwargs):
        data = _bundle(self._capture, self._runs, self._max_rows, self.model)
        if self.comm is not None:  # closed widgets have no view
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 1, "model_id": self.model_id}
        return data

    def __repr__(self) -> str:
        if self._capture is None:
            return "XlaPanel(no capture)"
        return to_text(self._capture, self._max_rows)


def viz_message() -> tuple[dict, list[bytes]]:
    """The reply to ``need-viz``: the Graphviz module's bytes, or an error the browser can show."""
    try:
        return {"kind": "viz"}, [VIZ_MODULE.read_bytes()]
    except OSError:
        return {"kind": "viz", "error": f"{VIZ_MODULE.name} is missing: {BUILD_HINT}"}, []


class StaticPanel:
    """The panel's output bundle without the widget (front end not built, or asked for)."""

    def __init__(self, capture: CellCapture, runs=(), max_rows: int | None = MAX_ROWS):
        self.capture = capture
        self.runs = list(runs)
        self.max_rows = max_rows

    def _repr_mimebundle_(self, include=None, exclude=None):
        return _bundle(self.capture, self.runs, self.max_rows)

    def __repr__(self) -> str:
        return to_text(self.capture, self.max_rows)


def panel_for(capture: CellCapture, runs=(), max_rows: int | None = MAX_ROWS):
    """What ``%%xla`` displays in a notebook: the widget when its front end is built, else the static
    bundle (same text/plain, text/html and capture payload)."""
    if FRONTEND_BUILT:
        return XlaPanel(capture, runs, max_rows=max_rows)
    return StaticPanel(capture, runs, max_rows)
