"""Multi-process cells (``xmp.spawn``, ``torch_xla.launch``) in real Jupyter kernels with four
simulated CPU devices: every rank captured with its device, the kernel's own captures untouched,
ranks that ran different graphs, failed or were killed named. The patterns are those of pytorch/xla's
notebook "Distributed PyTorch/XLA Basics" (contrib/kaggle) and a per-rank training loop.

On the CPU client the four ranks are threads of one worker process, and collectives between them
die in XLA's rendezvous with or without xla_lab (gather_ids below): that is XLA's, and the test only
asks that the capture says what each rank ran before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernels import Kernel

pytestmark = pytest.mark.slow

MP_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "mp"
ENV = {"CPU_NUM_DEVICES": "4"}

SETUP = """
import json, sys
import multiprocessing as mp
import torch, torch.nn as nn
import torch_xla, torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import xla_lab
lock = mp.Manager().Lock()
"""

# pytorch/xla's contrib/kaggle notebook, as written there
KAGGLE = """
def print_device(i, lock):
    device = torch_xla.device()
    with lock:
        print('process', i, device)

def add_ones(i, lock):
    x = torch.ones((3, 3), device='xla')
    y = x + x

    # Run graph to compute `y` before printing
    torch_xla.sync()

    with lock:
        print(i, y)

def gather_ids(i, lock):
    # Create a tensor on each device with the device ID
    t = torch.tensor([i], device='xla')
    with lock:
        print(i, t)

    # Collect and concatenate the IDs
    ts = xm.all_gather(t)
    torch_xla.sync()
    with lock:
        print(i, ts)

def train_ranks(index, lock):
    device = torch_xla.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(6, 12).to(device), torch.randn(6, 3).to(device)
    for _ in range(3):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
"""

RANKS = """
c = xla_lab.last()
print(json.dumps({
    "steps": len(c.steps), "launches": c.launches, "notes": c.notes,
    "ranks": [{"rank": r.rank, "device": r.device, "status": r.status, "error": r.error, "lines": r.lines,
               "steps": [{"cache": s.cache, "hash": s.graph_hash, "cause": s.sync_cause,
                          "compile_s": s.timings["compile_s"], "has_hlo": bool(s.hlo_before),
                          "kernels": len(s.fusions or [])} for s in r.steps]} for r in c.ranks],
}))
"""

SUMMARY = "from xla_lab.view.report import to_text; print(to_text(xla_lab.last()))"

# single-device cells, captured before / after multi-process cells and in a kernel that never ran one
SINGLE = [
    "%%xla -n single_a\nw = torch.randn(8, 8).to('xla')\nfor _ in range(3):\n    w = torch.tanh(w @ w) * 0.5\n    torch_xla.sync()\nv = w.sum().item()",
    "%%xla -n single_b\nm = nn.Linear(8, 4).to('xla')\nout = m(torch.ones(5, 8).to('xla')).relu()\ntorch_xla.sync()\nout.sum().item()",
]

PROJECT = """
import re
def _same_in_any_kernel(text):  # a cell's file is named after its kernel's process
    return re.sub(r"/ipykernel_\\d+/", "/ipykernel_PID/", text or "")

def _prompts_apart(text):  # the same cells run at other prompts than in the reference kernel
    return re.sub(r"\\[\\d+\\]", "[N]", text or "")

def _project(c):
    arts = c.artifacts()
    return {"steps": [[s.index, s.graph_name, s.graph_hash, s.cache, s.sync_cause, s.sync_line, s.sync_code,
                       _prompts_apart(s.recompile_reason)] for s in c.steps],
            "graphs": {h: [_same_in_any_kernel(a.hlo_before).split("\\n", 1)[-1],
                           _same_in_any_kernel(a.hlo_after).split("\\n", 1)[-1],
                           [k["name"] for k in a.fusions or []], (a.memory or {}).get("peak_bytes")]
                       for h, a in arts.items()},
            "notes": c.notes, "ranks": len(c.ranks)}
"""


def _json(k: Kernel, code: str) -> dict:
    return json.loads(k.run(code).stdout().strip().splitlines()[-1])


def _single_device_captures(k: Kernel) -> list[dict]:
    k.run(PROJECT)
    out = []
    for cell in SINGLE:
        k.run(cell)
        out.append(_json(k, "print(json.dumps(_project(xla_lab.last())))"))
    return out


@pytest.fixture(scope="module")
def reference_captures():
    """The single-device cells in a kernel that never ran a multi-process cell."""
    with Kernel(env=ENV) as k:
        k.run("%load_ext xla_lab")
        k.run(SETUP)
        return _single_device_captures(k)


def _ranks(k: Kernel) -> dict:
    return _json(k, RANKS)


def test_kaggle_patterns_fork_from_cells_capture_every_rank_and_leave_the_kernel_untouched(reference_captures):
    with Kernel(env=ENV) as k:
        k.run("%load_ext xla_lab")
        k.run(SETUP)
        k.run(KAGGLE)

        ex = k.run("%%xla -q\nxmp.spawn(print_device, args=(lock,), start_method='fork')")
        # the workers' prints reach the cell (forked workers' writes can reach the kernel's stream in
        # pieces, one worker's between another's: found once on torch_xla 2.8, "process0 xla:0" among
        # the lines, so each print is counted by its parts)
        out = ex.stdout()
        assert out.count("process") == 4 and all(out.count(f"xla:{i}") == 1 for i in range(4)), out
        got = _ranks(k)
        assert got["steps"] == 0 and [r["device"] for r in got["ranks"]] == [f"xla:{i}" for i in range(4)]
        assert all(r["status"] == "ok" and r["steps"] == [] for r in got["ranks"])
        assert got["launches"][0]["function"] == "print_device" and got["launches"][0]["start_method"] == "fork"

        ex = k.run("%%xla -q\nxmp.spawn(add_ones, args=(lock,), start_method='fork')")
        assert ex.stdout().count("tensor([[2., 2., 2.]") == 4
        got = _ranks(k)
        assert got["steps"] == 0, "the workers' syncs are not the kernel's steps"
        steps = [r["steps"] for r in got["ranks"]]
        assert all(len(s) == 1 and s[0]["cause"] == "torch_xla.sync()" for s in steps)
        assert len({s[0]["hash"] for s in steps}) == 1  # one graph, the same on every rank
        compiled = [s[0] for s in steps if s[0]["cache"] == "miss"]
        assert compiled and all(c["has_hlo"] and c["kernels"] >= 1 and c["compile_s"] > 0 for c in compiled)
        assert all(r["lines"][0] == {"cell": 3, "line": 11, "code": "torch_xla.sync()"} for r in got["ranks"])

        # displayed, as a notebook shows it: the panel's model has the ranks and their graphs
        shown = k.run("%%xla\nxmp.spawn(train_ranks, args=(lock,), start_method='fork')")
        bundle = shown.first("display_data")["content"]["data"]
        assert "4 ranks in 1 worker process" in bundle["text/plain"] and "<pre>" in bundle["text/html"]
        from xla_lab.view.saved_output import unpacked_payload

        model = unpacked_payload(bundle["application/vnd.xla-lab.capture+json"])
        assert [r["rank"] for r in model["summary"]["ranks"]] == [0, 1, 2, 3]
        assert len(model["graphs"]) == 2 and not shown.stdout("stderr").strip()
        got = _ranks(k)
        assert [len(r["steps"]) for r in got["ranks"]] == [3, 3, 3, 3]
        assert all(s["has_hlo"] for r in got["ranks"] for s in r["steps"])  # hits show the graph they ran
        assert len({s["hash"] for r in got["ranks"] for s in r["steps"]}) == 2  # step 0, then steady state
        text = k.run(SUMMARY).stdout()
        assert "4 ranks in 1 worker process" in text and "launch 1: train_ranks (fork)" in text
        assert "different graph" not in text

        # all_gather between CPU threads dies in XLA's rendezvous (as without xla_lab): the capture
        # still says what each rank compiled, and that the ranks' graphs differ (the id is baked in)
        ex = k.run("%%xla -q\nxmp.spawn(gather_ids, args=(lock,), start_method='fork')", ok=False, timeout=200)
        assert ex.ename == "BrokenProcessPool"
        got = _ranks(k)
        assert {r["status"] for r in got["ranks"]} == {"killed"}
        text = k.run(SUMMARY).stdout()
        # each rank's id is baked into its graph; a rank whose sync hung in the collective says so
        assert "ran a different graph from rank" in text and "did not end" in text, text
        assert sum(1 for r in got["ranks"] if r["steps"]) >= 2, text  # what they had recorded is kept

        after = _single_device_captures(k)
    for mine, reference in zip(after, reference_captures):
        assert mine == reference, "a single-device capture changed after multi-process cells"
        assert mine["graphs"] and all(g[0] for g in mine["graphs"].values()), "HLO lost"


def test_launch_with_spawn_from_a_module_flags_divergent_failed_and_killed_ranks():
    with Kernel(env=ENV) as k:
        k.run("%load_ext xla_lab")
        k.run(SETUP + f"sys.path.insert(0, {str(MP_DIR)!r})\nimport mp_workers")

        k.run("%%xla -q\ntorch_xla.launch(mp_workers.train_loop, start_method='spawn')", timeout=300)
        got = _ranks(k)
        assert [len(r["steps"]) for r in got["ranks"]] == [3, 3, 3, 3]
        assert got["launches"][0]["start_method"] == "spawn"
        assert all(r["lines"][0]["file"].endswith("mp_workers.py") and r["lines"][0]["line"] == 27 for r in got["ranks"])

        k.run("%%xla -q\nxmp.spawn(mp_workers.rank_dependent_shape, start_method='fork')")
        text = k.run(SUMMARY).stdout()
        # rank 2 makes a 5x3 tensor, the others 4x3; which rank compiles first (and is compared with) varies
        assert "step 0 at mp_workers.py:38: rank" in text and "ran a different graph from rank" in text, text
        assert "5 -> 4" in text or "4 -> 5" in text, text  # the difference named: the scalar baked in

        ex = k.run("%%xla -q\nxmp.spawn(mp_workers.raises_on_rank_1, start_method='fork')", ok=False)
        assert ex.ename == "ValueError" and "rank 1 gives up" in ex.evalue
        got = _ranks(k)
        status = {r["rank"]: r["status"] for r in got["ranks"]}
        assert status == {0: "ok", 1: "raised", 2: "ok", 3: "ok"}
        assert all(len(r["steps"]) == 1 for r in got["ranks"]), "the other ranks' captures are kept"
        assert "rank 1 (process" in k.run(SUMMARY).stdout()

        ex = k.run("%%xla -q\nxmp.spawn(mp_workers.killed, start_method='fork')", ok=False)
        assert ex.ename == "BrokenProcessPool"
        got = _ranks(k)
        assert {r["status"] for r in got["ranks"]} == {"killed"}
        assert any(r["steps"] for r in got["ranks"]), "what the killed worker had recorded is kept"

        # the kernel is still usable, for more launches and for its own device
        k.run("%%xla -q\nxmp.spawn(mp_workers.rank_dependent_shape, start_method='fork')")
        k.run("%%xla\nz = torch.ones(3).to('xla') * 2\ntorch_xla.sync()")
        mine = _json(k, "c = xla_lab.last(); print(json.dumps([len(c.steps), len(c.ranks), bool(c.steps[0].hlo_before)]))")
        assert mine == [1, 0, True]


def test_a_fork_outside_a_launch_never_writes_into_the_kernels_capture():
    """A plain multiprocessing fork whose child compiles: the kernel's cell says so and keeps its own."""
    with Kernel(env=ENV) as k:
        k.run("%load_ext xla_lab")
        k.run(SETUP)
        k.run("def child():\n    import torch_xla\n    (torch.ones(2, device='xla') * 3).sum().item()\n")
        k.run("%%xla -q\np = mp.get_context('fork').Process(target=child)\np.start(); p.join()\nassert p.exitcode == 0")
        got = _json(k, "c = xla_lab.last(); print(json.dumps([len(c.steps), c.notes]))")
        assert got[0] == 0
        assert any("outside xmp.spawn / torch_xla.launch compiled 1 XLA graph" in n for n in got[1]), got[1]
