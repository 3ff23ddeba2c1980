"""A reader of XLA's profile format (XSpace, ``tsl/profiler/protobuf/xplane.proto``): the events a
profiler session recorded, as plain data.

Like ``hlo/proto_frames.py``, it declares the few fields it needs as a schema built at first use and
lets protobuf's C parser read them; nothing else of the proto, and no generated code, is needed.
(``xprof``'s ``ProfileData`` reads the same bytes, but is a 32 MB native package outside the lock
for what is a 60-line schema here.) Strings are declared as bytes, so a name that is not UTF-8 reads
with replacement characters instead of failing the whole profile.

Field numbers: XSpace.planes=1, .errors=2, .warnings=3, .hostnames=4; XPlane.id=1, .name=2, .lines=3,
.event_metadata=4 (map int64 -> XEventMetadata), .stat_metadata=5 (map int64 -> XStatMetadata),
.stats=6; XLine.id=1, .name=2, .timestamp_ns=3, .events=4, .display_name=11; XEvent.metadata_id=1,
.offset_ps=2, .duration_ps=3, .stats=4; XStat.metadata_id=1, .double_value=2, .uint64_value=3,
.int64_value=4, .str_value=5, .bytes_value=6, .ref_value=7 (a stat metadata id whose name is the
value); XEventMetadata.id=1, .name=2, .display_name=4, .stats=5; XStatMetadata.id=1, .name=2.
A map is a repeated entry message with key=1, value=2.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass, field

from xla_lab.hlo.proto_schema import message_classes


class ProfileFormatError(ValueError):
    """The bytes are not an XSpace this reader understands."""


@dataclass(slots=True)
class Event:
    name: str  # the event's metadata name: an HLO instruction for XLA's kernels, a host activity otherwise
    start_ns: float  # from the session's start (XLA rebases a session's events on it: ``session_start_ns``)
    duration_ns: float
    stats: dict[str, object] = field(default_factory=dict)  # the event's own stats, then its metadata's

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


@dataclass
class Line:
    name: str  # a thread, e.g. "python" or "tf_XLAEigen/123"
    events: list[Event]


@dataclass
class Plane:
    name: str  # e.g. "/host:CPU", "/device:TPU:0"
    lines: list[Line]
    stats: dict[str, object] = field(default_factory=dict)  # the plane's own (e.g. "Task Environment"'s)


TASK_ENVIRONMENT = "Task Environment"  # a plane of stats about the session, such as when it started


def session_start_ns(planes: list[Plane]) -> int | None:
    """When the session started, in unix nanoseconds (the "Task Environment" plane's
    ``profile_start_time``): what turns its events' times into the clock of ``time.time()`` and of
    torch_xla's metric samples. None when the profile does not say."""
    for plane in planes:
        if plane.name == TASK_ENVIRONMENT:
            start = plane.stats.get("profile_start_time")
            return int(start) if isinstance(start, int) and start > 0 else None
    return None


_PACKAGE = "xla_lab_xplane"
_ONE, _MANY = "optional", "repeated"
_INT, _UINT, _DOUBLE, _BYTES, _MSG = "int64", "uint64", "double", "bytes", "message"

_SCHEMA = {
    "Space": [("planes", 1, _MSG, _MANY, "Plane"), ("errors", 2, _BYTES, _MANY, None)],
    "Plane": [("id", 1, _INT, _ONE, None), ("name", 2, _BYTES, _ONE, None), ("lines", 3, _MSG, _MANY, "Line"),
              ("event_metadata", 4, _MSG, _MANY, "EventMetadataEntry"),
              ("stat_metadata", 5, _MSG, _MANY, "StatMetadataEntry"), ("stats", 6, _MSG, _MANY, "Stat")],
    "Line": [("id", 1, _INT, _ONE, None), ("name", 2, _BYTES, _ONE, None), ("timestamp_ns", 3, _INT, _ONE, None),
             ("events", 4, _MSG, _MANY, "Event"), ("display_name", 11, _BYTES, _ONE, None)],
    "Event": [("metadata_id", 1, _INT, _ONE, None), ("offset_ps", 2, _INT, _ONE, None),
              ("duration_ps", 3, _INT, _ONE, None), ("stats", 4, _MSG, _MANY, "Stat")],
    "Stat": [("metadata_id", 1, _INT, _ONE, None), ("double_value", 2, _DOUBLE, _ONE, None),
             ("uint64_value", 3, _UINT, _ONE, None), ("int64_value", 4, _INT, _ONE, None),
             ("str_value", 5, _BYTES, _ONE, None), ("bytes_value", 6, _BYTES, _ONE, None),
             ("ref_value", 7, _UINT, _ONE, None)],
    "EventMetadataEntry": [("key", 1, _INT, _ONE, None), ("value", 2, _MSG, _ONE, "EventMetadata")],
    "EventMetadata": [("id", 1, _INT, _ONE, None), ("name", 2, _BYTES, _ONE, None),
                      ("display_name", 4, _BYTES, _ONE, None), ("stats", 5, _MSG, _MANY, "Stat")],
    "StatMetadataEntry": [("key", 1, _INT, _ONE, None), ("value", 2, _MSG, _ONE, "StatMetadata")],
    "StatMetadata": [("id", 1, _INT, _ONE, None), ("name", 2, _BYTES, _ONE, None)],
}
# the value fields of XStat, in the order they are tried (proto3: an unset scalar reads as 0)
_VALUES = ("str_value", "bytes_value", "double_value", "int64_value", "uint64_value", "ref_value")


@functools.cache
def _space_class() -> type:
    """Built on first use: protobuf is not imported until a profile is read. XStat's value is a oneof:
    ``WhichOneof`` names the one set."""
    return message_classes(_PACKAGE, _SCHEMA, ("Space",), syntax="proto2",
                           oneofs={"Stat": ("value", _VALUES)})["Space"]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _stats(stats, stat_names: dict[int, str], only: frozenset[int] | None = None) -> dict[str, object]:
    out = {}
    for stat in stats:
        if only is not None and stat.metadata_id not in only:
            continue
        which = stat.WhichOneof("value")
        if which is None:
            value = None
        elif which == "ref_value":
            value = stat_names.get(stat.ref_value, "")
        else:
            value = getattr(stat, which)
            if isinstance(value, bytes):
                value = _text(value)
        out[stat_names.get(stat.metadata_id, str(stat.metadata_id))] = value
    return out


def read_space(data: bytes, names: frozenset[str] | None = None, prefixes: tuple[str, ...] = (),
               with_stat: str | None = None, stats: frozenset[str] | None = None,
               bare: tuple[str, ...] = (), whole_lines_with: str | None = None) -> list[Plane]:
    """The planes of an XSpace, each event with its start (from the session's start) and duration in
    nanoseconds.

    A long loop records tens of thousands of runtime events nobody reads (thread-pool regions,
    transposes, buffer waits): with ``names``, only events of those names, of names starting with
    one of ``prefixes``, or carrying the stat ``with_stat`` are read, and with ``stats`` only those
    stats of them; events whose names start with one of ``bare`` are read without stats (together
    10x faster on a 200-step loop). ``whole_lines_with``: a line (thread) holding an event of that
    name is read whole, whatever the filter (the thread that compiled: every HLO pass is an event of
    its own name)."""
    with gc_paused():
        return _read_space(data, names, prefixes, with_stat, stats, bare, whole_lines_with)


@contextlib.contextmanager
def gc_paused():
    """Reading and joining a profile makes tens of thousands of small objects, none cyclic: the cyclic
    collector would only rescan them, several times over."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_space(data: bytes):
    """The XSpace message itself (the schema above), for readers of what ``read_space`` leaves out, such
    as the metadata plane's module protos (``lean_modules.py``)."""
    from google.protobuf.message import DecodeError

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProfileFormatError(f"a profile is bytes, got {type(data).__name__}")
    space = _space_class()()
    try:
        space.ParseFromString(bytes(data))
    except (DecodeError, RecursionError) as exc:
        raise ProfileFormatError(f"not a valid XSpace protobuf ({exc})") from None
    return space


def _read_space(data, names, prefixes, with_stat, stats, bare, whole_lines_with=None) -> list[Plane]:
    space = parse_space(data)
    if not space.planes and not space.errors:
        raise ProfileFormatError("the profile holds no planes")
    planes = []
    for plane in space.planes:
        stat_names = {e.key: _text(e.value.name) for e in plane.stat_metadata}
        marker = next((k for k, v in stat_names.items() if v == with_stat), None) if with_stat else None
        only = frozenset(k for k, v in stat_names.items() if v in stats) if stats is not None else None
        metadata = {}
        for entry in plane.event_metadata:
            md = entry.value
            name = _text(md.name or md.display_name)
            wanted = names is None or name in names or (prefixes and name.startswith(prefixes))
            plain = bool(bare) and name.startswith(bare)
            # (the metadata's stats are read when an event of it is kept: most metadata is of events the
            # filter drops)
            metadata[entry.key] = (name, md if md.stats and not plain else None, wanted, plain)
        lines = []
        # whether events of a metadata id carry ``with_stat``: decided on its first event (events of one
        # metadata come from one TraceMe site, so they all carry the same stats)
        marked: dict[int, bool] = {}
        md_cache: dict[int, dict] = {}
        whole_id = next((k for k, v in metadata.items() if v[0] == whole_lines_with), None) \
            if whole_lines_with else None
        for line in plane.lines:
            events = []
            base = line.timestamp_ns
            whole = whole_id is not None and any(ev.metadata_id == whole_id for ev in line.events)
            for ev in line.events:
                mid = ev.metadata_id
                name, md_stats, wanted, plain = metadata.get(mid) or (f"#{mid}", {}, names is None, False)
                wanted = wanted or whole
                if plain and wanted:
                    events.append(Event(name, base + ev.offset_ps / 1000.0, ev.duration_ps / 1000.0, {}))
                    continue
                if not wanted:
                    if marker is None:
                        continue
                    known = marked.get(mid)
                    if known is None:
                        known = marked[mid] = any(st.metadata_id == marker for st in ev.stats)
                    if not known:
                        continue
                found = _stats(ev.stats, stat_names, only) if ev.stats else {}
                if md_stats is not None and not isinstance(md_stats, dict):
                    md_stats = md_cache.get(mid)
                    if md_stats is None:
                        md_stats = md_cache[mid] = _stats(metadata[mid][1].stats, stat_names)
                for key, value in (md_stats or {}).items():
                    found.setdefault(key, value)
                events.append(Event(name, base + ev.offset_ps / 1000.0, ev.duration_ps / 1000.0, found))
            lines.append(Line(_text(line.display_name or line.name), events))
        planes.append(Plane(_text(plane.name), lines, _stats(plane.stats, stat_names) if plane.stats else {}))
    return planes
