"""Lean capture's source of compiled modules: the ``/host:metadata`` plane of a profiler session, in place
of XLA's dump.

When a session ends, XLA serializes the ``HloProto`` (optimized module and buffer assignment) of every
executable alive then (``XlaDebugInfoManager``), one event metadata per module, named
``<module name>(<unique id>)``, its bytes in the stat "Hlo Proto". So the session that records a cell's
compiles (``compile_window.py``) also brings the modules they made, and modules compiled while it was
closed come with its next ending. Each module's unique id says whether it was seen before: a module
is new once, in the order XLA made it.
"""

from __future__ import annotations

import re

from xla_lab.capture.dumps import CompiledModule
from xla_lab.hlo.hlo_proto import read_hlo_proto
from xla_lab.hlo.proto_frames import ProtoError

from .join import DISPATCH
from .xplane import ProfileFormatError, parse_space, read_space

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
_NAME = re.compile(r"^(?P<name>.*)\((?P<id>\d+)\)$")


def hlo_protos(data: bytes) -> list[tuple[str, int | None, bytes]]:
    """(module name, unique id, HloProto bytes) of every module in the session's metadata plane."""
    space = parse_space(data)
    out = []
    for plane in space.planes:
        if plane.name.decode("utf-8", "replace") != METADATA_PLANE:
            continue
        stat_names = {e.key: e.value.name.decode("utf-8", "replace") for e in plane.stat_metadata}
        for entry in plane.event_metadata:
            md = entry.value
            label = md.name.decode("utf-8", "replace")
            found = _NAME.match(label)
            for stat in md.stats:
                if stat_names.get(stat.metadata_id) == HLO_PROTO_STAT and stat.bytes_value:
                    out.append((found["name"] if found else label, int(found["id"]) if found else None,
                                stat.bytes_value))
    return out


def executed_programs(data: bytes) -> list[int | None]:
    """The program (module unique id) of each execution a session recorded, in the order they were
    dispatched: torch_xla's dispatch event spans the execution on the CPU client, and every kernel XLA
    runs carries its ``program_id``; executions on one device run one at a time."""
    planes = read_space(data, frozenset(DISPATCH), with_stat="program_id", stats=frozenset({"program_id"}))
    dispatches, kernels = [], []
    for plane in planes:
        for line in plane.lines:
            for ev in line.events:
                if ev.name in DISPATCH:
                    dispatches.append((ev.start_ns, ev.end_ns))
                elif isinstance(ev.stats.get("program_id"), int):
                    kernels.append((ev.start_ns, ev.stats["program_id"]))
    dispatches.sort()
    kernels.sort()
    out: list[int | None] = []
    i = 0
    for start, end in dispatches:
        while i < len(kernels) and kernels[i][0] < start:
            i += 1
        ids = {}
        j = i
        while j < len(kernels) and kernels[j][0] <= end:
            ids[kernels[j][1]] = ids.get(kernels[j][1], 0) + 1
            j += 1
        out.append(max(ids, key=ids.get) if ids else None)
    return out


class LeanModules:
    """The modules of one kernel's profiler sessions, each handed out once (``new``)."""

    def __init__(self):
        self._seen: set[int] = set()
        self.graph_of: dict[int, str] = {}  # module unique id -> graph hash, once a compile is paired with it

    def new(self, chunks: list[bytes], problems: list[str] | None = None) -> list[CompiledModule]:
        """Modules not seen in earlier sessions, oldest first. Unreadable bytes become ``problems``."""
        found: dict[int, tuple[str, bytes]] = {}
        for data in chunks:
            if not data:
                continue
            try:
                for name, module_id, raw in hlo_protos(data):
                    if module_id is not None and module_id not in self._seen:
                        found.setdefault(module_id, (name, raw))
            except ProfileFormatError as exc:
                if problems is not None:
                    problems.append(f"a profiler session's modules could not be read: {exc}")
        out = []
        for module_id in sorted(found):
            self._seen.add(module_id)
            name, raw = found[module_id]
            try:
                optimized = read_hlo_proto(raw)
            except ProtoError as exc:
                if problems is not None:
                    problems.append(f"the optimized module {name} could not be read: {exc}")
                continue
            out.append(CompiledModule(module_id, _graph_name(optimized.name), module_proto=optimized.module_proto,
                                      allocations=optimized.allocations))
        return out

    def programs(self, chunks: list[tuple[bytes, int]], first: int, count: int) -> list[int | None]:
        """The module each of a cell's ``count`` executions ran (None where no session recorded it):
        ``chunks``: (bytes, executions counted when that session opened); ``first``: the executions
        counted when the cell started."""
        out: list[int | None] = [None] * count
        for data, opened_at in chunks:
            if not data:
                continue
            try:
                programs = executed_programs(data)
            except ProfileFormatError:
                continue
            for k, program in enumerate(programs):
                at = opened_at + k - first
                if 0 <= at < count and out[at] is None:
                    out[at] = program
        return out


def _graph_name(module_name: str) -> str:
    """``cell_3.130`` -> ``cell_3`` (torch_xla names a module after its graph and an instruction id)."""
    head, dot, tail = module_name.rpartition(".")
    return head if dot and tail.isdigit() else module_name
