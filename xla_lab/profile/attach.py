"""Give a recorded capture its measured time: read the session's XSpace, join it to the capture's
steps and kernels, add the machine's peaks. Problems become notes, never errors: a profile that cannot
be read must not take the cell's capture with it."""

from __future__ import annotations

import re

from .join import WANTED, WANTED_STATS, StepInfo, join_profile
from .xplane import ProfileFormatError, gc_paused, read_space

_MODULE = re.compile(r"^HloModule ([^\s,]+)", re.M)
_CLOCK_SLACK_NS = 2e3  # (unix times in float seconds and float ns are rounded to about 0.25 us)


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
    capture.profile = record
    _peaks_at_least_achieved(capture, device)
    profiled = len(record["steps"])
    if profiled < len(infos):
        capture.notes.append(f"the profile has device events for {profiled} of the {len(infos)} steps it recorded "
                             "(the others ran no kernel, or their events were not recorded)")
    if record["unmatched_executions"]:
        capture.notes.append(f"the profile holds {record['unmatched_executions']} executions of graphs that are "
                             "not the cell's steps (e.g. a precompile job or another thread): left out of the "
                             "cell's times")
    capture.profile = record


def _peaks_at_least_achieved(capture, device: str) -> None:
    """A kernel faster than the machine's measured FLOP/s peak means the peak was measured low (a busy
    machine): measure it again and keep at least what the kernel achieved, so no kernel reads above
    its roof."""
    from .breakdown import kernel_times
    from .peaks import at_least

    record = capture.profile
    if not record.get("peaks"):
        return
    best = max((k.flops_per_s for k in kernel_times(capture) if k.flops_per_s and k.count), default=0.0)
    if best <= record["peaks"]["flops_per_s"]:
        return
    try:
        raised = at_least(device, best)
    except Exception as exc:  # the roofline keeps the old peaks; the profile is fine
        capture.notes.append(f"the roofline's peaks could not be measured again: {type(exc).__name__}: {exc}")
        return
    if raised is not None:
        capture.notes.append(f"a kernel ran at {best / 1e9:.0f} GFLOP/s, above the measured peak of "
                             f"{record['peaks']['flops_per_s'] / 1e9:.0f}: the peak was measured again "
                             f"({raised['flops_per_s'] / 1e9:.0f} GFLOP/s now)")
        record["peaks"] = raised


def instruction_count(hlo: str | None) -> int | None:
    """HLO instructions in a module's text (every computation's), None without the text: each is one
    line ``%name = shape op(...)``, and nothing else XLA prints has `` = `` (a header's attributes and
    the metadata write ``key=value``). A count in C: a 12-layer model's text is tens of MB."""
    return hlo.count(" = ") if hlo else None


def attach_compile_profiles(capture, chunks: list[bytes], missed: int = 0, failure: str | None = None,
                            started_closed: bool = False,
                            sync_windows: dict[int, tuple[float, float]] | None = None) -> None:
    """Give each graph the cell compiled its compile profile (``GraphArtifacts.compile_profile``), from
    the bytes a compile window (``compile_window.py``) or a ``--profile`` session recorded. A compile
    the profiles do not cover gets a note that says why. Problems become notes. ``sync_windows`` (step
    index -> its explicit sync's enter and return, unix seconds): the cached steps the session also
    recorded get the time their sync waited for their execution (``count_hit_waits``)."""
    from .compile_profile import CLIENT_COMPILE, OTHER_THREADS, compile_profiles, sync_waits

    profiles = []
    waits = []
    for data in chunks:
        if not data:
            continue
        try:  # the compiling thread whole; of the others only the kernels' compile events
            planes = read_space(data, OTHER_THREADS, whole_lines_with=CLIENT_COMPILE)
        except ProfileFormatError as exc:
            capture.notes.append(f"a compile profile could not be read: {exc}")
            continue
        with gc_paused():
            profiles.extend(compile_profiles(planes))
            waits.extend(sync_waits(planes))
    misses = [s for s in capture.steps if s.cache == "miss" and s.artifacts is not None]
    for p in profiles:
        step = _compiled_step(p, [s for s in misses if s.artifacts.compile_profile is None])
        if step is not None:
            _store(step, p)
    count_hit_waits(capture.steps, sync_windows or {}, waits)
    without = [s for s in misses if s.artifacts.compile_profile is None]
    if not without:
        return
    steps = ", ".join(str(s.index) for s in without[:8]) + (" ..." if len(without) > 8 else "")
    if failure:
        why = f"no compile profile for step(s) {steps}: {failure}"
    elif missed and started_closed:
        why = (f"no compile profile for step(s) {steps}: the cell's last run compiled nothing, so the compile "
               "profile's session started closed for speed (it opens after such a compile, so a further compile "
               "of the cell is profiled; run the cell again for the profile of a compile that repeats)")
    elif missed:
        why = (f"no compile profile for step(s) {steps}: compiled after the cell's loop had hit the cache "
               "twice in a row, while the compile profile's session was closed for speed (it opens again after "
               "such a compile, so a further compile of the cell is profiled)")
    else:
        why = f"no compile profile for step(s) {steps}: the profiler session recorded no compile for them"
    capture.notes.append(why)


def count_hit_waits(steps: list, sync_windows: dict[int, tuple[float, float]],
                    waits: list[tuple[float, float, float]]) -> None:
    """A cached step whose explicit sync the session recorded (a ``SyncTensorsGraph`` inside the hook's
    call: the profiler and the hook read the same clock) gets what that sync waited for the step's own
    execution, as a compiling one gets its compile profile's: ``execution_wait_s``, out of ``trace_s``.
    Steps the session did not record (its window had closed) keep None: not measured."""
    from xla_lab.capture.steps import count_execution_wait

    if not waits:
        return
    for step in steps:
        window = sync_windows.get(step.index)
        if step.cache == "miss" or window is None or step.timings.get("execution_wait_s") is not None:
            continue
        enter, exit_ = window[0] * 1e9 - _CLOCK_SLACK_NS, window[1] * 1e9 + _CLOCK_SLACK_NS
        inside = [wait for start, end, wait in waits if enter <= start and end <= exit_]
        if inside:
            count_execution_wait(step, sum(inside) / 1e9)


def _compiled_step(profile: dict, candidates: list):
    """The step whose compile the profile recorded: both time the same call (torch_xla's CompileTime is
    the ``PjRtComputationClient::Compile`` event), so their seconds agree; a module name, when the
    backend gives one, must agree too (names repeat: ``cell_3.130`` is the module's instruction id)."""
    seconds = profile["compile_ns"] / 1e9

    def off(step) -> float:
        known = step.timings.get("compile_s")
        return abs(known - seconds) if known is not None else float("inf")

    module = profile.get("module")
    named = [s for s in candidates if module and _MODULE.search(s.artifacts.hlo_after or "")
             and _MODULE.search(s.artifacts.hlo_after).group(1) == module]
    for pool in (named, candidates):
        best = min(pool, key=off, default=None)
        if best is not None and off(best) <= max(2e-3, 0.01 * seconds):
            return best
    return None


def _store(step, profile: dict) -> None:
    from xla_lab.capture.steps import count_execution_wait

    art = step.artifacts
    profile["counts"] = {"hlo_before": None if art.lean else instruction_count(art.hlo_before),
                         "hlo_after": instruction_count(art.hlo_after),
                         "kernels": len(art.fusions) if art.fusions is not None else None,
                         "functions": (profile.get("codegen") or {}).get("functions")}
    profile["step"] = step.index
    art.compile_profile = profile
    wait = profile.get("execution_wait_ns")
    count_execution_wait(step, wait / 1e9 if wait is not None else None)
