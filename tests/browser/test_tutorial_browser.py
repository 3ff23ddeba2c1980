"""Tutorial 1 as a person uses it in JupyterLab (Chromium, 1440x900): opened with its saved outputs, run,
then run again (Run All twice, without a restart).

Asserted: the graph of a cell panel and of the side panel's step view opens with labels at least 9
CSS px tall; the side panel scrolls nothing sideways; a quiet (``%%xla -q``) cell is listed; each
cell lists its saved run and its live run once each; a step opens in a main-area tab of its own and
leaves the notebook its width; after the second Run All every line reference (kernel lines, graph
node labels and details, in the cell panels and the side panel) names a prompt some cell shows now,
and a line in the live cell panel is a link to its cell. Screenshots go to
test-artifacts/browser-tutorial/ (``docs/screenshots.py`` takes the README's)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from jupyterlab_server import (RUN_ALL_TIMEOUT_MS, assert_legible, chromium_page, command, evaluate, jupyter_lab_with_extension,
                               open_in_app, open_notebook)
from test_labextension_browser import LABEXT, _open_sidebar, _wait_idle  # (skips as that module does)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser-tutorial"
TUTORIAL = ROOT / "notebooks" / "01_getting_started.ipynb"
NB = "tutorial_1.ipynb"
QUIET = "%%xla -q --name quiet_forward\nquiet_logits = model(x)"
REF = re.compile(r"\[(\d+)\]:\d+")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    work = tmp_path_factory.mktemp("lab-tutorial")
    nbdir = work / "notebooks"
    nbdir.mkdir()
    nb = json.loads(TUTORIAL.read_text())
    train = next(i for i, c in enumerate(nb["cells"]) if "".join(c["source"]).startswith("%%xla --name train"))
    nb["cells"].insert(train + 1, {"cell_type": "code", "execution_count": None, "id": "quiet-forward", "metadata": {},
                                   "outputs": [], "source": QUIET})
    (nbdir / NB).write_text(json.dumps(nb))
    with jupyter_lab_with_extension(work, nbdir, LABEXT, keep_log=ARTIFACTS / "server.log") as server:
        yield {**server, "dir": nbdir}


@pytest.fixture(scope="module")
def page(lab):
    with chromium_page({"width": 1440, "height": 900}, artifacts=ARTIFACTS, server_log=lab["log"]) as pg:
        yield pg


def _shot(target, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _cell_panel(page, name: str):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .xla-panel").filter(
        has=page.locator(".xla-title", has_text=f'"{name}"'))


def _prompts(page) -> set[int]:
    texts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputPrompt").all_inner_texts()
    return {int(m.group(1)) for t in texts for m in [re.search(r"\[(\d+)\]", t)] if m}


def _no_sideways_scroll(page) -> None:
    overflow = evaluate(page, """() => [...document.querySelectorAll('#xla-lab-sidebar, #xla-lab-sidebar *')]
        .filter((el) => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'hidden'
                        && el.tagName !== 'SELECT' && el.tagName !== 'OPTION')
        .map((el) => `${el.className} ${el.scrollWidth}>${el.clientWidth}`)""")
    assert not overflow, overflow


def _runs(side) -> list[dict]:
    return side.locator(".xla-lab-run").evaluate_all(
        "els => els.map(e => ({key: e.dataset.key, origin: e.dataset.origin, cell: e.closest('.xla-lab-cell').dataset.cellId,"
        " title: e.closest('.xla-lab-cell').querySelector('.xla-lab-cell-title').textContent}))")


def test_tutorial_1_in_jupyterlab(lab, page):
    try:
        _drive(lab, page)
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "30_last_page.png"), full_page=True)


def _drive(lab, page):
    open_notebook(page, lab, NB)
    side = _open_sidebar(page)
    page.wait_for_function("() => Number(document.querySelector('#xla-lab-sidebar')?.dataset.captures) >= 4", timeout=60_000)
    saved = _runs(side)
    assert saved and all(r["origin"] == "saved" for r in saved), saved

    # run it: every cell then has its saved run and its live run, each listed once
    command(page, "notebook:run-all-cells", timeout_ms=RUN_ALL_TIMEOUT_MS)
    _wait_idle(page)
    page.wait_for_timeout(1500)  # (the side panel reads outputs 250 ms after they change)
    runs = _runs(side)
    keys = [r["key"] for r in runs]
    assert len(keys) == len(set(keys)), runs
    by_cell: dict[str, list[str]] = {}
    for r in runs:
        by_cell.setdefault(r["cell"], []).append(r["origin"])
    for cell, origins in by_cell.items():
        if "quiet" in origins:
            continue
        assert sorted(origins) == ["live", "saved"], (cell, origins, runs)
    # the quiet cell: listed, though the notebook shows (and will save) no output for it
    quiet_runs = [r for r in runs if r["origin"] == "quiet"]
    assert len(quiet_runs) == 1 and "quiet_forward" in quiet_runs[0]["title"], runs
    quiet_cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").filter(has_text="quiet_logits = model(x)")
    assert quiet_cell.locator(".jp-OutputArea-output").count() == 0
    _no_sideways_scroll(page)
    _shot(side, "01_sidebar")

    # the train cell's panel: its graph opens legible
    train = _cell_panel(page, "train")
    train.locator(".xla-tab[data-tab='graph']").click()
    graph = train.locator(".xla-graph[data-rendered='svg']")
    graph.wait_for(state="attached", timeout=60_000)
    assert_legible(page, train.locator(".xla-graph"))
    _shot(train, "02_cell_graph")

    # a step opens in a tab of its own: the notebook keeps its width
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first
    width = notebook.bounding_box()["width"]
    train_cell = side.locator(".xla-lab-cell").filter(has_text="train")
    train_cell.locator(".xla-lab-run[data-origin='live'] .xla-lab-step").first.click()
    detail = page.locator("#xla-lab-detail[data-mode='step']")
    detail.locator(".xla-graph[data-rendered='svg']").wait_for(state="attached", timeout=60_000)
    main = page.locator("#jp-main-dock-panel").bounding_box()
    assert detail.bounding_box()["width"] >= 0.9 * main["width"], (detail.bounding_box(), main)
    assert_legible(page, detail.locator(".xla-graph"))
    _shot(page, "03_step_tab")
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab").filter(has_text=NB).first.click()
    notebook.wait_for(state="visible")
    assert abs(notebook.bounding_box()["width"] - width) <= 2, (notebook.bounding_box(), width)

    # the quiet run came with its steps only: opening one fetches its graphs from the kernel
    side.locator(".xla-lab-run[data-origin='quiet'] .xla-lab-step").first.click()
    quiet_view = page.locator("#xla-lab-detail[data-mode='step']")
    quiet_view.locator(".xla-graph[data-rendered='svg']").wait_for(state="attached", timeout=60_000)
    assert "quiet_forward" in quiet_view.locator(".xla-lab-view-head").inner_text()
    assert quiet_view.locator("g.node").count() > 3
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab").filter(has_text=NB).first.click()
    notebook.wait_for(state="visible")

    # Run All again (no restart): the graphs are cache hits traced in the first run's prompts
    first_prompts = _prompts(page)
    command(page, "notebook:run-all-cells", timeout_ms=RUN_ALL_TIMEOUT_MS)
    _wait_idle(page)
    page.wait_for_timeout(1500)
    now = _prompts(page)
    assert now and not now & first_prompts, (now, first_prompts)
    train = _cell_panel(page, "train")
    train.locator(".xla-tab[data-tab='fusion']").click()
    rows = train.locator("tr.xla-kernel-row")
    rows.first.wait_for(timeout=30_000)
    texts = rows.all_inner_texts()
    train.locator(".xla-tab[data-tab='graph']").click()
    train.locator(".xla-graph[data-rendered='svg']").wait_for(state="attached", timeout=60_000)
    texts += train.locator("g.node text").evaluate_all("els => els.map(e => e.textContent)")  # (SVG: no innerText)
    refs = {int(m.group(1)) for t in texts for m in REF.finditer(t)}
    assert refs and refs <= now, (sorted(refs), sorted(now))
    # the side panel's step view of the new run names current cells too
    side.locator(".xla-lab-cell").filter(has_text="train").locator(".xla-lab-run").last.locator(".xla-lab-step").first.click()
    detail = page.locator("#xla-lab-detail[data-mode='step']")
    detail.locator(".xla-tab[data-tab='fusion']").click()
    detail_refs = {int(m.group(1)) for t in detail.locator("tr.xla-kernel-row").all_inner_texts() for m in REF.finditer(t)}
    assert detail_refs and detail_refs <= now, (sorted(detail_refs), sorted(now))
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab").filter(has_text=NB).first.click()

    # in the live cell panel a kernel's line is a link to its cell
    train = _cell_panel(page, "train")
    train.locator(".xla-tab[data-tab='fusion']").click()
    row = train.locator("tr.xla-kernel-row").filter(has_text=REF).first
    row.click()
    link = train.locator(".xla-kernel-detail li.xla-source-link").filter(has_text=REF).first
    want = int(REF.search(link.inner_text()).group(1))
    link.click()
    page.locator(".xla-lab-line-mark").wait_for(timeout=10_000)
    marked = page.locator(".jp-Cell.xla-lab-source-cell .jp-InputPrompt").inner_text()
    assert f"[{want}]" in marked, (marked, want)
    _shot(page, "04_line_link")
    # and so is every other line reference of the panel: the steps' sync lines, the largest buffers'
    train.locator(".xla-tab[data-tab='summary']").click()
    sync_link = train.locator(".xla-steps .xla-source-link").first
    assert REF.fullmatch(sync_link.inner_text()), sync_link.inner_text()
    sync_link.click()
    page.wait_for_function("n => document.querySelector('.jp-Cell.xla-lab-source-cell .jp-InputPrompt')?.textContent.includes(n)",
                           arg=f"[{REF.fullmatch(sync_link.inner_text()).group(1)}]", timeout=10_000)
    train.locator(".xla-tab[data-tab='memory']").click()
    assert train.locator(".xla-buffers .xla-source-link").count() > 0
    assert not [e for e in page.errors if "xla" in e.lower() or "dialog" in e], page.errors


def _capture_outputs(notebook: Path) -> set[str]:
    """The run keys (cell|count|start) of the notebook's saved xla_lab outputs."""
    keys = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            payload = out.get("data", {}).get("application/vnd.xla-lab.capture+json")
            if payload is not None:
                k = payload["key"]
                keys.add(f"{k['cell_id']}|{k['execution_count']}|{k['started_at']}")
    return keys


def test_every_tutorials_saved_outputs_are_read(lab, page):
    """Each tutorial opened as saved (no cell run): the side panel reads every saved capture (validated by
    the schema-generated validator) and reports none it could not read; the cell panels on screen draw."""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        keys = _capture_outputs(notebook)
        if not keys:
            continue
        shutil.copy(notebook, lab["dir"] / notebook.name)
        open_in_app(page, lab, notebook.name)
        side = _open_sidebar(page)
        page.wait_for_function(f"() => Number(document.querySelector('#xla-lab-sidebar')?.dataset.captures) >= {len(keys)}",
                               timeout=60_000)
        listed = {r["key"] for r in _runs(side)}
        assert keys <= listed, (notebook.name, sorted(keys - listed))
        errors = side.locator(".xla-warning:visible").all_inner_texts()
        assert not errors, (notebook.name, errors)
        assert not page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .xla-lab-saved-note").count(), notebook.name
        drawn = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .xla-panel .xla-title")
        drawn.first.wait_for(timeout=60_000)
        # (a panel that cannot read its model says so in its alert; a cell that raised is a warning of its own)
        shown = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .xla-panel [role=alert]:visible").all_inner_texts()
        assert not shown, (notebook.name, shown)
        command(page, "application:close", timeout_ms=30_000)
