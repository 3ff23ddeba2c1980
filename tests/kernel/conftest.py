"""Shared fixtures of tests/kernel: one IPython shell with xla_lab loaded before any XLA device is used.

The XLA runtime reads its debug switches once per process, so the extension is loaded at import time
of this conftest, before any test can touch a device (pytest imports conftests and test modules while
collecting, before any test runs, and no test module touches a device when imported). Tests that need
a process where that did *not* happen (loading too late) run a subprocess. tests/unit, run on its
own, has no shell: its tests must not need one.
"""

import os
import itertools

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")

from IPython.testing.globalipapp import start_ipython  # noqa: E402

_IP = start_ipython()
_IP.run_line_magic("load_ext", "xla_lab")

_unique = itertools.count(3)

from xla_cells import run_xla  # noqa: E402  (test modules import it from there too)


@pytest.fixture(scope="session")
def ip():
    return _IP


@pytest.fixture
def fresh_dim():
    """A hidden size no other test used, so the graphs of a test are new to XLA's compile cache."""
    return 7 + next(_unique) * 2


@pytest.fixture
def xla_cell(ip):
    def run(body: str, options: str = "", raise_errors: bool = True):
        result, capture = run_xla(ip, body, options)
        if raise_errors and result.error_in_exec is not None:
            raise result.error_in_exec
        if raise_errors and result.error_before_exec is not None:
            raise result.error_before_exec
        return capture

    return run


@pytest.fixture(scope="session")
def mlp_capture(ip):
    """A small MLP's 3-step Adam train loop under %%xla, read by test_analysis.py and
    test_recompile_reasons.py (session scope: a second run of the same cells would hit XLA's cache)."""
    import xla_lab

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
