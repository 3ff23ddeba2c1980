"""No test waits forever: the suite's own limits at work, in subprocesses (a hung test and a hung part of
``make test``), so the checks cannot hang this run either.

Found: a fresh clone's ``make test`` sat 17 minutes in a browser test until it was killed by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_has_a_limit_and_a_hung_one_fails_while_the_run_goes_on(tmp_path):
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert options["timeout"] > 0 and options["timeout_method"] == "signal"
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent("""
        import threading

        def test_waits_forever():
            threading.Event().wait()

        def test_after_it():
            assert True
    """))
    started = time.monotonic()
    # (this project's settings, with the limit cut to 2 s so the check is quick)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-o", "timeout=2", "-p", "no:cacheprovider", str(tmp_path / "test_hangs.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "Timeout (>2.0s)" in proc.stdout and "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
    assert took < 60, took


def test_a_part_of_make_test_that_outlives_its_limit_is_stopped_and_the_rest_runs():
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "timed_parts.py"), "environments=1=true",
                           "hangs=0.03=sleep 600", "after=1=echo the part after it ran"],
                          capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 1 and took < 60, (took, proc.stdout)
    assert "hangs: stopped after its limit" in proc.stdout and "the part after it ran" in proc.stdout
    summary = proc.stdout.split("=== time of each part of the test run", 1)[1]
    rows = {line.split()[0]: line for line in summary.splitlines() if line.strip()}
    assert "TIMED OUT" in rows["hangs"] and rows["after"].rstrip().endswith("ok") and "total" in rows
