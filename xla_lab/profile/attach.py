"""Give a recorded capture its measured time: read the session's XSpace, join it to the capture's
steps and kernels, add the machine's peaks. Problems become notes, never errors: a profile that cannot
be read must not take the cell's capture with it."""

from __future__ import annotations

import re

from .join import WANTED, WANTED_STATS, StepInfo, join_profile
from .xplane import ProfileFormatError, gc_paused, read_space

_MODULE = re.compile(r"^HloModule ([^\s,]+)", re.M)


def step_infos(capture) -> list[StepInfo]:
    out = []
    for step in capture.steps:
        found = _MODULE.search(step.hlo_after or "")
        kernels = frozenset(k["name"] for k in (step.fusions or []))
        out.append(StepInfo(step.index, found.group(1) if found else None, step.graph_hash, kernels,
                            step.timings.get("execute_s")))
    return out


def attach_profile(capture, data: bytes, device: str = "CPU", recorded: int | None = None,
                   max_steps: int | None = None) -> None:
    """Set ``capture.profile`` from the XSpace bytes of a session that ran around the cell.
    ``recorded``: the executions the session saw when it ended after its first ``max_steps``
    explicit steps (None: it ran to the cell's end); those are the cell's first steps."""
    from .peaks import peaks

    try:
        planes = read_space(data, WANTED, ("end: ",), "hlo_module", WANTED_STATS, bare=("end: ",))
    except ProfileFormatError as exc:
        capture.notes.append(f"the profile could not be read: {exc}")
        return
    infos = step_infos(capture)
    if recorded is not None and recorded < len(infos):
        infos = infos[:recorded]
        capture.notes.append(
            f"profiled the first {recorded} of the cell's {len(capture.steps)} steps: the session ends after "
            f"{max_steps} explicit syncs (%%xla --profile-steps N to change that, --profile-steps all to record "
            "every step, which costs time and memory in proportion)")
    with gc_paused():
        record = join_profile(planes, infos)
    record["recorded_steps"] = len(infos)
    try:
        record["peaks"] = peaks(device)
    except Exception as exc:  # a failed microbenchmark costs the roofline, not the profile
        record["peaks"] = None
        capture.notes.append(f"the roofline's peaks could not be measured: {type(exc).__name__}: {exc}")
    profiled = len(record["steps"])
    if profiled < len(infos):
        capture.notes.append(f"the profile has device events for {profiled} of the {len(infos)} steps it recorded "
                             "(the others ran no kernel, or their events were not recorded)")
    if record["unmatched_executions"]:
        capture.notes.append(f"the profile holds {record['unmatched_executions']} executions of graphs that are "
                             "not the cell's steps (e.g. a precompile job or another thread): left out of the "
                             "cell's times")
    capture.profile = record
