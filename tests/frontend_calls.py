"""How JupyterLab's extension calls the kernel, read out of its TypeScript source (``extension/src``): the
code strings it sends and their arguments as the browser fills them in. A module of its own, shared by
``tests/kernel/test_frontend.py`` and ``tests/kernel/test_magics.py`` (test modules are not importable by
name)."""

from __future__ import annotations

import json
import re
from pathlib import Path

EXTENSION_SRC = Path(__file__).resolve().parents[1] / "extension" / "src"
SIDEBAR = EXTENSION_SRC / "lab" / "sidebar.ts"

# Each kernel call the extension sends: __import__("MODULE", fromlist=[...]).NAME(
CALL = re.compile(r'__import__\("([\w.]+)", fromlist=\[([^\]]*)\]\)\.(\w+)\(')
# sidebar.ts: const code = `...` + `...`;  (template literals, joined)
CODE = re.compile(r"const code = ((?:`[^`]*`\s*\+?\s*)+);")


def extension_calls() -> list[tuple[str, str, str, str]]:
    """(file, module, fromlist, name) of every kernel call in the extension's source."""
    return [(str(p.relative_to(EXTENSION_SRC)), *m.groups())
            for p in sorted(EXTENSION_SRC.rglob("*.ts")) for m in CALL.finditer(p.read_text())]


# The browser's expressions in the code string, and what each makes of the run's key (JSON literals are
# Python literals here, as the extension's comment says: JSON.stringify writes a float as repr does).
ARGUMENTS = {
    "JSON.stringify(c.cell_id)": lambda key: json.dumps(key["cell_id"]),
    'c.execution_count == null ? "None" : String(Math.trunc(c.execution_count))':
        lambda key: "None" if key["execution_count"] is None else str(int(key["execution_count"])),
    "JSON.stringify(c.started_at)": lambda key: json.dumps(key["started_at"]),
}


def send_full_capture_code(cell_id: str, execution_count: int | None, started_at: float) -> str:
    """The code sidebar.ts sends to ask for a quiet run's whole capture, for this key."""
    found = CODE.findall(SIDEBAR.read_text())
    assert len(found) == 1, f"sidebar.ts should build one kernel code string, found {len(found)}"
    template = "".join(re.findall(r"`([^`]*)`", found[0]))
    key = {"cell_id": cell_id, "execution_count": execution_count, "started_at": started_at}

    def fill(m: re.Match) -> str:
        expression = m.group(1).strip()
        assert expression in ARGUMENTS, f"sidebar.ts sends an argument this test does not know: {expression}"
        return ARGUMENTS[expression](key)

    return re.sub(r"\$\{([^}]*)\}", fill, template)


def run_silently(kernel, code: str):
    """Run ``code`` in a real kernel (``tests/kernels.py``) with the options the extension's execute
    request has: nothing of it is shown or kept."""
    import time

    from kernels import Execution

    msg_id = kernel.kc.execute(code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False)
    ex = kernel.executions[msg_id] = Execution(msg_id, time.time())
    return kernel.wait(ex)
