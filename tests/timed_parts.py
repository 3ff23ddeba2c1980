"""Run the parts of ``make test`` one after the other, each with a wall-clock limit, and print the time
each took: ``python tests/timed_parts.py "NAME=LIMIT_MIN=COMMAND" ...``.

A part that fails does not stop the others (CI shows every failure of a run), except the first part
(the environments: nothing else can run without them). A part that outlives its limit is stopped, its
whole process group with it, and fails: no part can hold CI for its 90 minutes. pytest's own per-test
limit (pytest-timeout, pyproject.toml) ends a hung test long before that; this is the floor under it.
Standard library only: it runs before any environment exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def run(name: str, limit_s: float, command: str) -> tuple[int, float]:
    print(f"\n=== {name}: {command}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(command, shell=True, start_new_session=True)
    try:
        rc = proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        print(f"\n=== {name}: stopped after its limit of {limit_s / 60:.0f} min", flush=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        rc = 124
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait()
        raise
    return rc, time.monotonic() - started


def main(specs: list[str]) -> int:
    results = []
    for i, spec in enumerate(specs):
        name, limit_min, command = spec.split("=", 2)
        rc, took = run(name, float(limit_min) * 60, command)
        results.append((name, rc, took))
        if rc != 0 and i == 0:
            break
    total = sum(took for _, _, took in results)
    print("\n=== time of each part of the test run")
    for name, rc, took in results:
        state = "ok" if rc == 0 else ("TIMED OUT" if rc == 124 else f"FAILED (exit {rc})")
        print(f"  {name:<24} {took / 60:6.1f} min  {state}")
    print(f"  {'total':<24} {total / 60:6.1f} min")
    skipped = [spec.split("=", 1)[0] for spec in specs[len(results):]]
    if skipped:
        print(f"  not run (the environments failed): {', '.join(skipped)}")
    return 0 if all(rc == 0 for _, rc, _ in results) and not skipped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
