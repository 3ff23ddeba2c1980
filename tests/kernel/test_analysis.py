"""Fusion map, recompile explanations and memory, on real graphs compiled by %%xla."""

import pytest

import xla_lab
from xla_lab.view.summary import to_html, to_text


@pytest.fixture(scope="module")
def mlp_capture(ip):
    assert ip.run_cell("""
import torch, torch_xla
dev = torch_xla.device()
class AMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 48)
        self.fc2 = torch.nn.Linear(48, 5)
    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return self.fc2(h)
amlp = AMLP().to(dev)
aopt = torch.optim.Adam(amlp.parameters())
ax = torch.randn(8, 16).to(dev)
""", store_history=True).success
    result = ip.run_cell("""%%xla -q --name amlp_train
for i in range(3):
    aopt.zero_grad()
    loss = amlp(ax).pow(2).mean()
    loss.backward()
    aopt.step()
    torch_xla.sync()
""", store_history=True)
    assert result.success
    return xla_lab.last()


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


def test_optimizer_state_recompile_is_explained(mlp_capture):
    first, second = mlp_capture.steps[0], mlp_capture.steps[1]
    assert first.recompile_reason.startswith("first compile of this cell")
    assert "inputs instead of" in second.recompile_reason
    assert "aopt.step()" in second.recompile_reason
    assert mlp_capture.steps[2].recompile_reason is None  # a hit needs no reason


def test_summary_shows_kernels_reasons_and_memory(mlp_capture):
    text = to_text(mlp_capture)
    assert "kernels of step 2's graph" in text and "step 1 compiled: the graph takes" in text
    assert "memory of step 2's graph: peak" in text
    assert "<table>" in to_html(mlp_capture)


def test_input_shape_change_names_the_input(ip):
    ip.run_cell("import torch, torch_xla\nshape_w = torch.randn(12, 6).to(torch_xla.device())", store_history=True)
    body = "%%xla -q\nshape_out = (shape_x @ shape_w).relu()"
    ip.run_cell("shape_x = torch.randn(3, 12).to(torch_xla.device())", store_history=True)
    assert ip.run_cell(body, store_history=True, cell_id="shape-cell").success
    ip.run_cell("shape_x = torch.randn(5, 12).to(torch_xla.device())", store_history=True)
    assert ip.run_cell(body, store_history=True, cell_id="shape-cell").success
    reason = xla_lab.last().steps[0].recompile_reason
    assert "changed shape: f32[3,12] -> f32[5,12]" in reason


def test_dtype_change_is_named(ip):
    body = "%%xla -q\ndt_out = (dt_x * 2).sum()"
    ip.run_cell("import torch, torch_xla\ndt_x = torch.randn(7, 3).to(torch_xla.device())", store_history=True)
    assert ip.run_cell(body, store_history=True, cell_id="dtype-cell").success
    ip.run_cell("dt_x = torch.randn(7, 3).to(torch.bfloat16).to(torch_xla.device())", store_history=True)
    assert ip.run_cell(body, store_history=True, cell_id="dtype-cell").success
    assert "changed dtype: f32[7,3] -> bf16[7,3]" in xla_lab.last().steps[0].recompile_reason


def test_baked_scalar_change_names_value_and_line(ip):
    ip.run_cell("import torch, torch_xla\nsc_x = torch.randn(9, 2).to(torch_xla.device())", store_history=True)
    assert ip.run_cell("""%%xla -q
for p in (2.0, 3.0):
    sc_y = sc_x.pow(p).sum()
    torch_xla.sync()
""", store_history=True).success
    reason = xla_lab.last().steps[1].recompile_reason
    assert "scalar baked into the graph changed: 2 -> 3" in reason
    assert "line 2 (sc_y = sc_x.pow(p).sum())" in reason


def test_op_sequence_change_names_the_first_different_op(ip):
    ip.run_cell("import torch, torch_xla\nos_x = torch.randn(6, 5).to(torch_xla.device())", store_history=True)
    assert ip.run_cell("""%%xla -q
for i in range(2):
    if i == 0:
        os_y = torch.relu(os_x) * 3
    else:
        os_y = torch.tanh(os_x) * 3
    torch_xla.sync()
""", store_history=True).success
    reason = xla_lab.last().steps[1].recompile_reason
    assert "traced ops changed" in reason and "aten::tanh" in reason and "aten::relu" in reason
    assert "line 5 (os_y = torch.tanh(os_x) * 3)" in reason


def test_output_set_change_is_named(ip):
    ip.run_cell("import torch, torch_xla\noc_x = torch.randn(4, 4).to(torch_xla.device())", store_history=True)
    assert ip.run_cell("""%%xla -q
kept = []
for i in range(2):
    oc_y = oc_x.exp()
    if i == 1:
        kept.append(oc_x.exp() + 1)
    torch_xla.sync()
""", store_history=True).success
    reason = xla_lab.last().steps[1].recompile_reason
    assert "the set of outputs changed: 2 outputs instead of 1" in reason


def test_mid_step_item_split_is_named(ip):
    ip.run_cell("import torch, torch_xla\nit_x = torch.randn(4, 8).to(torch_xla.device())\nit_w = torch.randn(8, 8).to(torch_xla.device())",
                store_history=True)
    assert ip.run_cell("""%%xla -q
h = it_x @ it_w
scale = h.abs().max().item()
out = (h / scale).sum()
""", store_history=True).success
    c = xla_lab.last()
    assert c.steps[0].sync_cause == "implicit: .item() reads the value"
    assert "cut mid-way at line 2 (.item() reads the value)" in c.steps[0].recompile_reason


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
    assert lines[gelu_line].startswith(f"[{mlp_capture.execution_count - 1}] line 9:")
    assert "gelu" in "\n".join(lines[gelu_line + 1:gelu_line + 8])
    assert any(l.strip().endswith("aopt.step()") for l in lines)
