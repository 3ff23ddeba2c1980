"""Run every test file alone: one pytest process per file, so a file (and the order of its tests) cannot
lean on what another file left in the shared IPython shell, XLA's compile cache or the session.

    .venv/bin/python tests/run_each_alone.py                  # tests/unit, then tests/kernel (zoo included)
    .venv/bin/python tests/run_each_alone.py tests/unit       # some folders or files only
    .venv/bin/python tests/run_each_alone.py -- -m "not slow"  # arguments after -- go to every pytest

(``make test-alone`` runs it with the project's venv.) The browser tests (tests/browser) are left out:
they start their own JupyterLab. Prints each file's counts and seconds, then a summary; exits 1 when a
file failed, and a file where pytest ran no test (exit code 5: nothing collected, or the whole module
skipped) counts as failed too: a file that runs nothing tests nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
LEFT_OUT = ("browser", "fixtures")  # folders of tests/ that are not run here
NO_TESTS_RAN = 5  # pytest's exit code when it collected nothing (or skipped the whole module)


def shown(path: Path) -> str:
    return os.path.relpath(path, ROOT)


def test_files(paths: list[str]) -> list[Path]:
    """Every test_*.py in ``paths`` (default: tests/), less those under browser/ and fixtures/ (a file
    named on its own is run whatever its folder); tests/unit first, as its files take seconds."""
    found: set[Path] = set()
    for given in paths or [str(TESTS)]:
        path = Path(given).resolve()
        if path.is_file():
            found.add(path)
        elif path.is_dir():
            found.update(p for p in path.rglob("test_*.py")
                         if not set(p.relative_to(path).parts[:-1]) & {*LEFT_OUT, "__pycache__"})
        else:
            raise SystemExit(f"run_each_alone: no such file or folder: {given}")
    return sorted(found, key=lambda p: (TESTS / "unit" not in p.parents, str(p)))


def counts(junit: Path) -> dict[str, int]:
    """passed / failed / errors / skipped from pytest's JUnit XML (empty when pytest wrote none)."""
    out = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return out
    for case in cases:
        kinds = {child.tag for child in case}
        if "error" in kinds:
            out["errors"] += 1
        elif "failure" in kinds:
            out["failed"] += 1
        elif "skipped" in kinds:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def run_file(path: Path, pytest_args: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="run_each_alone_") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", shown(path), "-q", f"--junitxml={junit}", *pytest_args]
        started = time.monotonic()
        # a session of its own: on a timeout the kernels and workers it started go with it
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
            code, timed_out = proc.returncode, False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            code, timed_out = None, True
        seconds = time.monotonic() - started
        return {"path": path, "code": code, "timed_out": timed_out, "seconds": seconds, "output": output,
                **counts(junit)}


def verdict(r: dict) -> str:
    if r["timed_out"]:
        return "timed out"
    if r["code"] == NO_TESTS_RAN:
        return "no tests ran" + (" (the whole file was skipped)" if r["skipped"] else "")
    if r["code"] != 0:
        return f"pytest exit code {r['code']}"
    return ""


def describe(r: dict) -> str:
    parts = [f"{r[k]} {k}" for k in ("passed", "failed", "errors", "skipped") if r[k] or k == "passed"]
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="test files or folders (default: tests/, less browser/)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per file (default 1800)")
    parser.add_argument("--tail", type=int, default=40, help="lines of a failed file's output to show (default 40)")
    args = parser.parse_args(argv)

    files = test_files(args.paths)
    if not files:
        print("run_each_alone: no test files found", file=sys.stderr)
        return 1
    width = max(len(shown(f)) for f in files)
    print(f"{len(files)} test files, each in its own pytest process ({sys.executable} -m pytest FILE -q"
          f"{' ' + ' '.join(pytest_args) if pytest_args else ''})", flush=True)
    results = []
    started = time.monotonic()
    for path in files:
        r = run_file(path, pytest_args, args.timeout)
        results.append(r)
        bad = verdict(r)
        name = shown(path)
        print(f"{'FAIL' if bad else 'ok  '}  {name:<{width}}  {describe(r):<40} {r['seconds']:7.1f} s"
              f"{'  ' + bad if bad else ''}", flush=True)
        if bad:
            tail = "\n".join(r["output"].rstrip().splitlines()[-args.tail:])
            print("      | " + tail.replace("\n", "\n      | "), flush=True)
    total = time.monotonic() - started
    failed = [r for r in results if verdict(r)]
    sums = {k: sum(r[k] for r in results) for k in ("passed", "failed", "errors", "skipped")}
    print(f"\n{len(results) - len(failed)} of {len(results)} files passed alone; "
          f"tests: {', '.join(f'{v} {k}' for k, v in sums.items())}; {total:.0f} s in all")
    for r in failed:
        print(f"  failed alone: {shown(r['path'])} ({verdict(r)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
