"""Capture under SPMD on 4 simulated CPU devices (a process of its own: the device count is fixed
when the runtime starts)."""

import json
import subprocess
import sys
import textwrap


def test_sharded_train_step_is_captured_with_collectives_and_lines():
    script = textwrap.dedent('''
        import json, os
        os.environ["CPU_NUM_DEVICES"] = "4"
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "xla_lab")
        assert ip.run_cell("""
        import numpy as np, torch, torch_xla
        import torch_xla.runtime as xr
        import torch_xla.distributed.spmd as xs
        xr.use_spmd()
        mesh = xs.Mesh(np.arange(4), (2, 2), ("data", "model"))
        dev = torch_xla.device()
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
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["devices"] == 4
    assert result["caches"][-1] == "hit" and result["caches"][0] == "miss"
    assert all(t is not None and t > 0 for t in result["execute"])  # ExecuteReplicatedTime samples
    assert result["hlo_has_all_reduce"] and result["collectives"]
    for k in result["collectives"]:
        assert k["kind"] == "all-reduce" and k["bytes"] > 0
        assert k["lines"] and all(isinstance(ln["cell"], int) for ln in k["lines"])
