"""Terminal IPython (prompt_toolkit, under a pseudo-terminal) with a precompile job running while the
prompt waits: the next cell waits for the job, and its output and every later cell's output appear.

Found before: the job's process-wide ``redirect_stdout`` saved prompt_toolkit's ``StdoutProxy`` (the
prompt swaps ``sys.stdout`` while it is shown) and restored it after the prompt had closed, so the
waiting cell's output and everything printed for the rest of the session vanished."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

SETUP = """
import torch, torch_xla, xla_lab
dev = torch_xla.device()
torch.manual_seed(0)
layers = []
for _ in range(64):  # a compile of a few seconds, to type the next cell during
    layers += [torch.nn.Linear(88, 88), torch.nn.GELU()]
m = torch.nn.Sequential(*layers, torch.nn.Linear(88, 4)).to(dev)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

@xla_lab.step
def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

x, y = torch.randn(8, 88).to(dev), torch.randint(0, 4, (8,)).to(dev)
print("dump dir:", xla_lab.session.current().runtime.dump_dir)
"""


@pytest.mark.slow
def test_a_cell_typed_during_a_job_and_every_later_cell_show_their_output(tmp_path):
    setup = tmp_path / "setup.py"
    setup.write_text(SETUP)
    env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"), TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1",
               IPYTHONDIR=str(tmp_path / "ipython"))
    shell = pexpect.spawn(sys.executable, ["-m", "IPython", "--no-banner", "--colors=nocolor", "--no-confirm-exit"],
                          env=env, encoding="utf-8", dimensions=(50, 250), timeout=60)
    shell.logfile_read = open(tmp_path / "transcript.txt", "w")
    try:
        shell.expect(r"In \[1\]:")
        shell.sendline("%load_ext xla_lab")
        shell.expect(r"In \[2\]:")
        shell.sendline(f"%run -i {setup}")
        shell.expect(r"dump dir: (\S+)")
        dump = Path(shell.match.group(1).strip())
        shell.expect(r"In \[3\]:")
        # A plain cell runs the marked step: once the kernel is idle the queue compiles the steady-state
        # step (the optimizer now has state) while the prompt is shown.
        started = time.time()
        shell.sendline("loss = train_step(m, opt, x, y); torch_xla.sync(); print('first', 'step', 'done')")
        shell.expect("first step done")
        shell.expect(r"In \[4\]:")
        deadline = time.time() + 120
        while not any(p.stat().st_mtime >= started for p in dump.glob("*.precompile_train_step.*before_optimizations.txt")):
            assert time.time() < deadline, "the precompile job never started compiling"
            time.sleep(0.01)
        shell.sendline("print('during', 'the job'); w = m[0].weight.sum(); torch_xla.sync()")
        shell.expect("waiting for the precompile job")
        shell.expect("during the job")
        shell.expect(r"In \[5\]:")
        shell.sendline("print('after', 'the job')")
        shell.expect("after the job")
        shell.expect(r"In \[6\]:")
        shell.sendline("6 * 7")
        shell.expect(r"Out\[6\]:\S* *\S*42")
        shell.expect(r"In \[7\]:")
        shell.sendline("import sys; print('to', 'stderr', file=sys.stderr)")
        shell.expect("to stderr")
        shell.expect(r"In \[8\]:")
        shell.sendline("%xla queue")
        shell.expect("compiled, unused")  # (it returns at once: it need not wait for jobs)
        shell.expect(r"In \[9\]:")
        shell.sendline("exit")
        shell.expect(pexpect.EOF)
    finally:
        shell.close(force=True)
