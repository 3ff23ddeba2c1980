"""Run the model zoo under ``%%xla`` in one capture mode, in a fresh process (the mode is chosen before the
XLA runtime starts, so a test process that already used a device cannot switch), and write what the
tests of ``tests/kernel/test_lean.py`` compare: each entry's capture, torch_xla's own metric totals for
the cell, and what every view made of it.

    python tests/lean_run.py MODE OUT.json [ENTRY ...]
    python tests/lean_run.py queue OUT.json

MODE is ``full`` or ``lean``; lean is chosen with ``%xla mode lean`` after ``%load_ext xla_lab``, as a
user would (``XLA_LAB_CAPTURE=lean`` is the other way, tested by the benchmark). ``queue``: in lean
capture, a marked step's variant compiled by the precompile queue, then run for real.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "kernel", "zoo"), os.path.dirname(HERE)]


def _metrics() -> dict:
    import torch_xla.debug.metrics as met

    out = {}
    for name in ("CompileTime", "ExecuteTime"):
        data = met.metric_data(name)
        out[name] = {"count": data[0] if data else 0, "total_s": (data[1] if data else 0.0) / 1e9}
    return out


def _views(capture) -> dict:
    """What each view made of the capture (or the error it raised)."""
    from xla_lab.view.panel_model import panel_model
    from xla_lab.view.report import Report
    from xla_lab.view.static_html import capture_html

    out = {}
    for name, make in (("text", lambda: Report(capture).text()), ("html", lambda: capture_html(capture)),
                       ("panel", lambda: json.dumps(panel_model(capture)))):
        try:
            out[name] = make()
        except Exception:
            out[name] = "ERROR " + traceback.format_exc()
    return out


def main(mode: str, out_path: str, names: list[str]) -> None:
    from IPython.testing.globalipapp import start_ipython

    import zoo

    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    if mode == "lean":
        ip.run_line_magic("xla", "mode lean")
    import xla_lab

    results = {}
    for entry in zoo.ZOO:
        if names and entry.name not in names:
            continue
        assert ip.run_cell(entry.setup).success, entry.name
        before = _metrics()
        result = ip.run_cell(f"%%xla -q --name zoo_{entry.name}\n{entry.loop}")
        capture = xla_lab.last()  # (waits for the capture's analysis)
        after = _metrics()
        results[entry.name] = {
            "ok": result.success, "error": repr(result.error_in_exec),
            "capture": json.loads(capture.to_json()),
            "metrics": {k: {"count": after[k]["count"] - before[k]["count"],
                            "total_s": after[k]["total_s"] - before[k]["total_s"]} for k in after},
            "losses": [float(t.detach().cpu()) for t in ip.user_ns["zoo_losses"]],
            "views": _views(capture),
        }
    decoder = next((e for e in zoo.ZOO if e.name == "decoder_only"), None)
    if decoder is not None and (not names or decoder.name in names):  # measured time (--profile) of cached steps
        assert ip.run_cell(f"%%xla -q --profile --name zoo_profiled\n{decoder.loop}").success
        profile = xla_lab.last().profile or {}
        results["_profiled"] = {"steps": len(profile.get("steps") or []),
                                "kernels": sorted({name for g in (profile.get("graphs") or {}).values()
                                                   for name in g["kernels"]}),
                                "notes": xla_lab.last().notes}
    # a loop longer than the 1,024 samples torch_xla keeps per metric: every step is still one
    assert ip.run_cell("import torch, torch_xla\ntiny = torch.zeros(4, device=torch_xla.device())").success
    assert ip.run_cell("%%xla -q --name long\nfor _ in range(1100):\n    tiny = tiny + 1\n    torch_xla.sync()").success
    long = xla_lab.last()
    results["_long"] = {"steps": len(long.steps), "caches": sorted({s.cache for s in long.steps[1:]}),
                        "graphs": len({s.graph_hash for s in long.steps[1:]}), "notes": long.notes}
    from xla_lab import session

    results["_runtime"] = {"mode": session.get().runtime.mode, "hlo_dump": session.get().runtime.hlo_dump,
                           "dump_files": sorted(os.listdir(session.get().runtime.dump_dir))[:20]}
    with open(out_path, "w") as f:
        json.dump(results, f)


QUEUE_SETUP = """
import torch, torch_xla, xla_lab
dev = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

@xla_lab.step
def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

def batch(n):
    return torch.randn(n, 24).to(dev), torch.randint(0, 4, (n,)).to(dev)
"""


def main_queue(out_path: str) -> None:
    """Lean capture with the precompile queue: the jobs' graphs reach the store with their modules (from
    a profiler session's list of live modules), so the real steps that run them show their HLO."""
    from IPython.testing.globalipapp import start_ipython

    import xla_lab

    os.environ["XLA_LAB_CAPTURE"] = "lean"
    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    assert ip.run_cell(QUEUE_SETUP).success
    queue = xla_lab.queue()
    queue.idle_delay = 1e6  # (the jobs run when asked, below)
    assert ip.run_cell("%%xla -q\nx, y = batch(8)\nloss = train_step(model, opt, x, y)").success
    first = xla_lab.last()
    ip.run_line_magic("xla", "queue add train_step x=5x24 y=5")
    queue.run_pending()
    jobs = [(j.label, j.state, j.error) for j in queue.jobs]
    runs = []
    for n in (8, 5):
        assert ip.run_cell(f"%%xla -q\nx, y = batch({n})\nloss = train_step(model, opt, x, y)").success
        runs.append(json.loads(xla_lab.last().to_json()))
    fit = xla_lab.fit(ip.user_ns["train_step"], "batch", "256KiB")  # (compile-only jobs: peaks from the session)
    fitted = fit.result.to_dict()
    with open(out_path, "w") as f:
        json.dump({"first": json.loads(first.to_json()), "jobs": jobs, "runs": runs, "fit": fitted}, f)


if __name__ == "__main__":
    if sys.argv[1] == "queue":
        main_queue(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3:])
