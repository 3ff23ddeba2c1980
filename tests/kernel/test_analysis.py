"""Fusion map, memory, the summary, the IR-to-HLO index and the annotated source, on real graphs
compiled by %%xla (``mlp_capture``: conftest.py; recompile explanations: test_recompile_reasons.py)."""

import pytest

import xla_lab
from xla_lab.view.report import to_html, to_text


def test_fusion_map_of_a_train_step(mlp_capture):
    step = mlp_capture.steps[-1]
    kernels = {k["name"]: k for k in step.fusions}
    fusions = [k for k in kernels.values() if k["kind"].startswith("k")]
    assert fusions, "XLA fused nothing?"
    assert all(k["members"] for k in fusions)
    gelu = [k for k in fusions if "aten::gelu" in k["aten_ops"]]
    assert gelu and any(ln["code"] == "h = torch.nn.functional.gelu(self.fc1(x))" for k in gelu for ln in k["lines"])
    # Every line is a line of a notebook cell, shown with its cell number and text, never a temp path.
    for k in kernels.values():
        for ln in k["lines"]:
            assert isinstance(ln["cell"], int) and ln["line"] > 0 and "ipykernel" not in str(ln)
    # The forward matmul of fc1 is a dot of its own: 2 * 8 * 48 * 16 flops.
    dots = [k for k in kernels.values() if k["kind"] == "dot" and "aten::addmm" in k["aten_ops"]
            and k["shape"] == "f32[8,48]"]
    assert dots and dots[0]["flops"] == 2 * 8 * 48 * 16
    assert dots[0]["bytes"] == (8 * 16 + 16 * 48 + 8 * 48) * 4
    # Optimizer kernels point at the cell line of the train loop that ran them.
    loop_cell = mlp_capture.execution_count
    assert any(ln["cell"] == loop_cell and ln["code"] == "aopt.step()" for k in kernels.values() for ln in k["lines"])
    # Backward kernels (no Python stack) are credited through the data flow, and flagged as such.
    assert any(k["lines_inferred"] for k in kernels.values())
    mapped = sum(1 for k in kernels.values() if k["lines"]) / len(kernels)
    assert mapped >= 0.95


def test_reverse_index_line_to_kernels(mlp_capture):
    from xla_lab.hlo.fusion_map import FusionMap, Kernel

    step = mlp_capture.steps[-1]
    fmap = FusionMap([Kernel(**k) for k in step.fusions])
    index = fmap.by_line()
    model_cell = mlp_capture.execution_count - 1
    # IPython drops the leading blank line of a plain cell: forward() is lines 9 and 10.
    assert (model_cell, 9) in index and (model_cell, 10) in index, sorted(index)
    assert fmap.mapped_share() == 1.0


def test_memory_of_a_train_step(mlp_capture):
    mem = mlp_capture.steps[-1].memory
    assert mem["peak_bytes"] > 0
    # fc1's weight (48 x 16 floats) is a parameter of the step; Adam's moments too.
    assert mem["parameter_bytes"] >= 3 * 48 * 16 * 4
    assert mem["largest"] and mem["largest"][0]["bytes"] == max(b["bytes"] for b in mem["largest"])
    params = [b for b in mem["largest"] if b["kind"] == "parameter"]
    assert any(b["bytes"] == 48 * 16 * 4 for b in params)
    assert any(b["source"] and b["source"].get("code") for b in mem["largest"])


def test_summary_shows_kernels_reasons_and_memory(mlp_capture):
    text = to_text(mlp_capture)
    assert "kernels of step 2's graph" in text and "step 1 compiled: the graph takes" in text
    assert "memory of step 2's graph: peak" in text
    assert "<table>" in to_html(mlp_capture)


@pytest.mark.slow
def test_transformer_train_step_maps_95_percent_of_kernels(ip):
    assert ip.run_cell("""
import torch, torch_xla
torch.manual_seed(0)
tdev = torch_xla.device()
tlayer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
tmodel = torch.nn.TransformerEncoder(tlayer, num_layers=4, enable_nested_tensor=False).to(tdev)
thead = torch.nn.Linear(32, 3).to(tdev)
topt = torch.optim.AdamW(list(tmodel.parameters()) + list(thead.parameters()), lr=1e-3)
ttok = torch.randn(2, 16, 32).to(tdev)
tlab = torch.tensor([0, 2]).to(tdev)
""", store_history=True).success
    assert ip.run_cell("""%%xla -q --name transformer
for _ in range(2):
    topt.zero_grad()
    tloss = torch.nn.functional.cross_entropy(thead(tmodel(ttok).mean(1)), tlab)
    tloss.backward()
    topt.step()
    torch_xla.sync()
""", store_history=True).success
    c = xla_lab.last()
    for step in c.steps:
        kernels = step.fusions
        assert len(kernels) > 50
        mapped = [k for k in kernels if k["lines"]]
        assert len(mapped) / len(kernels) >= 0.95, [k["name"] for k in kernels if not k["lines"]][:20]
        assert any("aten::softmax" in k["aten_ops"] or "aten::_softmax" in k["aten_ops"] for k in kernels)


def test_ir_node_to_hlo_index(mlp_capture):
    from xla_lab.hlo.parser import parse_module

    art = mlp_capture.steps[-1].artifacts
    index = art.ir_to_hlo()
    assert len(index) == art.ir_nodes
    before = parse_module(art.hlo_before)
    names = {i.name for i in before.entry.instructions}
    assert all(set(v) <= names for v in index.values())
    gelu_nodes = [n for n, line in enumerate(art.ir_text.splitlines()[1:-1]) if "aten::gelu(" in line]
    assert gelu_nodes and all(before.instruction(h).op_type == "aten__gelu" for h in index[gelu_nodes[0]])


def test_annotated_source(mlp_capture):
    text = xla_lab.annotate(mlp_capture)
    lines = text.splitlines()
    gelu_line = next(i for i, l in enumerate(lines) if l.endswith("h = torch.nn.functional.gelu(self.fc1(x))"))
    assert lines[gelu_line].startswith(f"[{mlp_capture.execution_count - 1}]:9:")
    assert "gelu" in "\n".join(lines[gelu_line + 1:gelu_line + 8])
    assert any(l.strip().endswith("aopt.step()") for l in lines)
