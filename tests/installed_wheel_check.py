"""Run by ``make env-2.8`` from outside this checkout, in the environment where xla_lab's wheel was
installed over a user's torch 2.8.0 + torch_xla 2.8.1: the installed wheel (not this checkout's
source) runs ``%load_ext xla_lab``, a ``%%xla`` train cell and ``%xla status`` in a real Jupyter kernel,
as a notebook user would. Exits non-zero, saying what failed, otherwise."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CAPTURE_MIME = "application/vnd.xla-lab.capture+json"

CELLS = [
    "%load_ext xla_lab",
    "import torch, torch.nn as nn, torch_xla\n"
    "dev = torch_xla.device()\n"
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).to(dev)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
    "x, y = torch.randn(8, 32).to(dev), torch.randint(0, 4, (8,)).to(dev)",
    "%%xla --name train\n"
    "for step in range(4):\n"
    "    opt.zero_grad()\n"
    "    loss = nn.functional.cross_entropy(model(x), y)\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "    torch_xla.sync()",
    "%xla status",
    "import xla_lab, torch_xla.debug.metrics as met\n"
    "c = xla_lab.last()\n"
    "print('FILE', xla_lab.__file__)\n"
    "print('STEPS', len(c.steps), c.compiles, c.cache_hits)\n"
    "print('HLO', all(s.hlo_after for s in c.steps), bool(c.steps[0].fusions))\n"
    "print('COMPILE', round(sum(s.timings['compile_s'] or 0 for s in c.steps), 6),"
    " round(met.metric_data('CompileTime')[1] / 1e9, 6))\n"
    "print('LOSS', float(loss))",
]


def main() -> int:
    import xla_lab

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(xla_lab.__file__).resolve()
    if site not in where.parents:
        return fail(f"xla_lab was imported from {where}, not from the installed wheel in {site}")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))
    os.environ.update(env)
    NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": os.getcwd()}}).execute()
    texts = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream") for cell in nb.cells]
    train, status, check = nb.cells[2], texts[3], texts[4]
    if not any(CAPTURE_MIME in o.get("data", {}) for o in train.outputs):
        return fail(f"the %%xla cell showed no capture: {train.outputs}")
    import torch
    import torch_xla

    rows = [line.split() for line in status.splitlines()]
    if ["torch_xla", torch_xla.__version__] not in rows or ["torch", str(torch.__version__)] not in rows:
        return fail(f"%xla status does not name torch {torch.__version__} and torch_xla {torch_xla.__version__}:\n{status}")
    found = dict(line.split(" ", 1) for line in check.splitlines() if " " in line)
    if Path(found.get("FILE", "")).resolve() != where:
        return fail(f"the kernel imported another xla_lab: {found.get('FILE')}")
    steps, compiles, hits = (int(v) for v in found["STEPS"].split())
    if (steps, compiles) != (4, 2) or hits != 2:
        return fail(f"the train cell should be 4 steps, 2 compiled and 2 cache hits: {found['STEPS']}")
    if found["HLO"] != "True True":
        return fail(f"steps without HLO or fusion map: {found['HLO']}")
    captured, metric = (float(v) for v in found["COMPILE"].split())
    if not 0 < captured <= metric + 1e-6:
        return fail(f"compile seconds {captured} do not agree with torch_xla's CompileTime {metric}")
    print(f"installed wheel OK on torch {torch.__version__} + torch_xla {torch_xla.__version__}: "
          f"{steps} steps, {compiles} compiled, compile {captured:.3f} s (CompileTime {metric:.3f} s), "
          f"loss {found['LOSS']}")
    return 0


def fail(message: str) -> int:
    print(f"installed wheel check failed: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
