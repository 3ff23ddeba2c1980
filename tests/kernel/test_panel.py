"""The per-cell panel (issue 4), Python side: its model built from real captures, the widget's output
bundle, static HTML and the session report (escaping, no scripts), the Graphviz message, and live
compile progress."""

import json
import re
import time

import pytest
from IPython.utils.capture import capture_output
from IPython.core.error import UsageError

import xla_lab
from xla_lab import session as xla_session
from xla_lab.capture.records import CellCapture
from xla_lab.view import panel as panel_mod
from xla_lab.view import progress as progress_mod
from xla_lab.view.panel import XlaPanel, viz_message
from xla_lab.view.panel_model import MIME, SCHEMA, panel_model
from xla_lab.view.saved_output import PackedPayloadError, saved_payload, unpacked_payload
from xla_lab.view.static_html import capture_html, report_html

XSS = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def mlp_runs(ip):
    """Two runs of one train-loop cell: a first run (two compiles: optimizer state appears on step 0)
    and a second run of the same cell (cache hits). Its set-up cell also defines ``torch``, ``pdev`` and
    ``px`` in the shell, which the cells of other tests here use: they request this fixture for them."""
    assert ip.run_cell("""
import torch, torch_xla
pdev = torch_xla.device()
class PanelMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 40)
        self.fc2 = torch.nn.Linear(40, 3)
    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return self.fc2(h)
pmlp = PanelMLP().to(pdev)
popt = torch.optim.Adam(pmlp.parameters())
px = torch.randn(6, 12).to(pdev)
""", store_history=True).success
    cell = """%%xla -q --name panel_mlp
for i in range(3):
    popt.zero_grad()
    loss = pmlp(px).pow(2).mean()
    loss.backward()
    popt.step()
    torch_xla.sync()
v = (loss * 2).item()  # a value read: an implicit sync
"""
    assert ip.run_cell(cell, store_history=True).success
    first = xla_lab.last()
    assert ip.run_cell(cell, store_history=True).success
    second = xla_lab.last()
    assert first.cell_id == second.cell_id
    return first, second


def test_model_graphs_nodes_edges_and_kernels(mlp_runs):
    first, _ = mlp_runs
    model = panel_model(first)
    assert model["schema"] == SCHEMA and model["capture"]["schema"] == "xla_lab.capture/1"
    json.dumps(model)  # JSON-able
    assert set(model["graphs"]) == set(first.artifacts())
    assert model["main_graph"] in model["graphs"]
    for h, g in model["graphs"].items():
        art = first.artifacts()[h]
        assert g["hash"] == h and g["name"] == "panel_mlp"
        assert len(g["nodes"]) == art.ir_nodes
        if len(g["nodes"]) < 10:
            continue  # the small graph of the value read after the loop
        ids = {n["id"] for n in g["nodes"]}
        assert g["edges"] and all(a in ids and b in ids for a, b in g["edges"])
        assert g["roots"] and set(g["roots"]) <= ids
        kernels = {k["name"] for k in art.fusions}
        assert all(n["kernel"] in kernels for n in g["nodes"] if n["kernel"])
        # node -> kernel through op metadata and data flow (XLA renumbers instructions)
        computing = [n for n in g["nodes"] if n["op"] != "xla::device_data"]
        share = sum(1 for n in computing if n["kernel"]) / len(computing)
        assert share >= 0.9 and g["kernel_share"] == pytest.approx(share, abs=1e-3)
        # a gelu node: its cell line (in the class's cell), its kernel holds a gelu
        gelu = next(n for n in g["nodes"] if n["op"] == "aten::gelu")
        assert gelu["code"] == "h = torch.nn.functional.gelu(self.fc1(x))" and isinstance(gelu["cell"], int)
        gelu_kernel = next(k for k in art.fusions if k["name"] == gelu["kernel"])
        assert "aten::gelu" in gelu_kernel["aten_ops"]
        # scopes: library frames between the cell line and the op (what big graphs collapse by)
        assert any(n["scope"] and "linear.py:forward" in n["scope"] for n in g["nodes"])
        assert any(n["scope"] and "adam.py" in n["scope"] for n in g["nodes"])


def test_a_cache_hit_run_names_its_own_cell_in_every_line(mlp_runs):
    """The second run hits the graphs the first run compiled: kernel lines, graph nodes and the text
    summary name the second run's prompt (the first one's may no longer exist in the notebook)."""
    PROMPTS = xla_session.get().prompts
    from xla_lab.view.report import Report

    def to_text(c):  # shown as the kernel shows it (with the notebook's prompts); recompile reasons are
        # sentences written when the step compiled, and name the prompts of then
        text = Report(c, prompts=PROMPTS).text()
        return "\n".join(line for line in text.splitlines() if " compiled: " not in line)

    first, second = mlp_runs
    assert first.execution_count != second.execution_count
    model = panel_model(second, [first], prompts=PROMPTS)
    cells = {ln["cell"] for art in model["capture"]["artifacts"].values() for k in art["fusions"] for ln in k["lines"]}
    assert second.execution_count in cells and first.execution_count not in cells, cells
    node_cells = {n["cell"] for g in model["graphs"].values() for n in g["nodes"] if n["cell"] is not None}
    assert node_cells and first.execution_count not in node_cells, node_cells
    assert f"[{second.execution_count}]:" in to_text(second) and f"[{first.execution_count}]:" not in to_text(second)
    # shown later, the first run names its cell as it is now too (the notebook has no [first] any more)
    assert f"[{first.execution_count}]:" not in to_text(first) and f"[{second.execution_count}]:" in to_text(first)


RUN_ALL_MODEL = """
import torch, torch_xla
rdev = torch_xla.device()
class RunAllMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 18)
    def forward(self, x):
        return torch.tanh(self.fc1(x)) * 3
rmlp = RunAllMLP().to(rdev)
rx = torch.randn(4, 10).to(rdev)
"""
RUN_ALL_TRAIN = """%%xla -q --name run_all
for i in range(2):
    out = rmlp(rx).sum()
    torch_xla.sync()
"""


def test_after_run_all_every_line_names_a_current_prompt(ip):
    """Run All twice without a restart (cells keep their notebook ids): the second train run hits the
    graphs the first compiled, whose lines were traced as the model cell's first prompt. Kernel lines,
    graph nodes and the text summary name the model cell's and the train cell's current prompts (the
    kernel's prompts, given to the report; without them, lines stay as recorded)."""
    PROMPTS = xla_session.get().prompts
    from xla_lab.view.report import Report

    prompts = []
    for _ in range(2):
        for cell_id, source in (("run-all-model", RUN_ALL_MODEL), ("run-all-train", RUN_ALL_TRAIN)):
            prompts.append(ip.execution_count)
            assert ip.run_cell(source, store_history=True, cell_id=cell_id).success
    old_model, old_train, model_now, train_now = prompts
    capture = xla_lab.last()
    assert capture.execution_count == train_now and capture.cache_hits == len(capture.steps)
    model = panel_model(capture, prompts=PROMPTS)
    cells = {ln["cell"] for art in model["capture"]["artifacts"].values() for k in art["fusions"] for ln in k["lines"]}
    nodes = {n["cell"] for g in model["graphs"].values() for n in g["nodes"] if n["cell"] is not None}
    assert model_now in nodes and train_now in nodes, nodes
    as_recorded = panel_model(capture)  # no prompts: the same capture renders the same, whatever ran since
    assert old_model in {n["cell"] for g in as_recorded["graphs"].values() for n in g["nodes"]}
    assert not (cells | nodes) & {old_model, old_train}, (cells, nodes, prompts)
    tanh = next(n for n in next(iter(model["graphs"].values()))["nodes"] if n["op"] == "aten::tanh")
    assert tanh["cell"] == model_now and tanh["code"] == "return torch.tanh(self.fc1(x)) * 3"
    assert f"[{old_model}]:" not in Report(capture, prompts=PROMPTS).text()
    # a cell whose text changed at that line keeps the prompt the line was recorded in (the code is not there now)

    edited = RUN_ALL_MODEL.replace("* 3", "* 4")
    stale = ip.execution_count
    assert ip.run_cell(edited, store_history=True, cell_id="run-all-model").success
    assert PROMPTS.current(model_now, tanh["line"], tanh["code"]) == model_now
    assert PROMPTS.current(model_now, tanh["line"] - 1, "def forward(self, x):") == stale


def test_model_source_lines_summary_and_runs(mlp_runs):
    first, second = mlp_runs
    model = panel_model(second, [first])
    lines = model["source_lines"]
    assert [ln["line"] for ln in lines] == list(range(1, len(second.source.splitlines()) + 1))
    by_code = {ln["code"].strip(): ln for ln in lines}
    assert by_code["popt.step()"]["kernels"] and by_code["loss = pmlp(px).pow(2).mean()"]["kernels"]
    assert not by_code["popt.zero_grad()"]["kernels"]
    main_kernels = {k["name"] for k in second.artifacts()[model["main_graph"]].fusions}
    assert all(set(ln["kernels"]) <= main_kernels for ln in lines)
    # runs: the earlier run, then this one
    assert [r["execution_count"] for r in model["runs"]] == [first.execution_count, second.execution_count]
    assert [s["cache"] for s in model["runs"][0]["steps"]][:3] == ["miss", "miss", "hit"]
    assert all(s["cache"] == "hit" for s in model["runs"][1]["steps"])
    assert all(set(s) == {"index", "cache", "trace_s", "compile_s", "execute_s", "transfer_s", "execution_wait_s"}
               for r in model["runs"] for s in r["steps"])
    # summary of the first run: a recompile reason and the mid-step sync warning
    summary = panel_model(first)["summary"]
    assert summary["steps"] == len(first.steps) and summary["compiles"] == first.compiles >= 2
    assert any("optimizer state" in r["reason"] for r in summary["recompiles"])
    assert any(re.match(r"mid-step sync at \[\d+\]:7 \(v = \(loss \* 2\)\.item\(\)", w) for w in summary["warnings"])
    assert summary["compile_s"] > 0 and summary["execute_s"] > 0
    # other cells' captures are not runs of this one
    assert len(panel_model(second, xla_lab.history())["runs"]) >= 2
    assert all(r["execution_count"] in {c.execution_count for c in xla_lab.history() if c.cell_id == second.cell_id}
               for r in panel_model(second, xla_lab.history())["runs"])


def test_huge_constant_and_fallback_warnings(mlp_runs, xla_cell):
    c = xla_cell("big = torch.ones(512, 512).to(pdev) + torch.arange(512 * 512, dtype=torch.float32, "
                 "device=pdev).view(512, 512)", "-q")
    warnings = panel_model(c)["summary"]["warnings"]
    assert any("1.0 MiB constant f32[262144]" in w and "]:1 (" in w for w in warnings), warnings
    c = xla_cell("nz = torch.nonzero(torch.ones(4).to(pdev))", "-q")
    assert any("CPU fallbacks" in w and "nonzero" in w for w in panel_model(c)["summary"]["warnings"])


def test_transformer_nodes_mostly_reach_a_kernel(ip):
    assert ip.run_cell("""
import torch, torch_xla
torch.manual_seed(0)
ptl = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
ptenc = torch.nn.TransformerEncoder(ptl, num_layers=2, enable_nested_tensor=False).to(torch_xla.device())
ptopt = torch.optim.SGD(ptenc.parameters(), lr=0.01)
ptx = torch.randn(4, 10, 32).to(torch_xla.device())
""", store_history=True).success
    assert ip.run_cell("""%%xla -q --name panel_transformer
ptopt.zero_grad()
ptenc(ptx).pow(2).mean().backward()
ptopt.step()
""", store_history=True).success
    model = panel_model(xla_lab.last())
    g = model["graphs"][model["main_graph"]]
    assert len(g["nodes"]) > 300
    assert g["kernel_share"] >= 0.85
    assert any(n["scope"] and "_sa_block" in n["scope"] for n in g["nodes"])
    # backward ops have no Python stack: scoped under the forward op they read from
    assert any(n["scope"] and n["scope"].startswith("autograd > ") and "layer_norm" in n["scope"] for n in g["nodes"])
    with_scope_or_line = sum(1 for n in g["nodes"] if n["scope"] or n["line"]) / len(g["nodes"])
    assert with_scope_or_line >= 0.85


def test_mimebundle_and_repr(mlp_runs):
    first, second = mlp_runs
    panel = XlaPanel(second, [first])
    bundle = panel._repr_mimebundle_()
    assert set(bundle) == {WIDGET, MIME, "text/plain", "text/html"}
    assert bundle[WIDGET]["model_id"] == panel.model_id
    live_model = json.loads(panel.get_state()["model"])  # (what the comm opened with: JSON text)
    packed = bundle[MIME]
    assert packed["packed"] == "gzip+base64" and packed["key"]["execution_count"] == second.execution_count
    assert len(json.dumps(packed)) * 5 < len(json.dumps(saved_payload(live_model)))
    saved = unpacked_payload(packed)
    assert saved["schema"] == SCHEMA and saved["graphs"] == live_model["graphs"]
    # the saved copy of the capture: raw texts dropped, HLO without per-instruction metadata
    for h, art in saved["capture"]["artifacts"].items():
        live = live_model["capture"]["artifacts"][h]
        assert not {"buffer_assignment", "memory_report", "signature"} & set(art)
        assert art["fusions"] == live["fusions"] and art["memory"] == live["memory"]
        assert "metadata={" in live["hlo_after"] and "metadata={" not in art["hlo_after"]
        assert art["hlo_after"].splitlines()[0] == live["hlo_after"].splitlines()[0]
    assert CellCapture.from_dict(saved["capture"]).steps[0].hlo_before  # still a readable capture
    assert unpacked_payload(json.loads(json.dumps(packed)))["runs"][-1]["execution_count"] == second.execution_count
    text = bundle["text/plain"]
    assert text.startswith("xla_lab cell[") and text == XlaPanel(second, [first])._repr_mimebundle_()["text/plain"]
    assert "0x" not in text and "0x" not in repr(panel) and repr(panel) == text
    assert "<script" not in bundle["text/html"] and "<table>" in bundle["text/html"]
    assert panel.progress["state"] == "done"
    panel.close()
    assert repr(panel) == text  # a closed widget displays as its text
    assert repr(XlaPanel()) == "XlaPanel(no capture)"


def test_packed_payload_reads_back_and_refuses_damage(mlp_runs):
    from xla_lab.view.saved_output import packed_payload

    first, second = mlp_runs
    model = panel_model(second, [first])
    packed = packed_payload(model)
    assert unpacked_payload(packed) == json.loads(json.dumps(saved_payload(model)))
    assert unpacked_payload(model) is model  # an output saved before packing reads as it is
    for bad, why in (({**packed, "packed": "zstd"}, "unknown packing"), ({**packed, "bytes": -1}, "its size"),
                     ({**packed, "bytes": packed["bytes"] + 1}, "inflates to"), ({**packed, "data": "%%"}, "damaged"),
                     ({**packed, "data": packed["data"][:100]}, "damaged")):
        with pytest.raises(PackedPayloadError, match=why):
            unpacked_payload(bad)


def test_summary_only_outputs_keep_text_and_html_without_graphs(ip, mlp_runs):
    """%xla save summary: for notebooks people share; the choice holds for later cells, a cell may override."""
    with capture_output() as out:
        ip.run_line_magic("xla", "save summary")
    assert "summary only" in out.stdout
    try:
        with capture_output() as out:
            ip.run_cell("%%xla --name quiet_save\nsaved_y = (px * 3).sum()")
        shown = [o.data for o in out.outputs if "text/plain" in o.data]
        assert len(shown) == 1 and MIME not in shown[0] and "<table>" in shown[0]["text/html"]
        assert shown[0]["application/vnd.xla-lab.summary+json"] == {"saved": "summary"}
        assert "HLO before optimization" not in shown[0]["text/html"]
        assert len(json.dumps(shown[0])) < 50_000
        with capture_output() as out:
            ip.run_cell("%%xla --save full\nsaved_y = (px * 3).sum()")
        assert MIME in [o.data for o in out.outputs if "text/plain" in o.data][0]
        with capture_output() as out:
            ip.run_line_magic("xla", "status")
        assert "summary (%xla save" in out.stdout
    finally:
        with capture_output():
            ip.run_line_magic("xla", "save full")
    with pytest.raises(UsageError, match="usage: %xla save"):
        ip.run_line_magic("xla", "save everything")


def test_notebook_display_is_the_panel(ip, mlp_runs):
    with capture_output() as out:
        ip.run_cell("%%xla --name shown_panel\npanel_y = (px * 2).sum()")
    shown = [o.data for o in out.outputs if "text/plain" in o.data]
    assert len(shown) == 1 and MIME in shown[0] and "text/html" in shown[0]
    assert unpacked_payload(shown[0][MIME])["capture"]["graph_name"] == "shown_panel"
    assert (WIDGET in shown[0]) == panel_mod.FRONTEND_BUILT


def test_user_text_is_escaped_in_static_html_and_report(ip, mlp_runs, tmp_path):
    with capture_output():
        result = ip.run_cell(f"%%xla -n '{XSS}'\nxss_t = px * 2  # {XSS}\nxss_v = xss_t.sum().item()  # {XSS}")
    assert result.success
    c = xla_lab.last()
    assert XSS in c.source
    page = capture_html(c)
    assert XSS not in page and "<img" not in page and ESCAPED in page
    # the panel's own bundle too
    bundle = panel_mod.panel_for(c)._repr_mimebundle_()
    assert "<img" not in bundle["text/html"] and ESCAPED in bundle["text/html"]
    assert XSS in bundle["text/plain"]  # plain text keeps it verbatim
    target = tmp_path / "report.html"
    with capture_output() as out:
        ip.run_line_magic("xla", f"report {target}")
    assert "wrote" in out.stdout
    report = target.read_text()
    assert report.startswith("<!DOCTYPE html>")
    assert "<script" not in report.lower() and "<img" not in report and ESCAPED in report
    assert not re.search(r"\son\w+=", report.replace(ESCAPED, ""))  # no event-handler attributes
    assert "http://" not in report and "https://" not in report  # nothing to fetch
    assert report.count("<section id=\"capture-") == len(xla_lab.history())
    assert "prefers-color-scheme: dark" in report and "var(--jp-" in report


def test_report_html_of_captures(mlp_runs):
    page = report_html(list(mlp_runs))
    assert page.count("HLO after optimization") == len({h for c in mlp_runs for h in c.artifacts()})
    assert "HLO shown in an earlier capture" in page  # the second run reuses the first run's graphs


def started_progress(monkeypatch) -> list:
    """Every ProgressDisplay started from now on (the magic keeps none once the cell ends)."""
    started, start = [], progress_mod.ProgressDisplay.start

    def record(self):
        started.append(self)
        return start(self)

    monkeypatch.setattr(progress_mod.ProgressDisplay, "start", record)
    return started


def test_progress_is_reported_while_a_cell_compiles(ip, mlp_runs, fresh_dim, monkeypatch):
    started = started_progress(monkeypatch)
    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.01)
    d = fresh_dim
    body = f"""pw = torch.randn({d}, {d} + 1).to(pdev)
for _ in range(12):
    pw = torch.nn.functional.gelu(pw @ pw.T @ pw) / {d}
pres = pw.sum()"""
    with capture_output() as out:
        assert ip.run_cell(f"%%xla --name progress_demo\n{body}").success
    c = xla_lab.last()
    watcher = started[-1]
    updates = watcher.updates
    compiling = [u for u in updates if u["state"] == "compiling"]
    assert compiling, updates
    miss = next(s for s in c.steps if s.cache == "miss")
    assert compiling[0]["what"].startswith(f"progress_demo ({miss.graph_hash[:12]})")
    assert compiling[0]["step"] == miss.index and compiling[-1]["elapsed_s"] >= 0
    assert set(compiling[0]) == {"state", "what", "elapsed_s", "expected_s", "step"}
    assert updates[-1]["state"] == "done"
    assert watcher._thread is not None and not watcher._thread.is_alive()
    # the progress output only ever carried a widget view, and it was emptied at the end
    progress_outputs = [o for o in out.outputs if set(o.data) <= {WIDGET}]
    assert progress_outputs and all(not o.data or set(o.data) == {WIDGET} for o in progress_outputs)
    assert unpacked_payload([o for o in out.outputs if "text/plain" in o.data][0].data[MIME])["capture"]["graph_name"] == "progress_demo"
    # a second run of the same cell knows how long it took before
    monkeypatch.setattr(progress_mod, "SHOW_AFTER_S", 0.0)
    expected = progress_mod.expected_compile_s(xla_lab.history(), c.cell_id,
                                               progress_mod.CompileInProgress("other", None, time.time(), 0), 0)
    assert expected == pytest.approx(miss.timings["compile_s"])


def test_progress_costs_nothing_and_stops_when_nothing_compiles(ip, monkeypatch):
    started = started_progress(monkeypatch)
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.01)
    with capture_output() as out:
        ip.run_cell("%%xla\nidle_v = 1 + 1")
    assert started[-1].updates == [] and not started[-1]._thread.is_alive()
    assert not [o for o in out.outputs if set(o.data) <= {WIDGET}]
    # a cell that raises stops its watcher too
    result = ip.run_cell("%%xla\nraise ValueError('boom')")
    assert isinstance(result.error_in_exec, ValueError)
    assert len(started) == 2 and not started[-1]._thread.is_alive()


def test_first_displayed_panel_pushes_graphviz_once(mlp_runs, monkeypatch):
    """The browser would otherwise wait for an idle kernel (after a whole Run all) to get Graphviz."""
    monkeypatch.setattr(panel_mod, "_VIZ_PUSHED", False)
    sent = []
    first, second = mlp_runs
    panels = [XlaPanel(second, [first]), XlaPanel(second, [first])]
    for p in panels:
        monkeypatch.setattr(p, "send", lambda content, buffers=None, sent=sent: sent.append((content, buffers)))
        with capture_output():
            p._ipython_display_()
    assert len(sent) == 1 and sent[0][0]["kind"] == "viz" and sent[0][1][0][:20] == viz_message()[1][0][:20]


def test_a_displayed_panel_lets_its_model_go_and_rebuilds_it_on_request(mlp_runs, monkeypatch):
    """Found: every displayed panel kept its whole model (megabytes) in the kernel for good."""
    first, second = mlp_runs
    panel = XlaPanel(second, [first])
    opened = json.loads(panel.get_state()["model"])  # what the comm opened with (JSON text)
    assert opened["schema"] == SCHEMA and opened["capture"]["execution_count"] == second.execution_count
    with capture_output() as out:
        panel._ipython_display_()
    assert MIME in out.outputs[0].data
    assert panel.get_state()["model"] == {} and panel.model == {}  # a page asking again gets nothing heavy
    sent = []
    monkeypatch.setattr(panel, "send", lambda content, buffers=None: sent.append((content, buffers)))
    panel._on_custom_msg(panel, {"kind": "need-model"}, [])
    (content, buffers), = sent
    assert content == {"kind": "model"} and json.loads(buffers[0]) == json.loads(json.dumps(opened))
    assert panel.get_state()["has_capture"] is True
    panel.close()


def test_a_panel_whose_capture_left_the_history_says_so(monkeypatch):
    import gc

    capture = CellCapture(cell_id="gone", execution_count=1, source="x = 1", started_at=0.0)
    panel = XlaPanel(capture)
    with capture_output():
        panel._ipython_display_()
    del capture
    gc.collect()
    content, buffers = panel.model_message()
    assert "no longer keeps this capture" in content["error"] and buffers == []
    assert repr(panel) == "XlaPanel(capture no longer kept by the kernel)"
    assert panel._repr_mimebundle_()["text/plain"] == "xla_lab panel (capture no longer kept by the kernel)"
    assert XlaPanel().model_message()[0]["error"] == "this panel shows compile progress only"
    panel.close()


def test_only_the_last_panels_keep_a_live_widget():
    live = panel_mod.LivePanels(cap=2)
    captures = [CellCapture(cell_id=f"c{i}", execution_count=i, source="x = 1", started_at=0.0) for i in range(3)]
    panels = [XlaPanel(c, live=live) for c in captures]
    with capture_output():
        for p in panels:
            p._ipython_display_()
    assert panels[0].comm is None and panels[1].comm is not None and panels[2].comm is not None
    assert len(live) == 2 and live.closed == 1
    for p in panels:
        p.close()


def test_every_capture_of_the_kernel_makes_a_panel_model_the_browser_accepts(ip, mlp_runs):
    """The panel model of every capture this kernel holds (alone: the MLP's runs and a profiled cell;
    in the suite: every earlier test's, with ranks, SPMD, profiles, compile profiles, failed cells) is
    valid by the panel types and by the checked-in schema the browser's types and validator come from."""
    from panel_checks import panel_schema_errors
    from pydantic import TypeAdapter

    from xla_lab.view.panel_format import PanelModel

    assert ip.run_cell("%%xla -q --profile\nprofiled_v = (pmlp(px) * 3).sum().item()").success
    types = TypeAdapter(PanelModel)
    history = list(xla_lab.history())
    for i, capture in enumerate(history):
        earlier = [c for c in history[:i] if c.cell_id == capture.cell_id]
        model = json.loads(json.dumps(panel_model(capture, earlier, prompts=xla_session.get().prompts)))
        types.validate_python(model)
        errors = panel_schema_errors(model)
        assert not errors, (capture.execution_count, capture.graph_name, errors[:5])
    assert any(c.profile for c in history)
