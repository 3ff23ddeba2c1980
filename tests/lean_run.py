"""Run the model zoo under ``%%xla`` in one capture mode, in a fresh process (the mode is chosen before the
XLA runtime starts, so a test process that already used a device cannot switch), and write what the
tests of ``tests/kernel/test_lean.py`` compare: each entry's capture, torch_xla's own metric totals for
the cell, and what every view made of it.

    python tests/lean_run.py MODE OUT.json [ENTRY ...]

MODE is ``full`` or ``lean``; lean is chosen with ``%xla mode lean`` after ``%load_ext xla_lab``, as a
user would (``XLA_LAB_CAPTURE=lean`` is the other way, tested by the benchmark).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "kernel", "zoo"), os.path.dirname(HERE)]


def _metrics() -> dict:
    import torch_xla.debug.metrics as met

    out = {}
    for name in ("CompileTime", "ExecuteTime"):
        data = met.metric_data(name)
        out[name] = {"count": data[0] if data else 0, "total_s": (data[1] if data else 0.0) / 1e9}
    return out


def _views(capture) -> dict:
    """What each view made of the capture (or the error it raised)."""
    from xla_lab.view.panel_model import panel_model
    from xla_lab.view.report import Report
    from xla_lab.view.static_html import capture_html

    out = {}
    for name, make in (("text", lambda: Report(capture).text()), ("html", lambda: capture_html(capture)),
                       ("panel", lambda: json.dumps(panel_model(capture)))):
        try:
            out[name] = make()
        except Exception:
            out[name] = "ERROR " + traceback.format_exc()
    return out


def main(mode: str, out_path: str, names: list[str]) -> None:
    from IPython.testing.globalipapp import start_ipython

    import zoo

    ip = start_ipython()
    ip.run_line_magic("load_ext", "xla_lab")
    if mode == "lean":
        ip.run_line_magic("xla", "mode lean")
    import xla_lab

    results = {}
    for entry in zoo.ZOO:
        if names and entry.name not in names:
            continue
        assert ip.run_cell(entry.setup).success, entry.name
        before = _metrics()
        result = ip.run_cell(f"%%xla -q --name zoo_{entry.name}\n{entry.loop}")
        capture = xla_lab.last()  # (waits for the capture's analysis)
        after = _metrics()
        results[entry.name] = {
            "ok": result.success, "error": repr(result.error_in_exec),
            "capture": json.loads(capture.to_json()),
            "metrics": {k: {"count": after[k]["count"] - before[k]["count"],
                            "total_s": after[k]["total_s"] - before[k]["total_s"]} for k in after},
            "losses": [float(t.detach().cpu()) for t in ip.user_ns["zoo_losses"]],
            "views": _views(capture),
        }
    from xla_lab import session

    results["_runtime"] = {"mode": session.get().runtime.mode, "hlo_dump": session.get().runtime.hlo_dump,
                           "dump_files": sorted(os.listdir(session.get().runtime.dump_dir))[:20]}
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
