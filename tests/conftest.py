"""Settings for every test: the CPU client unless told otherwise, and the header line.

The tests are in two folders (see README, "Tests"): ``unit/`` (pure: no IPython shell, no kernel, no
subprocess; fixture files and hand-made inputs, seconds) and ``kernel/`` (the shared IPython shell
with xla_lab loaded, real Jupyter kernels, subprocesses running torch_xla); ``browser/`` drives
JupyterLab in chromium. The shell is started by ``kernel/conftest.py``. Helpers shared by the test
modules live here, importable by name (this folder is on ``sys.path``: pytest puts a conftest's
folder there): ``kernels.py`` (a real Jupyter kernel), ``xla_cells.py`` (run a ``%%xla`` cell).
"""

import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")


def pytest_report_header(config):
    return f"python {sys.version.split()[0]}, PJRT_DEVICE={os.environ.get('PJRT_DEVICE')}"
