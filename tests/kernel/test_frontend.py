"""The names JupyterLab's extension calls in the kernel (``xla_lab/frontend.py``), called as the extension
calls them: the code is read out of the TypeScript source (``extension/src/lab/sidebar.ts``), its
arguments filled in as the browser fills them, and run as a silent execution. A rename on either side
fails here, not in the side panel. (``test_magics.py`` sends the same code to a real kernel.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

from IPython.utils.capture import capture_output

import xla_lab
from xla_lab import frontend

EXTENSION_SRC = Path(__file__).resolve().parents[2] / "extension" / "src"
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


def test_the_extension_calls_only_the_frontend_module_and_all_of_it():
    calls = extension_calls()
    assert calls, "no kernel calls found in extension/src: has the way they are written changed?"
    for file, module, fromlist, name in calls:
        assert module == "xla_lab.frontend", (file, module, name)
        assert json.loads(f"[{fromlist}]") == [name], (file, fromlist, name)
        assert name in frontend.ENTRY_POINTS and callable(getattr(frontend, name)), (file, name)
    assert {name for *_, name in calls} == set(frontend.ENTRY_POINTS)  # no entry point nobody calls
    # every execution the extension asks for is one of these calls (none bypasses the module)
    executes = sum(p.read_text().count("requestExecute(") for p in EXTENSION_SRC.rglob("*.ts"))
    assert executes == len(calls)


def test_the_code_string_is_filled_in_as_the_browser_fills_it():
    code = send_full_capture_code("a1b2-c3", 7, 1712345678.123456)
    assert code == ('__import__("xla_lab.frontend", fromlist=["send_full_capture"]).send_full_capture('
                    '"a1b2-c3", 7, 1712345678.123456)')
    assert ", None, " in send_full_capture_code('cell "quoted"', None, 1.5)


def test_the_side_panel_gets_a_quiet_runs_whole_capture_from_the_code_it_sends(ip):
    from xla_lab.view.panel import QUIET_MIME
    from xla_lab.view.saved_output import unpacked_payload

    assert ip.run_cell("%%xla -q --name asked_for\nimport torch, torch_xla\n"
                       "asked = (torch.ones(3, device=torch_xla.device()) * 5).sum()").success
    c = xla_lab.last()
    with capture_output() as out:  # as the kernel runs an execute request with silent: true
        result = ip.run_cell(send_full_capture_code(c.cell_id, c.execution_count, c.started_at),
                             store_history=False, silent=True)
    assert result.success, result.error_in_exec
    sent = [o for o in out.outputs if QUIET_MIME in o.data]
    assert len(sent) == 1 and sent[0].update and sent[0].transient["display_id"].startswith("xla-lab-quiet-")
    full = unpacked_payload(sent[0].data[QUIET_MIME])
    assert full["capture"]["graph_name"] == "asked_for" and full["capture"]["started_at"] == c.started_at
    assert full["graphs"] and full["capture"]["artifacts"] and not full.get("partial")

    with capture_output() as out:
        gone = ip.run_cell(send_full_capture_code("no-such-cell", 1, 0.0), store_history=False, silent=True)
    assert isinstance(gone.error_in_exec, LookupError) and "no longer keeps" in str(gone.error_in_exec)
    assert not [o for o in out.outputs if QUIET_MIME in o.data]
