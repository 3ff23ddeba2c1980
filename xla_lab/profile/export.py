"""Carry a profile to the tools people know: Chrome trace-event JSON (Perfetto, chrome://tracing)
from the capture's timeline, and an XProf / TensorBoard log directory from the raw XSpace.

``export_profile(capture, "out")`` writes ``out/trace.json`` and, when the raw profile is still held
by the session, ``out/plugins/profile/<run>/<host>.xplane.pb`` (``tensorboard --logdir out`` or
``xprof out``)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from xla_lab.capture.source_ref import ref_text


def chrome_trace(capture) -> dict:
    """The trace-event JSON of a profiled capture: one thread per profiler lane, one complete event
    ("ph": "X", microseconds) per kernel and host activity, each kernel with its step and lines."""
    profile = capture.profile or {}
    lines_of = {}
    for step in capture.steps:
        for k in step.fusions or []:
            cell = [ref_text(ln) for ln in k.get("lines", [])[:4]]
            model = [ref_text(ln) for ln in k.get("model_lines", [])[:4] if ln.get("file") and ln.get("cell") is None]
            lines_of.setdefault(k["name"], {"kind": k.get("kind"), "lines": ", ".join(cell + model),
                                            "aten": ", ".join(k.get("aten_ops", [])[:6])})
    lanes: dict[str, int] = {}
    events = []
    for lane, name, start_ns, duration_ns, step in profile.get("timeline", []):
        tid = lanes.setdefault(lane, len(lanes) + 1)
        args = {"step": step} if step >= 0 else {}
        if step >= 0:
            args.update({k: v for k, v in lines_of.get(name, {}).items() if v})
        events.append({"name": name, "ph": "X", "ts": start_ns / 1000.0, "dur": duration_ns / 1000.0,
                       "pid": 1, "tid": tid, "args": args})
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"xla_lab cell [{capture.execution_count}]"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": lane}}
             for lane, tid in lanes.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"cell": capture.execution_count, "dropped_events": profile.get("timeline_dropped", 0)}}


def export_profile(capture, directory: str | Path, raw: bytes | None = None) -> list[Path]:
    """Write the profile of ``capture`` under ``directory``; returns the paths written."""
    if not capture.profile:
        raise ValueError("this capture has no profile (run the cell with %%xla --profile)")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace.json"
    trace.write_text(json.dumps(chrome_trace(capture)))
    written = [trace]
    if raw:
        run = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(capture.started_at))
        xprof = out / "plugins" / "profile" / run / f"{socket.gethostname()}.xplane.pb"
        xprof.parent.mkdir(parents=True, exist_ok=True)
        xprof.write_bytes(raw)
        written.append(xprof)
    return written
