"""Recompile reasons on real graphs compiled by %%xla (the same explanations on hand-made inputs are in
tests/unit/test_recompile_reasons.py): optimizer state that appears after the first step, a changed
input shape or dtype, a baked scalar, another op sequence, another set of outputs, a step cut by a
value read, and a new cell that reuses a graph name."""

import re

import xla_lab


def test_optimizer_state_recompile_is_explained(mlp_capture):
    first, second = mlp_capture.steps[0], mlp_capture.steps[1]
    assert first.recompile_reason.startswith("first compile of this cell")
    assert "inputs instead of" in second.recompile_reason
    assert "aopt.step()" in second.recompile_reason
    assert mlp_capture.steps[2].recompile_reason is None  # a hit needs no reason


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
    assert "]:2 (sc_y = sc_x.pow(p).sum())" in reason


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
    assert "]:5 (os_y = torch.tanh(os_x) * 3)" in reason


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
    assert re.search(r"cut mid-way at \[\d+\]:2 \(\.item\(\) reads the value\)", c.steps[0].recompile_reason)


def test_a_new_cell_reusing_a_graph_name_is_compared_with_that_graph(ip, fresh_dim):
    """In JupyterLab two cells are two cells: `%%xla -n predict` in a second cell continues the first's
    graph, so its recompile is explained against it."""
    import xla_lab

    ip.run_cell(f"import torch, torch_xla\nnamed_w = torch.randn({fresh_dim}, 4).to(torch_xla.device())\n"
                f"named_x = torch.randn(16, {fresh_dim}).to(torch_xla.device())")
    assert ip.run_cell("%%xla -q -n named_predict\nnamed_y = (named_x @ named_w).argmax(-1)").success
    ip.run_cell(f"named_x = torch.randn(12, {fresh_dim}).to(torch_xla.device())")
    # a different cell (another source, so another cell id outside Jupyter) with the same name
    assert ip.run_cell("%%xla -q -n named_predict\nnamed_y = (named_x @ named_w).argmax(-1)  # short batch").success
    reason = xla_lab.last().steps[0].recompile_reason
    assert "first compile" not in reason and "16" in reason and "12" in reason, reason
