"""Screenshots of the cell panel in each tutorial, for the README (docs/screenshots/*.png).

Starts JupyterLab on a copy of notebooks/, runs each tutorial in Debian's chromium, opens one panel
per notebook on the tab that notebook is about, and saves a picture of it. Run it after the panel
changes: `.venv/bin/python docs/screenshots.py [NOTEBOOK ...]` (a few minutes: every notebook, or the
ones named, runs once).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from jupyterlab_server import chromium_page, jupyter_lab, open_notebook, run_all_cells  # noqa: E402  (the browser tests' own set-up)
# notebook -> (panel name, tab, picture)
SHOTS = {
    "01_getting_started.ipynb": ("train", "graph", "01_graph.png"),
    "02_fusion.ipynb": ("mlp_block", "fusion", "02_fusion_map.png"),
    "03_recompilation.ipynb": ("predict", "summary", "03_recompile_reason.png"),
    "04_precompile_queue.ipynb": ("epoch", "summary", "04_precompiled.png"),
    "05_transformer_memory.ipynb": ("finetune", "memory", "05_memory.png"),
    "06_spmd.ipynb": ("sharded_train", "sharding", "06_sharding.png"),
    "07_profiling.ipynb": ("train", "profile", "07_profile.png"),
    "08_compile_time.ipynb": ("rnn_loop", "compile", "08_compile.png"),
}


def main(only: list[str]) -> int:
    work = Path(tempfile.mkdtemp(prefix="xla_lab_shots_"))
    nbdir = work / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        with jupyter_lab(work, nbdir) as lab, chromium_page({"width": 1300, "height": 2400}) as first:
            for notebook, (name, tab, picture) in SHOTS.items():
                if only and notebook not in only:
                    continue
                started = time.time()
                page = first.context.new_page()  # one notebook per page, from an empty workspace
                open_notebook(page, lab, notebook, query="reset&")
                run_all_cells(page)
                page.wait_for_timeout(2000)
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=600_000)
                panel = page.locator(".xla-panel").filter(
                    has=page.locator(".xla-title", has_text=f'"{name}"')).last
                panel.locator(".xla-graph[data-rendered='svg']").wait_for(state="attached", timeout=120_000)
                panel.locator(f".xla-tab[data-tab='{tab}']").click()
                page.wait_for_timeout(800)
                panel.scroll_into_view_if_needed()
                panel.screenshot(path=str(OUT / picture))
                print(f"{notebook}: {picture} ({time.time() - started:.0f} s)", flush=True)
                page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
                page.locator(".lm-Menu-item[data-command='kernelmenu:shutdown']").click()
                if page.locator(".jp-Dialog .jp-mod-accept").count():
                    page.locator(".jp-Dialog .jp-mod-accept").click()
                page.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
