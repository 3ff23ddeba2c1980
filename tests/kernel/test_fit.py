"""%xla fit on zoo models (ResNet-18, GPT-2, the decoder-only model; the decoder also sharded on 4
simulated devices under SPMD): the line's peak at the confirmed size is within 5% of the compiled peak,
the answer is the largest compiled size within the budget (the next size up, compiled, is over it), and
the user's tensors, random state and history are bitwise untouched. Bad requests get one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from IPython.core.error import UsageError

from queue_helpers import settle
from tests.kernel.test_precompile import assert_same, snapshot
from tests.kernel.zoo.zoo import DECODER, GPT2, RESNET

# Each zoo model's set-up cell, then a marked step over its own model and optimizer and one real call.
STEPS = {
    "resnet18": (RESNET.setup + """
@xla_lab.step
def fit_step(model, opt, inputs, labels):
    opt.zero_grad()
    loss = F.cross_entropy(model(inputs), labels) * 1.0  # (not the zoo's own graph: test_zoo must compile it)
    loss.backward()
    opt.step()
    return loss
loss = fit_step(model, opt, *batches[0]); torch_xla.sync()
""", "inputs[0] labels[0]", 320 << 20),
    "gpt2": (GPT2.setup + """
@xla_lab.step
def fit_step(model, opt, ids):
    opt.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss * 1.0
    loss.backward()
    opt.step()
    return loss
loss = fit_step(model, opt, batches[0][0][0]); torch_xla.sync()
""", "batch", 24 << 20),
    "decoder_only": (DECODER.setup + """
@xla_lab.step
def fit_step(model, opt, tokens):
    opt.zero_grad()
    loss = lm_loss(model, tokens) * 1.0
    loss.backward()
    opt.step()
    return loss
loss = fit_step(model, opt, batches[0][0]); torch_xla.sync()
""", "tokens[0]", 16 << 20),
}


@pytest.fixture
def queue(ip):
    import xla_lab

    q = xla_lab.queue()
    delay, q.idle_delay = q.idle_delay, 1e6
    settle(q)
    q.jobs.clear()
    yield q
    settle(q)
    q.idle_delay = delay
    q.paused = False
    q.marked.clear()
    q.jobs.clear()


def check_answer(d: dict, budget: int, line_within: float | None = 0.05) -> None:
    assert d["state"] == "done", d
    answer, nxt = d["answer"], d["next_up"]
    assert answer["peak"] <= budget < nxt["peak"]
    assert nxt["size"] == answer["size"] + d["multiple"]  # the next size up was compiled, and is over
    assert all(p["peak"] <= budget for p in d["points"] if p["size"] <= answer["size"])
    if line_within is not None:
        assert abs(d["prediction_error"]) <= line_within, d["confirm"]
    assert d["buffers"] and d["buffers"][0]["bytes"] > 0


@pytest.mark.parametrize("name", ["resnet18", "gpt2", "decoder_only"])
def test_fit_on_zoo_models(ip, queue, name):
    import xla_lab

    setup, dims, budget = STEPS[name]
    assert ip.run_cell("import xla_lab\n" + setup).success
    history = [id(c) for c in xla_lab.history()]
    ns = ip.user_ns
    before = snapshot(ns)
    result = xla_lab.fit(ns["fit_step"], dims, budget)
    after = snapshot(ns)
    assert_same(before, after)  # parameters, grads, optimizer state, module attributes, every RNG
    assert [id(c) for c in xla_lab.history()] == history
    d = result.to_dict()
    check_answer(d, budget)
    assert d["compiles"] <= 5  # (the goal, 4, is the benchmark's: benchmarks/bench_fit.py)
    # the base's buffer breakdown put the second probe near the answer (ResNet-18 259 for 268, GPT-2
    # 188 for 171, decoder-only 137 for 136; base x budget / peak gave 7, 61 and 74)
    second = [p for p in d["points"] if p["role"] == "probe"][1]
    assert abs(second["size"] - d["answer"]["size"]) <= 0.15 * d["answer"]["size"], d["points"]
    assert any(b.get("source") for b in d["buffers"])  # the dominating buffers name their lines
    html = result._repr_mimebundle_()["text/html"]
    assert "<svg" in html and "fit-line" in html and html.count("fit-point") == len(d["points"])


def test_bad_requests_get_one_line_and_lose_nothing(ip, queue):
    assert ip.run_cell("""
import torch, torch_xla, xla_lab
dev = torch_xla.device()
lin = torch.nn.Linear(8, 4).to(dev)
def plain(lin, x):
    return lin(x).sum()
@xla_lab.step
def ok_step(lin, x):
    return lin(x).sum()
@xla_lab.step
def picky(lin, x):
    if x.shape[0] != 3:
        raise RuntimeError("only batches of 3")
    return lin(x).sum()
out = ok_step(lin, torch.zeros(3, 8).to(dev)); out2 = picky(lin, torch.zeros(3, 8).to(dev)); torch_xla.sync()
""").success
    before = snapshot({"model": ip.user_ns["lin"], "opt": torch_opt(ip)})
    for line, says in [("fit plain batch --budget 1GiB", "plain is not a marked step"),
                       ("fit nothing batch --budget 1GiB", "no marked step named 'nothing'"),
                       ("fit ok_step y[0] --budget 1GiB", "has no tensor input 'y'"),
                       ("fit ok_step x[4] --budget 1GiB", "no dimension 4"),
                       ("fit ok_step batch --budget 0", "positive amount"),
                       ("fit ok_step batch --budget lots", "cannot read the budget 'lots'"),
                       ("fit ok_step batch", "usage: %xla fit")]:
        with pytest.raises(UsageError, match=says) as info:
            ip.run_line_magic("xla", line)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="not a marked step"):
        xla_lab_fit(ip.user_ns["plain"])
    result = xla_lab_fit(ip.user_ns["picky"])
    assert result.state == "failed" and "only batches of 3" in result.error
    assert "\n" not in result.text()
    assert_same(before, snapshot({"model": ip.user_ns["lin"], "opt": torch_opt(ip)}))


def torch_opt(ip):
    import torch

    return torch.optim.SGD(ip.user_ns["lin"].parameters(), lr=0.1)


def xla_lab_fit(step):
    import xla_lab

    return xla_lab.fit(step, "batch", "1MiB")


SPMD = '''
import json, os, sys
os.environ["CPU_NUM_DEVICES"] = "4"
sys.path.insert(0, {tests!r})
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "xla_lab")
import numpy as np
assert ip.run_cell("""
import numpy as np, torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
xr.use_spmd()
""").success
assert ip.run_cell({setup!r}).success
assert ip.run_cell("""
import xla_lab
mesh = xs.Mesh(np.arange(4), (4, 1), ("data", "model"))
tokens = batches[0][0]
xs.mark_sharding(tokens, mesh, ("data", None))
@xla_lab.step
def fit_step(model, opt, tokens):
    opt.zero_grad()
    loss = lm_loss(model, tokens) * 1.0
    loss.backward()
    opt.step()
    return loss
loss = fit_step(model, opt, tokens); torch_xla.sync()
""").success
import xla_lab
r = xla_lab.fit(ip.user_ns["fit_step"], "tokens[0]", {budget}, multiple=4)  # (the batch is split 4 ways)
print("RESULT " + json.dumps(r.to_dict()))
'''


def test_fit_under_spmd_reads_the_per_device_peak():
    import os

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    budget = 4 << 20
    script = SPMD.format(tests=os.path.join(tests, "kernel"), setup=DECODER.setup, budget=budget)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert d["spmd"] and d["devices"] == 4
    # The line's 5% holds here too. (It was 13% off while the base size's peak was read from the wrong
    # module: copying the sharded input at the size it ran with makes the runtime compile an all-gather
    # of its own, ReplicateShardedData, whose 680-byte buffer assignment was taken for the step's.)
    check_answer(d, budget)
    base = next(p for p in d["points"] if p["size"] == d["base"])
    assert base["peak"] > 400_000 and base["grows"]  # the step's graph: weights and Adam state per device
    assert d["line"]["a"] > 0  # weights and optimizer state: a fixed part, not a negative one
    assert not any("not affine" in n for n in d["notes"])
    assert d["answer"]["size"] % 4 == 0
    assert any("SPMD on 4 devices" in n for n in d["notes"])
