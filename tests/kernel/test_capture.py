"""Capture of real torch_xla graphs on the CPU client, driven through the %%xla magic."""

import re

import pytest
import torch_xla.debug.metrics as met

import xla_lab


def setup_mlp(ip, dim, name="mlp", optimizer=None, batch=4):
    code = f"""
import torch, torch_xla
import torch_xla.core.xla_model as xm
dev = torch_xla.device()
torch.manual_seed(0)
{name} = torch.nn.Sequential(torch.nn.Linear({dim}, {dim * 2}), torch.nn.GELU(), torch.nn.Linear({dim * 2}, 3)).to(dev)
x_{name} = torch.randn({batch}, {dim}).to(dev)
"""
    if optimizer:
        code += f"opt_{name} = torch.optim.{optimizer}({name}.parameters(), lr=1e-3)\n"
    result = ip.run_cell(code)
    assert result.success, result.error_in_exec


def test_mlp_forward_is_one_compiled_step(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim)
    c = xla_cell("y = mlp(x_mlp)")
    assert len(c.steps) == 1
    step = c.steps[0]
    assert step.cache == "miss"
    assert step.sync_cause == "end of cell"
    assert re.fullmatch(r"[0-9a-f]+", step.graph_hash)
    assert step.graph_name == c.graph_name == f"cell_{c.execution_count}"
    assert "aten::addmm" in step.ir_text and "aten::gelu" in step.ir_text
    assert step.ir_nodes == step.ir_text.count("\n  %")
    assert "digraph" in step.ir_dot and "aten::gelu" in step.ir_dot
    assert step.hlo_before.startswith(f"HloModule {c.graph_name}")
    assert "fusion" in step.hlo_after  # XLA fused the GELU chain
    assert step.timings["compile_s"] > 0 and step.timings["execute_s"] > 0
    # The user's tensor is materialized by the final sync.
    assert ip.run_cell("float(y.sum().cpu())").success


def test_train_step_compiles_twice_then_hits(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="net", optimizer="Adam")
    uncached = met.counter_value("UncachedCompile") or 0
    c = xla_cell("""
for i in range(5):
    opt_net.zero_grad()
    loss = net(x_net).sum()
    loss.backward()
    opt_net.step()
    torch_xla.sync()
""")
    assert [s.cache for s in c.steps] == ["miss", "miss", "hit", "hit", "hit"]
    assert (met.counter_value("UncachedCompile") or 0) - uncached == 2
    assert c.metrics["counters"]["UncachedCompile"] == 2
    # Step 0 creates Adam's state, so steps 0 and 1 are different graphs; 1.. are one graph.
    assert c.steps[0].graph_hash != c.steps[1].graph_hash
    assert len({s.graph_hash for s in c.steps[1:]}) == 1
    assert all(s.sync_cause == "torch_xla.sync()" and s.sync_line == 7 for s in c.steps)
    assert c.steps[2].sync_code == "torch_xla.sync()"
    # Cache hits point at the artifacts of the compile they reused: one object, not copies.
    assert all(s.artifacts is c.steps[1].artifacts for s in c.steps[1:])
    assert c.steps[4].hlo_after is not None and c.steps[4].timings["compile_s"] == 0.0


def test_loop_of_n_synced_steps(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="loopnet")
    n = 9
    c = xla_cell(f"""
h = torch.zeros(4, 3, device=dev)
for i in range({n}):
    h = loopnet(x_loopnet) + i * 0 + h * 0.5
    xm.mark_step()
""")
    # The first two graphs differ (h starts as device data, then is the previous step's output
    # of the same shape: same graph from then on).
    assert len(c.steps) == n
    assert [s.cache for s in c.steps].count("miss") <= 2
    assert all(s.cache == "hit" for s in c.steps[2:])
    assert all(s.sync_cause == "xm.mark_step()" and s.sync_line == 5 for s in c.steps)
    assert [s.index for s in c.steps] == list(range(n))


def test_item_mid_cell_is_its_own_step_with_cause_and_line(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="itemnet")
    c = xla_cell("""
out = itemnet(x_itemnet)
value = out.sum().item()
more = out * 2
print(more.mean())
""")
    causes = [(s.sync_cause, s.sync_line) for s in c.steps]
    assert causes[0] == ("implicit: .item() reads the value", 3)  # line 1 of the body is blank
    assert c.steps[0].sync_code == "value = out.sum().item()"
    assert causes[1][0].startswith("implicit: tensor printed") and causes[1][1] == 5
    assert causes[-1] == ("end of cell", None)  # `out`, `more` were still pending
    assert isinstance(ip.user_ns["value"], float)


def test_timings_agree_with_torch_xla_metrics(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="timed", optimizer="SGD")

    def snapshot():
        return {n: (met.metric_data(n) or (0, 0.0, []))[:2] for n in
                ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime")}

    before = snapshot()
    c = xla_cell("""
for i in range(4):
    xb = torch.randn(4, x_timed.shape[1]).to(dev)
    opt_timed.zero_grad()
    loss = timed(xb).sum()
    loss.backward()
    opt_timed.step()
    torch_xla.sync()
last = loss.item()
""")
    after = snapshot()

    def delta(name):
        return (after[name][1] - before[name][1]) / 1e9

    assert len(c.steps) == 4
    assert c.total("compile_s") == pytest.approx(delta("CompileTime"), rel=1e-9, abs=1e-9)
    assert c.total("execute_s") == pytest.approx(delta("ExecuteTime"), rel=1e-9, abs=1e-9)
    to_dev = c.total("to_device_s") + c.outside_steps.get("to_device_s", 0.0)
    from_dev = c.total("from_device_s") + c.outside_steps.get("from_device_s", 0.0)
    assert to_dev == pytest.approx(delta("TransferToDeviceTime"), rel=1e-9, abs=1e-9)
    assert from_dev == pytest.approx(delta("TransferFromDeviceTime"), rel=1e-9, abs=1e-9)
    assert after["CompileTime"][0] - before["CompileTime"][0] == c.compiles
    assert after["ExecuteTime"][0] - before["ExecuteTime"][0] == len(c.steps)
    # Each step moved its own fresh batch to the device.
    assert all(s.timings["to_device_s"] > 0 for s in c.steps)
    assert all(s.timings["trace_s"] is not None and s.timings["trace_s"] >= 0 for s in c.steps)
    assert c.wall_s >= c.total("compile_s")


def _entry_layout(hlo: str) -> str:
    first = hlo.splitlines()[0]
    return re.search(r"entry_computation_layout=\{(.*)\}", first).group(1)


def test_hlo_before_and_after_are_the_same_graph(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="hlonet")
    c = xla_cell("z = torch.tanh(hlonet(x_hlonet)) * 3", options="--name same_graph")
    art = c.steps[0].artifacts
    assert art.dump_module is not None and art.graph_name == "same_graph"
    before, after = art.hlo_before, art.hlo_after
    assert before.splitlines()[0].startswith("HloModule same_graph")
    assert after.splitlines()[0].startswith("HloModule same_graph")
    # Same entry signature, and the ops of the graph survive into the optimized module.
    assert _entry_layout(before) == _entry_layout(after)
    assert "tanh" in before and "tanh" in after
    assert 'op_type="aten__tanh"' in after  # XLA_HLO_DEBUG metadata made it through fusion
    assert art.memory_report and art.buffer_assignment


def test_exception_mid_cell_keeps_kernel_and_tensors(ip, fresh_dim):
    from xla_cells import run_xla

    setup_mlp(ip, fresh_dim, name="errnet")
    result, c = run_xla(ip, """
kept = errnet(x_errnet) * 2
raise ValueError("boom in the user's cell")
never = 1
""")
    assert isinstance(result.error_in_exec, ValueError)
    assert "boom" in str(result.error_in_exec)
    assert c.error == "ValueError: boom in the user's cell"
    # Work done before the error was synced, so the user's tensor is usable.
    assert [s.sync_cause for s in c.steps] == ["end of cell"]
    assert "never" not in ip.user_ns
    assert ip.run_cell("kept_sum = float(kept.sum().cpu())").success
    # The traceback starts in the user's cell, not in xla_lab.
    tb = result.error_in_exec.__traceback__
    assert "xla_lab" not in tb.tb_frame.f_code.co_filename
    # The next cell is clean: only its own step.
    result2, c2 = run_xla(ip, "again = kept + 1")
    assert result2.success and len(c2.steps) == 1 and c2.error is None
    assert c2.steps[0].sync_cause == "end of cell"


def test_syntax_error_is_reported_and_records_nothing(ip):
    from xla_cells import run_xla

    n = len(xla_lab.history())
    result, c = run_xla(ip, "def broken(:\n    pass")
    assert isinstance(result.error_before_exec, SyntaxError)
    assert c is None and len(xla_lab.history()) == n


def test_no_sync_option_leaves_work_pending(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="lazynet")
    c = xla_cell("pending = lazynet(x_lazynet)", options="--no-sync -q")
    assert c.steps == []
    c2 = xla_cell("pending2 = pending + 1")
    assert len(c2.steps) == 1  # the pending forward joined this cell's graph
    assert "aten::addmm" in c2.steps[0].ir_text


def test_last_expression_is_the_cell_result(ip, fresh_dim):
    setup_mlp(ip, fresh_dim, name="exprnet")
    result = ip.run_cell("%%xla -q\nexprnet(x_exprnet).shape")
    assert tuple(result.result) == (4, 3)


def test_cpu_only_and_empty_cells_record_no_steps(xla_cell):
    c = xla_cell("import torch\ncpu_only = torch.ones(3) * 2\ndef helper(a):\n    return a + 1")
    assert c.steps == [] and c.error is None
    c = xla_cell("pass")
    assert c.steps == []


def test_many_cached_steps_share_one_artifact(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="many")
    c = xla_cell("""
for i in range(300):
    y_many = many(x_many)
    torch_xla.sync()
""", options="-q")
    assert len(c.steps) == 300
    assert len({id(s.artifacts) for s in c.steps}) == 1
    payload = c.to_dict()
    assert len(payload["artifacts"]) == 1
    assert all("hlo_after" not in s for s in payload["steps"])
    # The JSON grows with steps by their small records only, not by graph text.
    hlo = len(c.steps[0].hlo_after)
    assert len(c.to_json()) < hlo + 300 * 1000


def test_fallback_ops_are_reported(ip, xla_cell):
    ip.run_cell("import torch, torch_xla\nfb = torch.randn(16).to(torch_xla.device())")
    c = xla_cell("""
idx = torch.nonzero(fb > 0)
torch_xla.sync()
""")
    assert c.fallback_ops.get("nonzero", 0) >= 1
    assert sum(s.fallback_ops.get("nonzero", 0) for s in c.steps) == c.fallback_ops["nonzero"]


def test_dump_directory_keeps_no_llvm_flood(xla_cell, ip, fresh_dim):
    from xla_lab import session

    setup_mlp(ip, fresh_dim, name="dumpnet")
    xla_cell("dd = dumpnet(x_dumpnet)")
    s = session.current()
    assert s.dumps.size_bytes() == 0  # HLO text read into the store, everything else deleted
    assert list(s.runtime.dump_dir.iterdir()) == []


def test_cpu_transfer_is_an_implicit_step(ip, xla_cell, fresh_dim):
    setup_mlp(ip, fresh_dim, name="cpunet")
    c = xla_cell("""
host = cpunet(x_cpunet).cpu()
""")
    # (an end-of-cell step may follow for work the set-up cell left pending)
    assert c.steps[0].sync_cause == "implicit: .cpu() reads the value"
    assert c.steps[0].sync_line == 2
    assert c.steps[0].timings["from_device_s"] > 0


def test_keyboard_interrupt_is_recorded_and_reraised(ip, fresh_dim):
    from xla_cells import run_xla

    setup_mlp(ip, fresh_dim, name="kbnet")
    result, c = run_xla(ip, """
partial = kbnet(x_kbnet)
raise KeyboardInterrupt
""")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert c.error.startswith("KeyboardInterrupt")
    assert [s.sync_cause for s in c.steps] == ["end of cell"]
    result2, c2 = run_xla(ip, "after_interrupt = partial.sum()")
    assert result2.success and len(c2.steps) == 1


def test_hit_on_a_graph_compiled_in_a_plain_cell_shows_its_hlo(ip, xla_cell, fresh_dim):
    from xla_lab import session

    setup_mlp(ip, fresh_dim, name="outside")
    code = "o = outside(x_outside).relu()\ntorch_xla.sync()"
    assert ip.run_cell(code).success  # compiled outside %%xla
    assert list(session.current().runtime.dump_dir.iterdir()) == []  # its dump was read and cleaned
    c = xla_cell(code)
    assert c.steps[0].cache == "hit"
    assert c.steps[0].hlo_after is not None and "HloModule" in c.steps[0].hlo_before
    assert c.steps[0].artifacts.compiled_in is None  # compiled outside any %%xla cell
    assert c.steps[0].fusions and c.steps[0].artifacts.ir_source == "hlo-before"  # analysed on first use
