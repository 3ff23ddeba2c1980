"""JupyterLab on a loopback port and a page of Debian's chromium, for the browser tests and
docs/screenshots.py (one way to start both, write a notebook, open it and run it, so the three stay
alike)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium keeps reaching for Google's hosts on a closed network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(path: Path) -> None:
    """User settings: no news / update pop-ups, every cell rendered (no windowing)."""
    for plugin, values in {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }.items():
        f = path / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))


@contextmanager
def jupyter_lab(work: Path, root: Path, *, args: tuple = (), env: dict | None = None,
                keep_log: Path | None = None):
    """``jupyter lab`` serving ``root`` with its settings, config and runtime under ``work``; yields
    {"url", "token", "log"} once it answers; ``keep_log``: where to copy its log when it stops."""
    write_settings(work / "settings")
    port, token = free_port(), os.urandom(16).hex()
    cmd = [str(Path(sys.executable).parent / "jupyter"), "lab", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={work / 'settings'}", f"--LabApp.workspaces_dir={work / 'workspaces'}", *args]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    full_env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"), JUPYTER_CONFIG_DIR=str(work / "config"),
                    JUPYTER_RUNTIME_DIR=str(work / "runtime"), PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1", **(env or {}))
    log_path = work / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("jupyter lab did not start:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
        yield {"url": url, "token": token, "log": log_path}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if keep_log is not None:
            keep_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(log_path, keep_log)



@contextmanager
def jupyter_lab_with_extension(work: Path, root: Path, labext: Path, keep_log: Path | None = None):
    """``jupyter_lab`` with the built xla-lab extension (``labext``, xla_lab/labextension) on JUPYTER_PATH,
    whatever the venv has installed, and the app exposed to the page (``window.jupyterapp``)."""
    data = work / "data" / "labextensions"
    data.mkdir(parents=True)
    (data / "xla-lab").symlink_to(labext, target_is_directory=True)
    with jupyter_lab(work, root, args=("--LabApp.expose_app_in_browser=True",), env={"JUPYTER_PATH": str(work / "data")},
                     keep_log=keep_log) as server:
        yield server

# Every Playwright action and wait is bounded (Playwright enforces it outside the page, so a hung page
# cannot stop it); commands and evaluations that await the page go through ``command`` / ``evaluate``.
STEP_TIMEOUT_MS = 60_000
COMMAND_TIMEOUT_MS = 120_000
RUN_ALL_TIMEOUT_MS = 300_000  # notebook:run-all-cells settles once every cell has run (compiles included)


class BrowserStepTimeout(AssertionError):
    """A browser step did not finish within its limit: the message names the step, the screenshot taken
    then and the end of the server's log."""


@contextmanager
def chromium_page(viewport: dict, *, artifacts: Path | None = None, server_log: Path | None = None):
    """A headless chromium page; ``page.errors`` collects page errors and dialogs (an alert() from user
    text would land there, and is dismissed). ``artifacts``: where a step that times out leaves its
    screenshot; ``server_log``: the JupyterLab log whose end its message quotes."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=STEP_TIMEOUT_MS)
        ctx = browser.new_context(viewport=viewport)
        ctx.set_default_timeout(STEP_TIMEOUT_MS)
        try:
            yield new_tab(ctx, artifacts=artifacts, server_log=server_log)
        finally:
            ctx.close()
            browser.close()


def new_tab(ctx, *, artifacts: Path | None = None, server_log: Path | None = None):
    """A page of ``ctx`` whose ``errors`` collects page errors and dialogs (dismissed)."""
    page = ctx.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.step_artifacts = artifacts  # type: ignore[attr-defined]
    page.server_log = server_log  # type: ignore[attr-defined]
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("dialog", lambda d: (page.errors.append(f"dialog: {d.message}"), d.dismiss()))
    return page


_STEPS = itertools.count()


def evaluate(page, function: str, arg=None, *, what: str | None = None, timeout_ms: int = STEP_TIMEOUT_MS):
    """``page.evaluate(function, arg)`` with a limit. Playwright's own evaluate awaits the function's
    promise with none: here the page starts it and keeps its outcome, and Playwright polls for that
    outcome with ``timeout_ms`` (a promise that never settles fails the step, with a screenshot)."""
    key = f"s{next(_STEPS)}"
    page.evaluate("""([arg, key]) => {
        const steps = (window.__xlaLabSteps ??= {});
        steps[key] = {state: "pending"};
        Promise.resolve().then(() => (%s)(arg)).then(
            (value) => { steps[key] = {state: "done", value}; },
            (error) => { steps[key] = {state: "failed", error: String(error?.stack ?? error)}; });
    }""" % function, [arg, key])
    try:
        page.wait_for_function("key => window.__xlaLabSteps?.[key]?.state !== 'pending'", arg=key, timeout=timeout_ms)
    except Exception as exc:  # (playwright's TimeoutError, or the page went away)
        step_failed(page, f"{what or 'evaluating ' + repr(function[:80])} did not finish within {timeout_ms / 1000:.0f} s "
                          f"({type(exc).__name__})")
    outcome = page.evaluate("key => { const s = window.__xlaLabSteps[key]; delete window.__xlaLabSteps[key]; return s; }", key)
    if outcome["state"] == "failed":
        raise AssertionError(f"{what or 'the page function'} failed in the page: {outcome['error']}")
    return outcome.get("value")


def command(page, name: str, args: dict | None = None, *, timeout_ms: int = COMMAND_TIMEOUT_MS) -> None:
    """Run JupyterLab command ``name`` as the app's command registry does, bounded (``evaluate``)."""
    evaluate(page, "([name, args]) => window.jupyterapp.commands.execute(name, args ?? {})", [name, args],
             what=f"the JupyterLab command {name}", timeout_ms=timeout_ms)


def step_failed(page, message: str):
    """Raise BrowserStepTimeout with a screenshot of the page and the end of the server's log."""
    artifacts = getattr(page, "step_artifacts", None) or Path(tempfile.gettempdir()) / "xla-lab-browser-steps"
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / f"timed_out_{time.strftime('%H%M%S')}_{next(_STEPS)}.png"
    try:
        page.screenshot(path=str(shot), timeout=15_000)
    except Exception as exc:
        shot = f"(no screenshot: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    log = getattr(page, "server_log", None)
    tail = ""
    if log is not None and Path(log).exists():
        tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-40:])
    raise BrowserStepTimeout(f"{message}; screenshot: {shot}; the server log ends:\n{tail or '(no log)'}")


def write_notebook(path: Path, cells) -> None:
    """A notebook of code ``cells`` on the python3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def open_notebook(page, lab: dict, name: str, query: str = "") -> None:
    """Open notebook ``name`` in JupyterLab (``query``: e.g. "reset&" for an empty workspace) and wait
    until its kernel is idle, accepting the kernel JupyterLab may ask about (the notebook's own)."""
    page.goto(f"{lab['url']}/lab/tree/{name}?{query}token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    _kernel_idle(page)


def open_in_app(page, lab: dict, name: str) -> None:
    """Open notebook ``name`` in the JupyterLab already on the page (no page load: leaving a page whose
    notebook ran can be refused; the first call loads it) and wait as ``open_notebook`` does."""
    if not page.evaluate("() => !!window.jupyterapp"):
        open_notebook(page, lab, name)
        return
    evaluate(page, "(path) => window.jupyterapp.commands.execute('docmanager:open', {path}).then(() => null)", name,
             what="opening the notebook", timeout_ms=60_000)  # (the widget it returns is not sent back)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    _kernel_idle(page)


def _kernel_idle(page) -> None:
    """Wait until the open notebook's kernel is idle, accepting the kernel JupyterLab may ask about."""
    # (with two notebooks open there are two indicators: the hidden tab's must not count)
    idle = ".jp-Notebook-ExecutionIndicator[data-status='idle']:visible"
    page.locator(f".jp-Dialog, {idle}").first.wait_for(timeout=90_000)
    page.wait_for_timeout(800)
    if page.locator(".jp-Dialog").count():
        page.locator(".jp-Dialog .jp-mod-accept").click()
    page.locator(idle).first.wait_for(timeout=90_000)


def run_all_cells(page) -> None:
    """Run > Run All Cells, as a user would."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()


def assert_legible(page, graph) -> None:
    """Every node label drawn in ``graph`` (an .xla-graph locator) is at least 9 CSS px tall."""
    page.wait_for_timeout(300)  # (the first view is set on the next animation frame)
    heights = graph.locator("g.node text").evaluate_all(
        "els => els.filter(e => { const r = e.getBoundingClientRect(); return r.width > 0; })"
        ".map(e => e.getBoundingClientRect().height)")
    assert heights and min(heights) >= 9, (graph.get_attribute("data-view"), sorted(heights)[:5])
