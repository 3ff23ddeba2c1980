"""A ``%%xla`` cell accepts what a plain cell accepts, in a real Jupyter kernel: each body below runs as a
plain cell and as a ``%%xla`` cell of the same kernel, and what the user sees (streams, the value shown,
help pages, errors) is the same; the capture's lines are the lines the user wrote.

Found: ``!echo hi``, ``files = !ls /`` and ``%time ...`` inside ``%%xla`` failed with ``SyntaxError: invalid
syntax`` before anything ran (the magic parsed the raw cell; IPython transforms a cell first)."""

from __future__ import annotations

import re

import pytest

from kernels import Kernel

SETUP = """%load_ext xla_lab
import os, torch, torch_xla
t = torch.arange(6, dtype=torch.float32).to(torch_xla.device())"""


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        k.run(SETUP)
        yield k


def both(kernel, body: str, options: str = "-q"):
    """(the plain cell's execution, the %%xla cell's), the same body."""
    return kernel.run(body, ok=False), kernel.run(f"%%xla {options}\n{body}", ok=False)


def shown(ex) -> dict:
    """What the user sees of an execution: streams, the value shown, pages, the error's name and text."""
    result = ex.first("execute_result")
    pages = [p["data"]["text/plain"] for p in ex.reply["content"].get("payload", []) if p.get("source") == "page"]
    return {"stdout": ex.stdout(), "stderr": ex.stdout("stderr"), "status": ex.status, "ename": ex.ename,
            "value": result["content"]["data"]["text/plain"] if result else None, "pages": pages}


def steps(kernel) -> list[tuple]:
    """(sync_line, sync_code, cause) of the last capture's steps, in the kernel."""
    return [tuple(s) for s in kernel.value("[(s.sync_line, s.sync_code, s.sync_cause) for s in "
                                           "__import__('xla_lab').last().steps]")]


def test_shell_escapes_run_as_in_a_plain_cell(kernel):
    plain, xla = both(kernel, "!echo hi from the shell")
    assert shown(plain) == shown(xla) and shown(xla)["stdout"].strip() == "hi from the shell"
    plain, xla = both(kernel, "files = !echo one two\nprint(files)")
    assert shown(plain) == shown(xla) and "['one two']" in shown(xla)["stdout"]


def test_time_and_timeit_name_the_users_line(kernel):
    plain, xla = both(kernel, "\n%time y = (t + 1).sum().item()\ny")
    assert "Wall time" in shown(plain)["stdout"] and "Wall time" in shown(xla)["stdout"]
    assert shown(plain)["value"] == shown(xla)["value"] == "21.0" and xla.status == "ok"
    # (line 2 of the body: the leading blank line IPython drops still counts)
    assert steps(kernel)[0][:2] == (2, "%time y = (t + 1).sum().item()"), steps(kernel)
    assert ".item()" in steps(kernel)[0][2] and "timed exec" not in steps(kernel)[0][2]
    plain, xla = both(kernel, "%timeit -n1 -r1 (t * 2).sum().item()")
    for ex in (plain, xla):
        assert ex.status == "ok" and re.search(r"per loop \(mean ± std. dev. of 1 run, 1 loop each\)", ex.stdout())
    assert [s[:2] for s in steps(kernel)][0] == (1, "%timeit -n1 -r1 (t * 2).sum().item()")


def test_env_and_a_line_magic_on_the_first_line(kernel):
    plain, xla = both(kernel, "%env XLA_LAB_CELL_SYNTAX=7\nz = (t * 5).sum().item()\nprint(os.environ['XLA_LAB_CELL_SYNTAX'], z)")
    assert shown(plain) == shown(xla)
    assert shown(xla)["stdout"] == "env: XLA_LAB_CELL_SYNTAX=7\n7 75.0\n"
    assert steps(kernel)[0][:2] == (2, "z = (t * 5).sum().item()")


def test_help_pages_as_in_a_plain_cell(kernel):
    plain, xla = both(kernel, "t?")
    assert shown(plain) == shown(xla) and "Type:" in shown(xla)["pages"][0]
    magic = kernel.run("%xla?")  # the verbs' table is in the magic's help
    page = shown(magic)["pages"][0]
    for usage in ("%xla status", "%xla queue [status | pause", "%xla fit [STEP", "%xla help [VERB]"):
        assert usage in page, page


def test_the_value_shown_and_a_trailing_semicolon(kernel):
    plain, xla = both(kernel, "w = 3\nw * 2")
    assert shown(plain)["value"] == shown(xla)["value"] == "6"
    plain, xla = both(kernel, "w * 2;")
    assert shown(plain)["value"] is shown(xla)["value"] is None


def test_a_syntax_error_shows_as_a_plain_cells_does(kernel):
    for body in ("x = 1\nbroken = (", "!echo never\nx = = 2"):
        plain, xla = both(kernel, body)
        assert plain.ename == xla.ename == "SyntaxError"
        assert plain.evalue.split(" (")[0] == xla.evalue.split(" (")[0]  # (the message; then the cell's file and line)
        tb_plain, tb_xla = (ANSI.sub("", "\n".join(e.reply["content"]["traceback"])) for e in (plain, xla))
        line = body.splitlines()[-1]
        assert line in tb_xla and "^" in tb_xla
        # (the %%xla line counts: the error is one line further down the cell)
        at_plain = int(re.search(r"line (\d+)", tb_plain).group(1))
        assert re.search(rf"Cell In\[\d+\], line {at_plain + 1}\b", tb_xla), tb_xla
        assert "magics.py" not in tb_xla and "cell_code.py" not in tb_xla
    assert "never" not in shown(xla)["stdout"]  # (nothing ran)


def test_a_traceback_after_rewritten_lines_names_the_users_lines(kernel):
    body = "\n!echo one \\\n   two\nu = (t * 7).sum().item()\nraise ValueError('from line 5')"
    ex = kernel.run(f"%%xla -q\n{body}", ok=False)
    tb = ANSI.sub("", "\n".join(ex.reply["content"]["traceback"]))
    assert ex.ename == "ValueError" and "one two" in ex.stdout()
    assert re.search(r"----> 5 raise ValueError\('from line 5'\)", tb), tb
    assert "      4 u = (t * 7).sum().item()" in tb  # (the lines around it are the user's)
    assert steps(kernel)[0][:2] == (4, "u = (t * 7).sum().item()")
    assert kernel.value("__import__('xla_lab').last().error").startswith("ValueError")


def test_top_level_await_is_refused_with_a_line_that_says_why(kernel):
    ex = kernel.run("%%xla -q\nimport asyncio\nawait asyncio.sleep(0)", ok=False)
    assert ex.ename == "SyntaxError" and "does not run inside a %%xla cell" in ex.evalue


ANSI = re.compile(r"\x1b\[[0-9;]*m")
