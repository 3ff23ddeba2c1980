"""Capture under SPMD on 4 simulated CPU devices (a process of its own: the device count is fixed
when the runtime starts)."""

import json
import subprocess
import sys
import textwrap

import pytest


ON_FOUR_DEVICES = '''
import json, os, re
os.environ["CPU_NUM_DEVICES"] = "4"
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "xla_lab")
ip.run_line_magic("xla", "mode {mode}")
assert ip.run_cell("""
import numpy as np, torch, torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
xr.use_spmd()
dev = torch_xla.device()
""").success
'''


def _on_four_devices(script: str, mode: str = "full") -> dict:
    """Run ``script`` (indented as it likes) after an SPMD set-up on 4 simulated CPU devices, in a
    process of its own, in capture ``mode``; returns the JSON it printed after "RESULT "."""
    prefix = ON_FOUR_DEVICES.replace("{mode}", mode)
    proc = subprocess.run([sys.executable, "-c", prefix + textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])


def test_sharded_train_step_is_captured_with_collectives_and_lines():
    result = _on_four_devices('''
        assert ip.run_cell("""
        mesh = xs.Mesh(np.arange(4), (2, 2), ("data", "model"))
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dev)
        xs.mark_sharding(model[0].weight, mesh, ("model", None))
        xs.mark_sharding(model[2].weight, mesh, (None, "model"))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(16, 32).to(dev)
        xs.mark_sharding(x, mesh, ("data", None))
        """).success
        assert ip.run_cell("""%%xla -q --name spmd
        for i in range(3):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            torch_xla.sync()
        """).success
        import xla_lab
        c = xla_lab.last()
        step = c.steps[-1]
        print("RESULT " + json.dumps({
            "caches": [s.cache for s in c.steps],
            "execute": [s.timings["execute_s"] for s in c.steps],
            "collectives": [k for k in step.fusions if k["collective"]],
            "hlo_has_all_reduce": "all-reduce(" in step.hlo_after,
            "devices": ip.user_ns["xr"].global_runtime_device_count(),
        }))
    ''')
    assert result["devices"] == 4
    assert result["caches"][-1] == "hit" and result["caches"][0] == "miss"
    assert all(t is not None and t > 0 for t in result["execute"])  # ExecuteReplicatedTime samples
    assert result["hlo_has_all_reduce"] and result["collectives"]
    for k in result["collectives"]:
        assert k["kind"] == "all-reduce" and k["bytes"] > 0
        assert k["lines"] and all(isinstance(ln["cell"], int) for ln in k["lines"])


SPMD_VIEWS = '''
    assert ip.run_cell("""
    def setup(mesh, weight_specs, batch_spec):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(dev)
        for layer, spec in zip((model[0], model[2]), weight_specs):
            if spec is not None:
                xs.mark_sharding(layer.weight, mesh, spec)
        x = torch.randn(16, 32).to(dev)
        y = torch.randn(16, 8).to(dev)
        xs.mark_sharding(x, mesh, batch_spec)
        xs.mark_sharding(y, mesh, batch_spec)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), x, y
    """).success
    cases = {
        "data": ("xs.Mesh(np.arange(4), (4,), ('data',))", "(None, None)", "('data', None)"),
        "data_model": ("xs.Mesh(np.arange(4), (2, 2), ('data', 'model'))", "(('model', None), (None, 'model'))",
                       "('data', None)"),
    }
    out = {}
    import xla_lab
    from xla_lab.view.report import to_text
    for name, (mesh, weights, batch) in cases.items():
        assert ip.run_cell(f"model, opt, x, y = setup({mesh}, {weights}, {batch})").success
        body = ("for i in range(2):\\n    opt.zero_grad()\\n    loss = torch.nn.functional.mse_loss(model(x), y)\\n"
                "    loss.backward()\\n    opt.step()\\n    torch_xla.sync()\\n")
        assert ip.run_cell(f"%%xla -q --name {name}\\n" + body).success
        step = xla_lab.last().steps[-1]
        hlo = step.hlo_after
        ops = re.findall(r"^\\s*%(\\S+) = (\\S+) (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\\(", hlo, re.M)
        out[name] = {"spmd": step.artifacts.spmd, "hlo_collectives": ops, "text": to_text(xla_lab.last())}
    print("RESULT " + json.dumps(out))
'''


def _bytes(shape: str) -> int:
    import re

    size = {"f32": 4, "f16": 2, "bf16": 2, "s32": 4, "s64": 8, "f64": 8, "pred": 1}
    m = re.match(r"(\w+)\[([\d,]*)\]", shape)
    n = 1
    for d in filter(None, m[2].split(",")):
        n *= int(d)
    return n * size[m[1]]


@pytest.mark.parametrize("mode", ["full", "lean"])
def test_data_parallel_and_2d_sharded_steps_show_collectives_layouts_and_lines(mode):
    """In lean capture too: the optimized module's parameters keep their shardings and one device's
    shape, so the layouts (whole shapes, blocks, devices) are read from it."""
    result = _on_four_devices(SPMD_VIEWS, mode)
    for name, case in result.items():
        spmd = case["spmd"]
        assert spmd["devices"] == 4 and spmd["memory_per_device"]
        # the collectives are exactly those of the optimized HLO, with their sizes
        listed = sorted((c["name"], c["kind"], c["bytes"]) for c in spmd["collectives"])
        in_hlo = sorted((n, kind, _bytes(shape)) for n, shape, kind in case["hlo_collectives"])
        assert listed == in_hlo and listed, name
        for c in spmd["collectives"]:
            assert c["lines"] and all(isinstance(ln["cell"], int) for ln in c["lines"]), (name, c)
            assert c["groups"] and all(len(g) == c["group_size"] for g in c["groups"])
        assert "SPMD over 4 devices" in case["text"] and "dev 0" in case["text"]
    # data parallel: parameters are replicated, so the gradients are all-reduced over all four devices
    dp = result["data"]["spmd"]
    assert all(c["kind"] == "all-reduce" and c["groups"] == [[0, 1, 2, 3]] for c in dp["collectives"])
    x = next(t for t in dp["tensors"] if t["shape"].startswith("f32[16,32]") and t["role"].startswith("input"))
    assert [b["devices"] for b in sorted(x["blocks"], key=lambda b: b["tile"])] == [[0], [1], [2], [3]]
    assert x["per_device_shape"] == "f32[4,32]"
    # data x model: the first layer's weight is split over "model" (2 ways), each block on 2 devices
    dm = result["data_model"]["spmd"]
    w = next(t for t in dm["tensors"] if t["shape"].startswith("f32[64,32]") and t["role"].startswith("input"))
    assert w["per_device_shape"] == "f32[32,32]" and len(w["blocks"]) == 2
    assert all(len(b["devices"]) == 2 for b in w["blocks"])
    assert {len(g) for c in dm["collectives"] for g in c["groups"]} == {2}


def test_profile_of_a_sharded_step_counts_every_device():
    """%%xla --profile under SPMD: one ExecuteReplicated dispatch runs the graph on the 4 devices,
    so each kernel runs 4 times per step (collectives included), and every step has device time."""
    result = _on_four_devices('''
        assert ip.run_cell("""
        mesh = xs.Mesh(np.arange(4), (4, 1), ("data", "model"))
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(16, 32).to(dev)
        xs.mark_sharding(x, mesh, ("data", None))
        """).success
        body = """
        for i in range(3):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            torch_xla.sync()
        """
        assert ip.run_cell("%%xla -q --name spmd_prof\\n" + body).success
        assert ip.run_cell("%%xla -q --name spmd_prof --profile\\n" + body).success
        import xla_lab
        from xla_lab.profile import breakdown
        c = xla_lab.last()
        print("RESULT " + json.dumps({
            "notes": c.notes, "steps": [r["step"] for r in c.profile["steps"]],
            "busy": [r["busy_ns"] for r in c.profile["steps"]],
            "counts": sorted({k.count for k in breakdown.kernel_times(c)}),
            "known": all(k.known for k in breakdown.kernel_times(c)),
            "collective_times": [k.total_ns for k in breakdown.kernel_times(c)
                                 if any(f["name"] == k.name and f["collective"] for f in c.steps[-1].fusions)],
        }))
    ''')
    assert not [n for n in result["notes"] if "profile" in n], result["notes"]
    assert result["steps"] == [0, 1, 2] and all(b > 0 for b in result["busy"])
    assert result["known"] and result["counts"] == [12]  # 3 steps x 4 devices
    assert result["collective_times"] and all(t > 0 for t in result["collective_times"])
