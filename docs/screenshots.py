"""Screenshots of the cell panel in each tutorial, for the README (docs/screenshots/*.png).

Starts JupyterLab on a copy of notebooks/, runs each tutorial in Debian's chromium, opens one panel
per notebook on the tab that notebook is about, and saves a picture of it. Run it after the panel
changes: `.venv/bin/python docs/screenshots.py` (a few minutes: every notebook runs once).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
# notebook -> (panel name, tab, picture)
SHOTS = {
    "01_getting_started.ipynb": ("train", "graph", "01_graph.png"),
    "02_fusion.ipynb": ("mlp_block", "fusion", "02_fusion_map.png"),
    "03_recompilation.ipynb": ("predict", "summary", "03_recompile_reason.png"),
    "04_precompile_queue.ipynb": ("epoch", "summary", "04_precompiled.png"),
    "05_transformer_memory.ipynb": ("finetune", "memory", "05_memory.png"),
    "06_spmd.ipynb": ("sharded_train", "sharding", "06_sharding.png"),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="xla_lab_shots_"))
    nbdir = work / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    settings = work / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"windowingMode": "none"}))
    news = work / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), os.urandom(16).hex()
    cmd = [str(Path(sys.executable).parent / "jupyter"), "lab", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False",
           f"--ServerApp.root_dir={nbdir}", f"--LabApp.user_settings_dir={work / 'settings'}",
           f"--LabApp.workspaces_dir={work / 'workspaces'}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = dict(os.environ, PJRT_DEVICE="CPU", JUPYTER_CONFIG_DIR=str(work / "config"),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"))
    server = subprocess.Popen(cmd, stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            context = browser.new_context(viewport={"width": 1300, "height": 2400})
            for notebook, (name, tab, picture) in SHOTS.items():
                started = time.time()
                page = context.new_page()  # one notebook per page, from an empty workspace
                page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}")
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
                page.wait_for_timeout(1000)
                if page.locator(".jp-Dialog").count():
                    page.locator(".jp-Dialog .jp-mod-accept").click()
                page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
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
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
