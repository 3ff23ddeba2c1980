"""The %xla line magic, %%xla options and the summary views."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
from IPython.utils.capture import capture_output

import xla_lab
from xla_lab.view.report import Report, to_html, to_rich, to_text


@pytest.fixture(scope="module")
def sv(ip):
    """The device tensor ``sv`` the cells of several tests read."""
    assert ip.run_cell("import torch, torch_xla\nsv = torch.ones(6, 5).to(torch_xla.device())").success


@pytest.fixture
def item_capture(ip, sv):
    """A %%xla cell run just now that reads a value (``.item()``): ``xla_lab.last()`` in the test."""
    assert ip.run_cell("%%xla -q\nsv_item = (sv * 2).sum().item()").success
    return xla_lab.last()


def test_summary_is_displayed_as_text_and_html(ip):
    ip.run_cell("import torch, torch_xla\nsv = torch.ones(6, 5).to(torch_xla.device())")
    with capture_output() as out:
        ip.run_cell("%%xla --name shown\nsv2 = (sv * 3).sum(0)")
    shown = [o for o in out.outputs if "text/plain" in o.data]  # (a slow compile adds a progress widget)
    assert len(shown) == 1
    bundle = shown[0].data
    # the panel: its widget view when the front end is built, the capture payload, text and HTML
    assert set(bundle) - {"application/vnd.jupyter.widget-view+json"} == {
        "text/plain", "text/html", "application/vnd.xla-lab.capture+json"}
    assert bundle["text/plain"].startswith('xla_lab cell[')
    assert '"shown": 1 step, 1 compiled, 0 cache hits' in bundle["text/plain"]
    assert "<table>" in bundle["text/html"]


def test_quiet_displays_nothing(ip, sv):
    with capture_output() as out:
        ip.run_cell("%%xla -q\nsv3 = sv + 1")
    assert out.outputs == [] and out.stdout == ""


def test_user_text_is_escaped_in_html(ip, sv):
    ip.run_cell("%%xla -q\nxss = sv * 2\nv = xss.sum().item()  # <img src=x onerror=alert(1)>")
    c = xla_lab.last()
    page = to_html(c)
    assert "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img src=x onerror=alert(1)>" in to_text(c)  # plain text keeps it verbatim


def test_rich_rendering(ip, item_capture):
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(Report(xla_lab.last()))
    text = console.export_text()
    assert "xla_lab cell" in text and ".item()" in text
    assert to_rich(xla_lab.last()) is not None


def test_line_magic_status_history_show_clear(ip, item_capture):
    with capture_output() as out:
        ip.run_line_magic("xla", "status")
    assert "device" in out.stdout and "CPU" in out.stdout
    assert "HLO dump (before/after optimization)     on" in out.stdout
    assert "work directory" in out.stdout
    import torch
    import torch_xla
    from torch_xla import version

    rows = [line.split() for line in out.stdout.splitlines()]
    assert ["torch_xla", torch_xla.__version__] in rows and ["torch", str(torch.__version__)] in rows
    assert version.__xla_gitrev__[:12] in out.stdout
    with capture_output() as out:
        ip.run_line_magic("xla", "history")
    assert "compiled" in out.stdout and len(out.stdout.splitlines()) == len(xla_lab.history()) + 1
    with capture_output() as out:
        ip.run_line_magic("xla", "show 0")
    assert out.outputs and "xla_lab cell" in out.outputs[0].data["text/plain"]
    result = ip.run_cell("%xla show 99999")
    assert "no capture 99999" in str(result.error_in_exec)
    result = ip.run_cell("%xla frobnicate")
    assert "unknown %xla verb" in str(result.error_in_exec)
    saved = list(xla_lab.history())
    with capture_output() as out:
        ip.run_line_magic("xla", "clear")
    assert "cleared" in out.stdout and xla_lab.history() == []
    from xla_lab import session

    session.current().history.extend(saved)  # keep the rest of the suite's history intact


def _run_marked_step(ip, name: str, dim: int) -> None:
    """Define ``@xla_lab.step`` ``name(x)`` in the shell and run it once on a (2, ``dim``) tensor."""
    assert ip.run_cell(f"""
import torch, torch_xla, xla_lab
@xla_lab.step
def {name}(x):
    return (x * 2).sum()
{name}(torch.ones(2, {dim}).to(torch_xla.device()))
torch_xla.sync()
""").success


def _xla_callbacks(ip) -> dict[str, int]:
    """How many of each IPython event's callbacks are xla_lab's (the session's hooks)."""
    from xla_lab import hooks

    mine = (hooks.ForegroundGate, hooks.CellTracker)
    counts = {event: sum(isinstance(getattr(cb, "__self__", None), mine) for cb in cbs)
              for event, cbs in ip.events.callbacks.items()}
    return {event: n for event, n in counts.items() if n}


def test_unload_and_reload(ip, fresh_dim):
    """%unload_ext takes every hook off (and pauses the queue); %load_ext gives a working workbench: the
    hooks once each, the queue working, a %%xla cell captured and shown with its panel kept live."""
    from xla_lab import session

    before = _xla_callbacks(ip)
    assert before == {"pre_execute": 2, "pre_run_cell": 1, "post_run_cell": 1, "post_execute": 1}, before
    ip.run_line_magic("unload_ext", "xla_lab")
    assert xla_lab.queue().paused  # nothing would tell a job to stop for a cell
    assert _xla_callbacks(ip) == {} and session.current().hooks.gate not in ip.ast_transformers
    result = ip.run_cell("%xla status")
    assert result.error_in_exec is not None or result.error_before_exec is not None
    ip.run_line_magic("load_ext", "xla_lab")
    ip.run_line_magic("load_ext", "xla_lab")  # (twice: still once each)
    assert _xla_callbacks(ip) == before
    assert not xla_lab.queue().paused  # found: a reloaded extension left the queue paused for good
    with capture_output() as out:
        ip.run_line_magic("xla", "status")
    assert "xla_lab status" in out.stdout
    panels = len(session.current().panels)
    with capture_output() as out:
        assert ip.run_cell(f"%%xla --name after_reload\nimport torch, torch_xla\nreloaded = (torch.ones(3, {fresh_dim}).to(torch_xla.device()) * 2).sum()").success
    assert xla_lab.last().graph_name == "after_reload" and xla_lab.last().compiles == 1
    assert any("text/plain" in o.data for o in out.outputs)
    from xla_lab.view.panel import FRONTEND_BUILT

    assert len(session.current().panels) == panels + FRONTEND_BUILT


def test_clear_leaves_no_capture_panel_queue_job_or_profile(ip, fresh_dim):
    """%xla clear: no capture, stored graph, live panel, queue job, raw profile or fit is left; the
    settings and choices stay, and the next cell is captured as the first."""
    from xla_lab import session

    s = session.current()
    _run_marked_step(ip, "clear_step", fresh_dim)
    saved, save_choice = list(xla_lab.history()), s.save
    with capture_output():
        assert ip.run_cell(f"%%xla --profile\ncleared_y = (torch.ones(4, {fresh_dim}).to(torch_xla.device()) + 1).sum()").success
        ip.run_line_magic("xla", "queue pause")
        ip.run_line_magic("xla", f"queue add clear_step x=8x{fresh_dim}")
    assert xla_lab.history() and s.store and s.raw_profile(xla_lab.last()) is not None
    assert [j for j in s.queue.jobs if j.state == "pending"]
    from xla_lab.view.panel import FRONTEND_BUILT

    assert len(s.panels) >= FRONTEND_BUILT
    with capture_output() as out:
        ip.run_line_magic("xla", "clear")
    assert "cleared" in out.stdout and "queue jobs" in out.stdout
    assert xla_lab.history() == [] and len(s.store) == 0 and s._profiles == [] and s.layer_calls == {}
    assert s.queue.jobs == [] and len(s.panels) == 0 and s.fits == []
    assert s.save == save_choice and s.queue.paused  # choices are not reset
    ip.run_line_magic("xla", "queue resume")
    with capture_output():
        assert ip.run_cell(f"%%xla -q\nafter_clear = (torch.ones(5, {fresh_dim}).to(torch_xla.device()) * 3).sum()").success
    assert len(xla_lab.history()) == 1
    s.history[:0] = saved  # keep the rest of the suite's history intact
    s.queue.marked.pop("clear_step", None)


def test_loading_after_importing_torch_xla_keeps_source_lines():
    """``import torch_xla`` before ``%load_ext xla_lab`` (nothing run yet): torch_xla read XLA_IR_DEBUG
    at import, before xla_lab set it, so traced ops would have no source lines (a plain cell's
    ``model.to(device)`` had none in the memory view); loading turns them on."""
    script = textwrap.dedent("""
        import os
        for name in ("XLA_IR_DEBUG", "XLA_HLO_DEBUG"):
            os.environ.pop(name, None)
        import torch, torch_xla
        assert not torch_xla._XLAC._get_ir_debug()
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "xla_lab")
        print("IR_DEBUG", torch_xla._XLAC._get_ir_debug())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "IR_DEBUG True" in proc.stdout


def test_loading_too_late_explains_itself(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        os.environ["PJRT_DEVICE"] = "CPU"
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        # The runtime is up and has run a graph before the extension is loaded.
        ip.run_cell("import torch, torch_xla\\nt = torch.ones(3).to(torch_xla.device()) * 2\\ntorch_xla.sync()")
        ip.run_line_magic("load_ext", "xla_lab")
        ip.run_cell("%%xla -q\\nu = (t + 1) * 3")
        import xla_lab
        c = xla_lab.last()
        print("STEPS", len(c.steps), c.steps[0].cache, c.steps[0].timings["execute_s"] is not None)
        print("NOTES", c.notes)
        ip.run_line_magic("xla", "status")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "XLA runtime had already started" in proc.stderr
    assert "HLO before/after optimization" in proc.stderr
    assert "%load_ext xla_lab" in proc.stderr and "restart the kernel" in proc.stderr
    # Still useful: the step is seen from metrics with its timings.
    assert "STEPS 1 miss True" in proc.stdout
    assert "HLO dump (before/after optimization)     OFF" in proc.stdout


def test_capture_knows_its_cell_number_and_id(ip, sv):
    # As in a notebook: the cell is stored in history and IPython numbers it before running it.
    result = ip.run_cell("%%xla -q\nnumbered = sv * 5", store_history=True, cell_id="cell-abc")
    assert result.success
    c = xla_lab.last()
    assert c.execution_count == result.execution_count
    assert c.cell_id == "cell-abc"
    assert c.graph_name == f"cell_{result.execution_count}"


def test_usage_mistakes_are_one_line_errors(ip):
    """Found: each usage mistake printed a clear line and then a traceback into magics.py."""
    from IPython.core.error import UsageError

    for line, message in [("%xla frobnicate", "unknown %xla verb 'frobnicate'"),
                          ("%xla show notanumber", "usage: %xla show [N]"),
                          ("%xla report", "usage: %xla report FILE.html"),
                          ("%xla report /no/such/dir/page.html", "cannot write /no/such/dir/page.html"),
                          ("%xla queue frob", "invalid choice: 'frob'"),
                          ("%xla queue add", "%xla queue add STEP"),
                          ("%xla queue add no_such_step x=4", "no marked step named 'no_such_step'"),
                          ("%%xla extra words\nx = 1", "unrecognized arguments: extra words; usage: %%xla ")]:
        with capture_output() as out:
            result = ip.run_cell(line)
        err = result.error_in_exec
        assert isinstance(err, UsageError) and message in str(err), (line, err)
        shown = out.stdout + out.stderr
        assert message in shown and "Traceback" not in shown and "magics.py" not in shown, shown


def test_a_shape_that_cannot_be_is_refused_when_added(ip, fresh_dim):
    """Found: ``%xla queue add train_step x=-4x8`` was accepted and failed later, in the job."""
    from IPython.core.error import UsageError

    _run_marked_step(ip, "shape_step", fresh_dim)
    jobs = len(xla_lab.queue().jobs)
    for line, message in [(f"%xla queue add shape_step x=-4x{fresh_dim}", "a dimension is a positive integer"),
                          ("%xla queue add shape_step x=4xQ", "cannot read 'x=4xQ'"),
                          ("%xla queue add shape_step y=4", "has no tensor argument y")]:
        with capture_output():
            result = ip.run_cell(line)
        assert isinstance(result.error_in_exec, UsageError) and message in str(result.error_in_exec), result.error_in_exec
    assert len(xla_lab.queue().jobs) == jobs
    xla_lab.queue().marked.pop("shape_step", None)


def test_a_cell_that_does_not_parse_shows_its_line_only(ip):
    """Found: a %%xla cell with a syntax error showed frames of magics.py and ast.py."""
    with capture_output() as out:
        result = ip.run_cell("%%xla\nnever_assigned_unparsed = 1\nbroken = (\n")
    err = result.error_before_exec  # as for a plain cell: nothing ran
    with capture_output():
        plain = ip.run_cell("never_assigned_unparsed = 1\nbroken = (\n").error_before_exec
    assert isinstance(err, SyntaxError) and err.lineno == 3 and err.msg == plain.msg  # ("incomplete input")
    shown = out.stdout + out.stderr
    assert "broken = (" in shown and "^" in shown and f"SyntaxError: {plain.msg}" in shown
    assert re.search(r"Cell In\[\d+\], line 3", shown), shown
    for frame in ("magics.py", "ast.py", "interactiveshell.py", "Traceback"):
        assert frame not in shown, shown
    assert "never_assigned_unparsed" not in ip.user_ns


def test_an_empty_interrupt_message_reads_well(ip):
    result = ip.run_cell("%%xla -q\nraise KeyboardInterrupt")
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert xla_lab.last().error == "KeyboardInterrupt"


def test_a_quiet_cell_reaches_the_side_panel_and_leaves_no_output():
    """In a real kernel, ``%%xla -q`` displays nothing, but sends its capture for JupyterLab's side panel
    as an update of a display id no output has (front ends apply updates to existing displays only, so
    the notebook keeps nothing): its steps and summary, the rest when the side panel asks for it (a
    step of it opened); a cell that is not quiet sends no such message."""
    from kernels import Kernel
    from frontend_calls import run_silently, send_full_capture_code

    from xla_lab.view.panel import QUIET_MIME
    from xla_lab.view.saved_output import unpacked_payload

    with Kernel() as k:
        k.run("%load_ext xla_lab\nimport torch, torch_xla\nqx = torch.ones(3, device=torch_xla.device())")
        quiet = k.run("%%xla -q --name hushed\nqy = (qx * 2).sum()")
        shown = k.run("%%xla --name shown\nqz = (qx * 3).sum()")
        # the side panel opens a step of the quiet run: it asks for the rest (a silent execution)
        msg = quiet.first("update_display_data")
        light = msg["content"]["data"][QUIET_MIME]
        key = light["capture"]
        # (the very code the extension sends, as it sends it: tests/kernel/test_frontend.py)
        full_msg = run_silently(k, send_full_capture_code(key["cell_id"], key["execution_count"], key["started_at"])
                                ).first("update_display_data")
        gone = run_silently(k, send_full_capture_code("no-such-cell", 1, 0.0))
    kinds = [m["msg_type"] for m in quiet.messages if m["msg_type"] not in ("status", "execute_input")]
    assert kinds == ["update_display_data"], kinds
    assert msg["content"]["transient"]["display_id"].startswith("xla-lab-quiet-")
    assert set(msg["content"]["data"]) == {QUIET_MIME}
    # quiet costs little: steps and summary only (a 12-layer model's graphs took 0.6 s to build and pack)
    assert light["partial"] is True and light["graphs"] == {} and light["capture"]["artifacts"] == {}
    assert light["capture"]["graph_name"] == "hushed" and len(light["capture"]["steps"]) == 1
    assert len(json.dumps(light)) < 20_000
    full = unpacked_payload(full_msg["content"]["data"][QUIET_MIME])
    assert full["capture"]["execution_count"] == key["execution_count"] and full["graphs"] and not full.get("partial")
    assert full["capture"]["artifacts"] and full_msg["content"]["transient"]["display_id"].startswith("xla-lab-quiet-")
    assert gone.ename == "LookupError" and "no longer keeps" in gone.evalue
    assert quiet.stdout() == "" and quiet.stdout("stderr") == ""
    assert not any(QUIET_MIME in (m["content"].get("data") or {}) for m in shown.messages)
    assert shown.first("display_data") is not None


def test_every_verb_given_a_bad_argument_shows_one_line(ip):
    """``%xla VERB`` with a bad argument: one UsageError line naming the verb's usage, no traceback."""
    from IPython.core.error import UsageError
    from unit.test_magics import BAD

    for name, line in BAD.items():
        with capture_output() as out:
            result = ip.run_cell(f"%xla {line}")
        err = result.error_in_exec
        assert isinstance(err, UsageError) and f"usage: %xla {name}" in str(err), (line, err)
        assert (out.stdout + out.stderr).strip() == f"UsageError: {err}", out.stderr


def test_help_lists_the_verbs_and_explains_one(ip):
    from xla_lab import verbs

    with capture_output() as out:
        ip.run_line_magic("xla", "help")
    assert all(v.usage() in out.stdout for v in verbs.TABLE.values())
    with capture_output() as out:
        ip.run_line_magic("xla", "help queue")
    assert out.stdout.startswith(verbs.TABLE["queue"].summary)
    assert "usage: %xla queue [status | pause | resume | clear | run | add STEP ARG=8x128 ...]" in out.stdout
    assert "ARG=8x128 per tensor argument" in out.stdout


def test_a_cell_runs_what_a_plain_cell_runs_in_terminal_ipython(ip, sv):
    """The same as tests/kernel/test_cell_syntax.py (a real Jupyter kernel), in the terminal shell."""
    import io
    from contextlib import redirect_stdout

    with capture_output() as out:
        result = ip.run_cell("%%xla -q\nterm_files = !echo one two\n%time term_y = (sv * 4).sum().item()\n"
                             "%env XLA_LAB_TERMINAL=1")
    assert result.success, result.error_in_exec
    assert ip.user_ns["term_files"] == ["one two"] and ip.user_ns["term_y"] == 120.0
    assert "Wall time" in out.stdout and "XLA_LAB_TERMINAL=1" in out.stdout
    assert [(s.sync_line, s.sync_code) for s in xla_lab.last().steps][0] == (2, "%time term_y = (sv * 4).sum().item()")
    page = io.StringIO()
    with redirect_stdout(page):
        assert ip.run_cell("%%xla -q\nsv?").success
    assert "Type:" in page.getvalue()
