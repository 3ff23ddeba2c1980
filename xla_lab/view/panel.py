"""``XlaPanel``: the per-cell panel under a ``%%xla`` cell (an anywidget).

Python builds the data (``panel_model``); the browser code (``static/panel.js``, built from
``extension/src`` by npm) draws the tabs. Synced traitlets ``model``, ``progress`` and ``has_capture``,
and custom messages: the browser asks ``{"kind": "need-viz"}`` and gets ``{"kind": "viz"}`` with the
bytes of ``static/viz-standalone.mjs`` (Graphviz in WebAssembly) as a buffer, so the WASM never sits in
widget state. The output bundle also carries the panel model under its own MIME type, a
deterministic ``text/plain`` and a static ``text/html``, so exports, nbval and notebooks reopened
without a kernel still show the capture.

Memory: a panel model is megabytes for a real model, and ipywidgets keeps every widget of the
kernel alive until it is closed, which nothing does for the output of a cell run long ago. So the
kernel keeps a panel's model only until it is displayed: the model travels in the comm's opening
message (``get_state``) and in the output bundle, and then the kernel lets it go. A front end that
asks for the state again (a page reloaded beside a running kernel) gets an empty model and asks
``{"kind": "need-model"}``; the reply ``{"kind": "model"}`` carries the model rebuilt from the capture
(JSON bytes as a buffer), or an error once the capture has left the history (``XLA_LAB_MAX_HISTORY``,
``%xla clear``): the panel holds its capture weakly. The browser code is given to anywidget as text,
not as a file: for a file anywidget connects a per-widget callback that keeps every panel alive
forever. What is left of a displayed panel in the kernel (its widget and comm, about 10 KB) is kept for
the last ``XLA_LAB_MAX_PANELS`` panels (default 1000; 0 = no cap): older panels' widgets are closed,
and their outputs then disappear from the live page (a reopened notebook draws them from the saved
capture).

When the front end is not built (``static/panel.js`` missing), ``FRONTEND_BUILT`` is False: the
magics then display ``StaticPanel`` (the same bundle without the widget view) and ``XlaPanel`` itself
renders a short note saying how to build it.
"""

from __future__ import annotations

import json
import weakref
from collections import deque
from pathlib import Path

import anywidget
import traitlets

from xla_lab.capture.records import CellCapture

from . import static_html
from .panel_model import MIME, SCHEMA, WIDGET_MIME, of_report, summary
from .report import MAX_ROWS, Report
from .saved_output import SUMMARY_MIME, packed_payload

STATIC = Path(__file__).parent / "static"
PANEL_JS = STATIC / "panel.js"
PANEL_CSS = STATIC / "panel.css"
VIZ_MODULE = STATIC / "viz-standalone.mjs"
BUILD_HINT = ("the interactive xla_lab panel is not built (xla_lab/view/static/panel.js is missing): run "
              "`make env` (or `npm ci && npm run build` in extension/); the static summary is shown instead")

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


def _bundle(report: Report | None, model: dict | None = None, save: str = "full") -> dict:
    """What the notebook keeps (``saved_output.py``), all lowered from one report: the packed panel
    model beside text and HTML, or with ``save="summary"`` the text and an HTML summary without HLO
    excerpts."""
    if report is None:
        return {"text/plain": "xla_lab panel (no capture yet)",
                "text/html": "<div>xla_lab panel (no capture yet)</div>"}
    bundle = {"text/plain": report.text()}
    if save == "summary":  # (the marker lets the extension draw the HTML for a reopened widget output)
        bundle[SUMMARY_MIME] = {"saved": "summary"}
        bundle["text/html"] = static_html.of_report(report, graphs="none")
    else:
        bundle[MIME] = packed_payload(model or of_report(report))
        bundle["text/html"] = static_html.of_report(report)
    return bundle


QUIET_MIME = "application/vnd.xla-lab.quiet-capture+json"


def quiet_message(capture: CellCapture, prompts=None) -> dict:
    """What a ``%%xla -q`` cell sends JupyterLab's side panel, under a MIME type of its own: its steps and
    summary (a few KB, marked ``partial``), as an update of a display id no output has, so the notebook
    shows and saves nothing (front ends apply updates to existing displays only) while the side panel,
    which reads every message of the kernel, lists the run. Graphs and HLO (0.6 s to build and pack for
    a 12-layer model) are sent only when a step of it is opened (``full_message``)."""
    return {QUIET_MIME: {"schema": SCHEMA, "partial": True, "capture": capture.to_dict(artifacts=False),
                         "summary": summary(Report(capture, prompts=prompts)), "main_graph": None, "graphs": {},
                         "source_lines": [], "model_files": [], "runs": [], "profile": None, "compile": []}}


def full_message(capture: CellCapture, prompts=None) -> dict:
    """A quiet run's whole model, packed, for the side panel that asked for it (xla_lab/frontend.py send_full_capture)."""
    return {QUIET_MIME: packed_payload(of_report(Report(capture, prompts=prompts)))}


class XlaPanel(anywidget.AnyWidget):
    """The panel of one capture (``XlaPanel(capture, runs)``), or, with no capture, an empty panel
    that shows compile progress (``progress``) while a cell runs."""

    # anywidget's own traits, declared here so that it need not add them to each instance (see add_traits)
    _esm = traitlets.Unicode(PANEL_JS.read_text(encoding="utf-8") if FRONTEND_BUILT else _FALLBACK_ESM).tag(sync=True)
    _css = traitlets.Unicode(PANEL_CSS.read_text(encoding="utf-8") if PANEL_CSS.is_file() else "").tag(sync=True)
    _anywidget_id = traitlets.Unicode(f"{__module__}.XlaPanel").tag(sync=True)

    model = traitlets.Dict().tag(sync=True)  # kept by the kernel only until displayed (see above; sent as JSON text)
    progress = traitlets.Dict().tag(sync=True)
    has_capture = traitlets.Bool(False).tag(sync=True)

    def __init__(self, capture: CellCapture | None = None, runs=(), *, max_rows: int | None = MAX_ROWS,
                 save: str = "full", prompts=None, live: LivePanels | None = None, **kwargs):
        """``live``: the session's displayed panels, which keep this one's widget once it is displayed."""
        self._capture = None if capture is None else weakref.ref(capture)
        self._live = live
        self._runs = [weakref.ref(r) for r in runs]
        self._max_rows = max_rows
        self._save = save  # what the saved output keeps: "full" | "summary" (saved_output.py)
        self._prompts = prompts
        # the report and model sent when the comm opens and shown in the output bundle, then let go
        self._report = None if capture is None else Report(capture, runs, prompts, max_rows)
        self._unsent = kwargs.pop("model", None) or (of_report(self._report) if capture is not None else None)
        kwargs.setdefault("progress", {"state": "done" if capture is not None else "idle", "what": "",
                                       "elapsed_s": 0.0, "expected_s": None, "step": None})
        super().__init__(has_capture=capture is not None, **kwargs)
        self.on_msg(self._on_custom_msg)

    def add_traits(self, **traits) -> None:
        """anywidget adds ``_esm``, ``_css`` and ``_anywidget_id`` to every instance, and traitlets does
        that by making a new class per instance (about 15 KB a panel, for as long as the output's
        widget lives): this class declares them, so only traits it lacks are added."""
        missing = {name: trait for name, trait in traits.items() if not self.has_trait(name)}
        if missing:
            super().add_traits(**missing)

    def get_state(self, key=None, drop_defaults=False):
        """The comm opens with the model as JSON text: given as a dict, ipywidgets walks it value by value
        for binary buffers (0.4 s for a 12-layer model's panel, a third of what displaying it cost)."""
        state = super().get_state(key, drop_defaults)
        if self._unsent is not None and "model" in state:
            state["model"] = json.dumps(self._unsent)
        return state

    def _ipython_display_(self) -> None:
        """Display, then hand the browser Graphviz right away: a page's first panel would otherwise
        ask for it and wait until the kernel is idle (after a whole "Run all"). Once per kernel; a
        reloaded page asks again with ``need-viz``."""
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        self._unsent = self._report = None  # the browser and the output have them now
        if self._capture is not None and self._live is not None:
            self._live.shown(self)
        global _VIZ_PUSHED
        if not _VIZ_PUSHED and self._capture is not None and self.comm is not None:
            _VIZ_PUSHED = True
            self.send(*viz_message())

    @property
    def capture(self) -> CellCapture | None:
        """The capture shown, while the history keeps it."""
        return None if self._capture is None else self._capture()

    def report(self) -> Report | None:
        """The report shown (rebuilt from the capture once let go); None once the capture is gone."""
        if self._report is not None:
            return self._report
        capture = self.capture
        if capture is None:
            return None
        return Report(capture, [r for r in (ref() for ref in self._runs) if r is not None], self._prompts,
                      self._max_rows)

    def panel_model(self) -> dict | None:
        """The model shown (rebuilt from the capture once let go); None once the capture is gone."""
        if self._unsent is not None:
            return self._unsent
        report = self.report()
        return None if report is None else of_report(report)

    def _on_custom_msg(self, widget, content, buffers) -> None:
        kind = content.get("kind") if isinstance(content, dict) else None
        if kind == "need-viz":
            self.send(*viz_message())
        elif kind == "need-model":
            self.send(*self.model_message())

    def model_message(self) -> tuple[dict, list[bytes]]:
        """The reply to ``need-model``: the model as JSON bytes, or why it cannot be had."""
        if self._capture is None:
            return {"kind": "model", "error": "this panel shows compile progress only"}, []
        model = self.panel_model()
        if model is None:
            return {"kind": "model", "error": "xla_lab no longer keeps this capture (XLA_LAB_MAX_HISTORY, or "
                                              "%xla clear): the notebook's saved output still shows it"}, []
        return {"kind": "model"}, [json.dumps(model).encode()]

    def _repr_mimebundle_(self, **kwargs):
        capture = self.capture
        if self._capture is not None and capture is None:
            text = "xla_lab panel (capture no longer kept by the kernel)"
            return {"text/plain": text, "text/html": f"<div>{text}</div>"}
        data = _bundle(self.report(), self._unsent, self._save)  # (one report: the model is lowered from it)
        if self.comm is not None:  # closed widgets have no view
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 1, "model_id": self.model_id}
        return data

    def __repr__(self) -> str:
        capture = self.capture
        if self._capture is None:
            return "XlaPanel(no capture)"
        if capture is None:
            return "XlaPanel(capture no longer kept by the kernel)"
        return self.report().text()


class LivePanels:
    """The displayed panels whose widgets the kernel keeps, newest last: past ``cap`` the oldest is
    closed (``XLA_LAB_MAX_PANELS``). The session's (``Session.panels``)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.panels: deque[XlaPanel] = deque()
        self.closed = 0

    def shown(self, panel: XlaPanel) -> None:
        while self.panels and self.panels[0].comm is None:  # closed elsewhere
            self.panels.popleft()
        self.panels.append(panel)
        while self.cap and len(self.panels) > self.cap:
            self.panels.popleft().close()
            self.closed += 1

    def close_all(self) -> int:
        """Close every kept widget (``%xla clear``): their outputs leave the live page, as a capped
        panel's do (a reopened notebook draws them from the saved capture). Returns how many."""
        n = len(self)
        while self.panels:
            self.panels.popleft().close()
        self.closed += n
        return n

    def __len__(self) -> int:
        return sum(1 for p in self.panels if p.comm is not None)


def viz_message() -> tuple[dict, list[bytes]]:
    """The reply to ``need-viz``: the Graphviz module's bytes, or an error the browser can show."""
    try:
        return {"kind": "viz"}, [VIZ_MODULE.read_bytes()]
    except OSError:
        return {"kind": "viz", "error": f"{VIZ_MODULE.name} is missing: {BUILD_HINT}"}, []


class StaticPanel:
    """The panel's output bundle without the widget (front end not built, or asked for)."""

    def __init__(self, capture: CellCapture, runs=(), max_rows: int | None = MAX_ROWS, save: str = "full",
                 prompts=None):
        self.report = Report(capture, runs, prompts, max_rows)
        self.save = save

    def _repr_mimebundle_(self, include=None, exclude=None):
        return _bundle(self.report, save=self.save)

    def __repr__(self) -> str:
        return self.report.text()


def panel_for(capture: CellCapture, runs=(), max_rows: int | None = MAX_ROWS, save: str = "full", prompts=None,
              live: LivePanels | None = None):
    """What ``%%xla`` displays in a notebook: the widget when its front end is built (kept live by
    ``live``), else the static bundle (same text/plain, text/html and capture payload)."""
    if FRONTEND_BUILT:
        return XlaPanel(capture, runs, max_rows=max_rows, save=save, prompts=prompts, live=live)
    return StaticPanel(capture, runs, max_rows, save, prompts)
