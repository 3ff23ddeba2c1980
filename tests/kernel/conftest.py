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

