"""The names JupyterLab's extension calls in the kernel (``xla_lab/frontend.py``), called as the extension
calls them: the code is read out of the TypeScript source (``extension/src/lab/sidebar.ts``), its
arguments filled in as the browser fills them, and run as a silent execution. A rename on either side
fails here, not in the side panel. (``test_magics.py`` sends the same code to a real kernel.)"""

from __future__ import annotations

import json

from IPython.utils.capture import capture_output

import xla_lab
from xla_lab import frontend

from frontend_calls import EXTENSION_SRC, extension_calls, send_full_capture_code

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
