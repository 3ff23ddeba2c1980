"""A real Jupyter kernel for tests (ipykernel over ZMQ, driven with jupyter_client): every iopub
message is kept with its parent request and the time it arrived, so a test can say which cell each
output went to and when."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


@dataclass
class Execution:
    msg_id: str
    sent_at: float
    reply: dict | None = None
    idle_at: float | None = None  # when its kernel status went back to idle
    messages: list[dict] = field(default_factory=list)  # iopub messages whose parent is this request

    @property
    def status(self) -> str | None:
        return None if self.reply is None else self.reply["content"]["status"]

    @property
    def ename(self) -> str | None:
        return None if self.reply is None else self.reply["content"].get("ename")

    @property
    def evalue(self) -> str:
        return "" if self.reply is None else self.reply["content"].get("evalue", "")

    def stdout(self, name: str = "stdout") -> str:
        return "".join(m["content"]["text"] for m in self.messages
                       if m["msg_type"] == "stream" and m["content"]["name"] == name)

    def first(self, msg_type: str) -> dict | None:
        return next((m for m in self.messages if m["msg_type"] == msg_type), None)


class Kernel:
    """``with Kernel() as k: k.run("x = 1")``. ``k.all`` holds every iopub message seen, in order."""

    def __init__(self, env: dict | None = None, keep: bool = True):
        """``keep=False`` (long runs with big outputs): keep only stream and error messages, and forget
        an execution once it is waited for."""
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(
            kernel_name="python3", env=dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"), **(env or {})))
        self.keep = keep
        self.all: list[dict] = []
        self.executions: dict[str, Execution] = {}

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def submit(self, code: str) -> Execution:
        """Send an execute request and return at once."""
        msg_id = self.kc.execute(code)
        ex = self.executions[msg_id] = Execution(msg_id, time.time())
        return ex

    def _read(self, timeout: float) -> dict:
        msg = self.kc.get_iopub_msg(timeout=max(0.1, timeout))
        msg["received_at"] = time.time()
        small = msg["msg_type"] in ("stream", "error", "status")
        if self.keep:
            self.all.append(msg)
        parent = self.executions.get(msg["parent_header"].get("msg_id"))
        if parent is not None:
            if self.keep or small:
                parent.messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                parent.idle_at = msg["received_at"]
        return msg

    def read_until(self, predicate, timeout: float = 120) -> dict:
        """Read iopub until a message satisfies ``predicate`` (and return it)."""
        deadline = time.time() + timeout
        while True:
            msg = self._read(deadline - time.time())
            if predicate(msg):
                return msg

    def wait(self, ex: Execution, timeout: float = 300) -> Execution:
        """Read iopub until ``ex``'s kernel status goes idle, then its reply."""
        deadline = time.time() + timeout
        while ex.idle_at is None:
            self._read(deadline - time.time())
        while ex.reply is None:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.time()))
            parent = reply["parent_header"].get("msg_id")
            if parent in self.executions:
                self.executions[parent].reply = reply
        if not self.keep:
            self.executions.pop(ex.msg_id, None)
        return ex

    def run(self, code: str, timeout: float = 300, ok: bool = True) -> Execution:
        ex = self.wait(self.submit(code), timeout)
        if ok and ex.status != "ok":
            tb = "\n".join(ex.reply["content"].get("traceback", []))
            raise AssertionError(f"cell failed: {ex.ename}: {ex.evalue}\n{tb}\n{ex.stdout('stderr')}")
        return ex

    def value(self, expression: str):
        """The value of a Python literal expression evaluated in the kernel."""
        import ast

        ex = self.run(f"print(repr({expression}))")
        return ast.literal_eval(ex.stdout().strip().splitlines()[-1])

    def interrupt(self) -> None:
        self.km.interrupt_kernel()

    def rss_kb(self, field: str = "VmRSS") -> int:
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0
