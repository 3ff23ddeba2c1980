"""The replacements nbval applies before comparing a notebook's saved outputs with a fresh run
(``notebooks/nbval_sanitize.cfg``): every rule in the file is one nbval reads (its parser wants
``replace: `` with the space, even when the replacement is empty), and the rules for what changes from
run to run leave the rest of a summary to compare."""

from __future__ import annotations

import re
from pathlib import Path

from nbval.plugin import get_sanitize_patterns

CFG = Path(__file__).resolve().parents[2] / "notebooks" / "nbval_sanitize.cfg"


def _sanitize(text: str) -> str:
    for regex, replace in get_sanitize_patterns(CFG.read_text()):  # (in the file's order, as nbval does)
        text = re.sub(regex, replace, text)
    return text


def test_every_rule_in_the_file_is_read_by_nbval():
    sections = [line for line in CFG.read_text().splitlines() if line.startswith("[")]
    assert len(get_sanitize_patterns(CFG.read_text())) == len(sections)


def test_a_sync_s_wait_is_compared_as_if_absent():
    """torch_xla's donation race: the totals line has the clause in one run and not in the next."""
    plain = "compile 0.483 s | execute 0.458 s | trace 0.012 s | transfer 0.000 s"
    waited = plain + " | syncs waited 0.585 s for their step's execution"
    assert _sanitize(waited) == _sanitize(plain) == "compileT | executeT | traceT | transferT"
    html = f"<div>{waited.replace(chr(39), '&#x27;')}</div><table>"
    assert _sanitize(html) == "<div>compileT | executeT | traceT | transferT</div><table>"


def test_xla_s_own_log_lines_are_dropped():
    line = "2026-12-03 10:57:01.123456: W external/xla/xla/service/cpu/cpu_compiler.cc:123] slow\n"
    assert _sanitize("before\n" + line + "after") == "before\nafter"
