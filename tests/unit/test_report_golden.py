"""One report per display: text, rich, HTML (the summary and the static page) and the panel's JSON show
the same step rows and the same warnings, for 26 captures recorded on this machine
(``tests/fixtures/captures``, made by its ``make_captures.py``). ``golden.json`` holds those rows,
warnings and reference texts; ``extension/test/golden.test.ts`` holds the TypeScript side to the same
file."""

from __future__ import annotations

import html
import importlib.util
import json
from pathlib import Path

import pytest

from xla_lab.capture.source_ref import ref_text
from xla_lab.view import static_html
from xla_lab.view.panel_model import of_report
from xla_lab.view.report import Report

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
GOLDEN = json.loads((HERE / "golden.json").read_text())


def _maker():
    spec = importlib.util.spec_from_file_location("make_captures", HERE / "make_captures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()
CAPTURES = MAKER.saved_captures()


def test_the_fixtures_are_there_and_the_golden_file_is_what_the_code_gives():
    assert len(CAPTURES) == 26 and set(GOLDEN["captures"]) == set(CAPTURES)
    assert MAKER.golden() == GOLDEN, "the report changed: remake golden.json (make_captures.py --golden) and review it"
    shown = {name: data for name, data in GOLDEN["captures"].items()}
    # the fixtures cover what the rows and warnings have to show
    assert any("(" in r["steps"] for d in shown.values() for r in d["rows"]), "a folded row"
    warnings = [w for d in shown.values() for w in d["warnings"]]
    for needle in ("mid-step sync", "bakes a", "CPU fallbacks", "the cell raised", "ran a different graph", "raised:"):
        assert any(needle in w for w in warnings), needle


@pytest.mark.parametrize("entry", GOLDEN["refs"], ids=lambda e: e["text"])
def test_one_reference_format(entry):
    assert ref_text(entry["ref"]) == entry["text"]


def _rich_text(report: Report) -> str:
    from rich.console import Console

    console = Console(record=True, width=100_000, file=open("/dev/null", "w"))
    console.print(report)
    return console.export_text()


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_every_renderer_shows_the_same_rows_and_warnings(name):
    capture, runs = CAPTURES[name]
    golden = GOLDEN["captures"][name]
    report = Report(capture, runs, max_rows=None)
    model = of_report(report)
    assert model["summary"]["rows"] == golden["rows"]
    assert model["summary"]["warnings"] == golden["warnings"]
    text, rich = report.text(), _rich_text(report)
    summary_html, page = report.html(), static_html.of_report(report)
    for row in golden["rows"]:
        where = "" if row["ref"] is None else ref_text(row["ref"])
        for shown in (text, rich):
            assert row["steps"] in shown and row["cause"] in shown and where in shown, (name, row["text"])
        for shown in (summary_html, page):
            assert html.escape(row["steps"]) in shown and html.escape(row["cause"]) in shown, (name, row["text"])
            assert html.escape(where) in shown
    for warning in golden["warnings"]:
        assert f"! {warning}" in text and f"! {warning}" in rich, (name, warning)
        assert html.escape(warning) in summary_html and html.escape(warning) in page, (name, warning)


def test_rendering_depends_only_on_its_inputs():
    """A capture renders the same whatever ran in the kernel since: prompts are an argument."""
    capture, runs = CAPTURES["train_loop_rerun"]

    class Moved:  # every cell is now shown at prompt 99
        def current(self, prompt, line, code):
            return 99

    plain = Report(capture, runs).text()
    assert Report(capture, runs).text() == plain and "[99]:" not in plain
    assert "[99]:3" in Report(capture, runs, prompts=Moved()).text()
