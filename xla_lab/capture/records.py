"""The data contract: one ``CellCapture`` per run of a ``%%xla`` cell, one ``StepRecord`` per sync.

Everything xla_lab shows is rendered from these records, and they travel as JSON (versioned) so the
same bytes feed the terminal, notebook outputs, the JupyterLab panel and tests. Heavy per-graph text
(IR, HLO before/after) lives in one ``GraphArtifacts`` per graph hash that every step running that
graph shares: a loop of 10,000 cache hits holds one copy, not 10,000.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import SkipJsonSchema

from . import ir_graph
from .format import (Advice, CacheState, CompileProfile, Kernel, LargeConstant, Launch, Line, Loop, Memory, Metrics,
                     Int, NodeInfo, Num, Profile, RankStatus, Signature, Spmd)

SCHEMA = "xla_lab.capture/1"
# ``execution_wait_s`` (added to the contract): the explicit sync waited on the user's thread for the step's
# own execution (torch_xla freed its donated inputs there: ``count_execution_wait`` in steps.py); None where
# no profiler session recorded the sync (the compile window had closed, an implicit sync, no profile)
TIMING_KEYS = ("trace_s", "compile_s", "execute_s", "to_device_s", "from_device_s", "execution_wait_s")
CACHE_STATES = ("miss", "hit", "precompiled")


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, tuples as lists, scalars). ``dataclasses.asdict``
    did this at 1 us a value: a 12-layer model's capture (node tables of 100,000 entries) took 1.9 s
    to copy, most of what a displayed cell cost. Lists of scalars are copied whole, in C."""
    kind = type(value)
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        if set(map(type, value)) <= _SCALARS:
            return list(value)
        return [_plain(v) for v in value]
    return value


def _fields_dict(obj, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dataclass's fields as plain data (records hold no other dataclasses than those left out)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj) if f.name not in leave_out}


class CaptureFormatError(ValueError):
    """Raised when JSON handed to ``CellCapture.from_json`` is not a capture this version can read."""


@dataclass
class GraphArtifacts:
    """What one compile of one graph left behind, stored once per graph hash."""

    graph_hash: str
    graph_name: str | None = None
    ir_text: str | None = None
    ir_source: str | None = None  # "lazy-ir" (torch_xla's IR log) | "hlo-before" (rebuilt from the HLO)
    hlo_before: str | None = None
    hlo_after: str | None = None
    memory_report: str | None = None
    buffer_assignment: str | None = None
    dump_module: str | None = None  # e.g. "module_0007": which XLA dump the HLO came from
    compiled_in: Int | None = None  # execution count of the cell whose run compiled it
    # Analysis of the compile (xla_lab.capture.analysis), once per graph:
    fusions: list[Kernel] | None = None  # kernels of the optimized module (hlo/fusion_map.py Kernel)
    memory: Memory | None = None  # peak / parameter / output / temp bytes, largest buffers
    signature: Signature | None = None  # inputs, baked constants, ops, outputs: what recompiles compare
    # constants of 1 MiB or more baked into the graph (hlo/constants.py): [{instruction, shape, bytes, where}]
    large_constants: list[LargeConstant] | None = None
    # Per node of the rebuilt graph (ir_source "hlo-before"), by node id: {"ids": [node id],
    # "kernel": [kernel name | None], "scope": [index into "scopes" | -1], "scopes": [str],
    # "line": [index into "lines" | -1], "lines": [{"cell", "line", "code"}]}, the lists parallel to
    # "ids" (analysis.node_info)
    node_info: NodeInfo | None = None
    # The graph's while loops (scan, scan_layers, while_loop, fori_loop; analysis.loop_records), outer
    # first: [{"instruction", "computation", "body", "condition", "trip_count" (None: not known before
    # it runs), "trip_count_from" ("backend_config" | "condition" | None), "runs" (body runs per
    # execution of the graph), "parent" (the enclosing loop's instruction), "op" (torch_xla's op name,
    # e.g. "xla__scan"), "kernels" (names of the kernels it runs), "lines" / "model_lines" (the line
    # that called the loop)}]. None in captures made before loops were recorded.
    loops: list[Loop] | None = None
    # SPMD (hlo/sharding.py spmd_summary): device count, each input's layout on the devices, each
    # collective with its payload, groups and cell lines. None for graphs on one device.
    spmd: Spmd | None = None
    # Where the compile's seconds went (profile/compile_profile.py): phases, passes, per-kernel compile
    # time, counts; None when the compile was not profiled (the reason is in the capture's notes)
    compile_profile: CompileProfile | None = None
    # True once the store dropped this graph's text to bound memory (capture/store.py): the HLO
    # fields then hold a sentence saying so; the graph text and the analysis are gone.
    evicted: bool = False
    # Recorded by lean capture (runtime.py, capture/lean.py): the optimized module, its buffers and
    # stacks from the compile's profiler session; no module before optimization (``hlo_before`` holds
    # a sentence saying so, ``ir_text``, ``node_info`` and ``large_constants`` are None, ``signature``
    # is read from the optimized module).
    lean: bool = False
    # Full capture: the files XLA's CPU compiler wrote for this compile besides the HLO (LLVM IR, MLIR,
    # object files, deleted unread): the dump's cost, which lean capture does not pay
    dump_files: Int | None = None
    dump_bytes: Int | None = None

    @property
    def ir_nodes(self) -> int | None:
        """Number of lazy-IR nodes in the graph (counted from the IR text)."""
        return None if self.ir_text is None else ir_graph.count_nodes(self.ir_text)

    @property
    def ir_dot(self) -> str | None:
        """The IR graph as Graphviz DOT (built on demand, never stored twice)."""
        return None if self.ir_text is None else ir_graph.to_dot(self.ir_text, name=self.graph_name or "graph")

    def ir_to_hlo(self) -> dict[int, list[str]]:
        """IR node id -> pre-optimization HLO instruction names (for graphs rebuilt from HLO)."""
        if self.ir_text is None or self.ir_source != "hlo-before":
            return {}
        return ir_graph.hlo_index(self.ir_text)

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], notes: list[str] | None = None) -> "GraphArtifacts":
        """``notes``: where the parts left out of a damaged record are said (without it, any damage
        refuses the record)."""
        return _load(cls, data, "artifacts", notes)


@dataclass
class StepRecord:
    """One sync of the lazy graph: a ``torch_xla.sync()``, an implicit sync (``.item()``, ``print``),
    or the sync ``%%xla`` does at the end of the cell."""

    index: Int
    graph_name: str | None
    graph_hash: str
    cache: CacheState
    sync_cause: str
    sync_line: Int | None = None  # line of the cell that forced the sync (1-based), if in the cell
    sync_code: str | None = None  # the text of that line
    timings: dict[str, Num | None] = field(default_factory=lambda: dict.fromkeys(TIMING_KEYS))
    fallback_ops: dict[str, Int] = field(default_factory=dict)
    recompile_reason: str | None = None  # for cache misses: what changed from the nearest earlier graph
    saved_s: Num | None = None  # cache="precompiled": the compile seconds a precompile job took off this step
    # (not in a step's JSON: steps name their graph by hash, the capture holds each graph once)
    artifacts: SkipJsonSchema[GraphArtifacts | None] = field(default=None, repr=False)

    # Heavy text is read through the shared per-hash artifacts.
    @property
    def ir_text(self) -> str | None:
        return self.artifacts.ir_text if self.artifacts else None

    @property
    def ir_dot(self) -> str | None:
        return self.artifacts.ir_dot if self.artifacts else None

    @property
    def ir_nodes(self) -> int | None:
        return self.artifacts.ir_nodes if self.artifacts else None

    @property
    def hlo_before(self) -> str | None:
        return self.artifacts.hlo_before if self.artifacts else None

    @property
    def hlo_after(self) -> str | None:
        return self.artifacts.hlo_after if self.artifacts else None

    @property
    def fusions(self) -> list[dict] | None:
        return self.artifacts.fusions if self.artifacts else None

    @property
    def memory(self) -> dict | None:
        return self.artifacts.memory if self.artifacts else None

    def to_dict(self) -> dict[str, Any]:
        data = _fields_dict(self, ("artifacts",))
        data["ir_nodes"] = self.ir_nodes
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], artifacts: dict[str, GraphArtifacts],
                  notes: list[str] | None = None) -> "StepRecord":
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "artifacts"}
        step = _load(cls, data, "step", notes)
        step.timings = {k: step.timings.get(k) for k in TIMING_KEYS}
        step.artifacts = artifacts.get(step.graph_hash)
        return step


@dataclass
class RankRecord:
    """One rank of a multi-process launch (``xmp.spawn``, ``torch_xla.launch``) that ran in the cell,
    recorded in its worker (``capture/worker.py``) and joined in the kernel (``capture/ranks.py``)."""

    rank: Int
    launch: Int  # which launch of the cell (1-based, in the order they ended)
    process: Int  # the worker's process id
    status: RankStatus
    device: str | None = None
    error: str | None = None
    started_at: Num | None = None
    ended_at: Num | None = None
    # the rank's explicit syncs, as a single-device cell's steps (compile seconds are the rank's own)
    steps: list[StepRecord] = field(default_factory=list)
    # per step: the rank's wall time from its previous sync's return (or its start) to this sync's return
    step_s: list[Num] = field(default_factory=list)
    # per step: where it synced ({"cell", "line", "code"} or {"file", "line", "function", "code"})
    lines: list[Line | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = _fields_dict(self, ("steps",))
        data["steps"] = [s.to_dict() for s in self.steps]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], artifacts: dict[str, GraphArtifacts],
                  notes: list[str] | None = None) -> "RankRecord":
        fields = {k: v for k, v in data.items() if k != "steps"} if isinstance(data, dict) else data
        rank = _load(cls, fields, "rank", notes)
        rank.steps = _items(StepRecord, data.get("steps"), f"rank {rank.rank}: steps", notes, artifacts)
        return rank


@dataclass
class CellCapture:
    """Everything recorded for one run of one ``%%xla`` cell."""

    cell_id: str
    execution_count: Int | None
    source: str
    started_at: Num
    graph_name: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: Num | None = None
    # Transfers (and anything else timed) that happened after the last sync of the cell.
    outside_steps: dict[str, Num] = field(default_factory=dict)
    # Deltas of torch_xla.debug.metrics over the cell: the numbers the step timings add up to.
    metrics: Metrics = field(default_factory=dict)
    fallback_ops: dict[str, Int] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    # %%xla --profile: measured time joined to the steps and kernels (profile/join.py join_profile),
    # with the machine's peaks for the roofline; None when the cell was not profiled
    profile: Profile | None = None
    # multi-process launches in the cell: each rank's own steps (the kernel's are ``steps``), and per
    # launch {"launch", "function", "start_method", "processes", "error"}
    ranks: list[RankRecord] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    # what would cut the cell's compile time (profile/compile_advice.py): [{"kind", "text", "evidence",
    # "graph_hash" (None: the cell's), "line" (a source reference or None), "compiled_in"}]
    advice: list[Advice] = field(default_factory=list)
    schema: str = SCHEMA

    # --- summaries used by every view -------------------------------------------------------
    @property
    def compiles(self) -> int:
        return sum(1 for s in self.steps if s.cache == "miss")

    @property
    def cache_hits(self) -> int:
        return sum(1 for s in self.steps if s.cache == "hit")

    @property
    def precompiled(self) -> int:
        return sum(1 for s in self.steps if s.cache == "precompiled")

    def total(self, key: str) -> float:
        """Sum of one timing over the steps (missing values count as 0)."""
        return sum(s.timings.get(key) or 0.0 for s in self.steps)

    def artifacts(self) -> dict[str, GraphArtifacts]:
        """The distinct graphs this cell ran, by hash."""
        out: dict[str, GraphArtifacts] = {}
        for s in self.steps + [s for r in self.ranks for s in r.steps]:
            if s.artifacts is not None:
                out.setdefault(s.graph_hash, s.artifacts)
        return out

    # --- JSON -------------------------------------------------------------------------------
    def to_dict(self, artifacts: bool = True) -> dict[str, Any]:
        """``artifacts=False``: without the graphs' texts and analyses (steps, timings, notes: a few KB)."""
        data = _fields_dict(self, ("steps", "ranks"))
        data["steps"] = [s.to_dict() for s in self.steps]
        data["ranks"] = [r.to_dict() for r in self.ranks]
        data["artifacts"] = {h: a.to_dict() for h, a in self.artifacts().items()} if artifacts else {}
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CellCapture":
        if not isinstance(data, dict):
            raise CaptureFormatError("a capture must be a JSON object")
        schema = data.get("schema")
        if not isinstance(schema, str) or not schema.startswith("xla_lab.capture/"):
            raise CaptureFormatError(f"not an xla_lab capture (schema={reprlib.repr(schema)})")
        if schema != SCHEMA:
            raise CaptureFormatError(f"capture schema {schema!r} is not readable by this xla_lab ({SCHEMA})")
        if _depth(data) > MAX_DEPTH:
            raise CaptureFormatError(f"capture JSON is nested more than {MAX_DEPTH} levels deep")
        notes: list[str] = []
        raw_artifacts = data.get("artifacts") or {}
        if not isinstance(raw_artifacts, dict):
            notes.append("left out of this saved capture: its graphs ('artifacts' is not an object of graph "
                         "hash -> graph)")
            raw_artifacts = {}
        artifacts = {}
        for graph_hash, raw in raw_artifacts.items():
            try:
                artifacts[graph_hash] = GraphArtifacts.from_dict(raw, notes)
            except CaptureFormatError as exc:
                notes.append(f"left out of this saved capture: graph {graph_hash[:12]!r} ({exc})")
        top = {k: v for k, v in data.items() if k not in ("artifacts", "steps", "ranks")}
        capture = _load(cls, top, "capture", notes)
        capture.steps = _items(StepRecord, data.get("steps"), "steps", notes, artifacts)
        capture.ranks = _items(RankRecord, data.get("ranks"), "ranks", notes, artifacts)
        capture.notes = capture.notes + notes
        return capture

    @classmethod
    def from_json(cls, text: str) -> "CellCapture":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CaptureFormatError(f"capture JSON is malformed: {exc}") from None
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number; nesting deeper than Python's stack
            raise CaptureFormatError(f"capture JSON is not readable: {type(exc).__name__}: {str(exc)[:200]}") from None
        try:
            return cls.from_dict(data)
        except RecursionError:
            raise CaptureFormatError("capture JSON is nested too deeply") from None


_ADAPTERS: dict[type, TypeAdapter] = {}
MAX_DEPTH = 64  # no writer nests deeper; a saved capture that does is refused (its unnamed keys are unchecked)


def _depth(value: Any) -> int:
    """How deep JSON data nests (iteratively: a 100,000-deep list must not exhaust the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((v, level + 1) for v in node if isinstance(v, (dict, list)))
    return deepest
_MAX_REPAIRS = 200  # parts left out of one record before it is refused whole


def _adapter(cls) -> TypeAdapter:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def _required(cls) -> set[str]:
    return {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}


def _load(cls, data: Any, what: str, notes: list[str] | None):
    """A record of ``cls`` from saved JSON, validated by its types (``format.py``). A damaged optional
    field is left out (its default) and said in ``notes``; a damaged required field, a record that is
    not an object, or any damage when ``notes`` is None, refuses it with CaptureFormatError."""
    if not isinstance(data, dict):
        raise CaptureFormatError(f"{what} must be a JSON object, got {type(data).__name__}")
    missing = sorted(_required(cls) - set(data))
    if missing:
        raise CaptureFormatError(f"{what} is missing the field {missing[0]!r}")
    data = dict(data)
    for _ in range(_MAX_REPAIRS):
        try:
            return _adapter(cls).validate_python(data)
        except ValidationError as exc:
            error = exc.errors(include_url=False, include_input=False)[0]
        except RecursionError:
            raise CaptureFormatError(f"{what} is nested too deeply") from None
        loc = error["loc"]
        where = ".".join(str(part) for part in loc) or what
        message = f"{what}.{where}: {error['msg']}"
        name = loc[0] if loc else None
        if notes is None or name not in data or name in _required(cls):
            raise CaptureFormatError(message)
        del data[name]  # back to its default
        notes.append(f"left out of this saved capture, damaged: {message}")
    raise CaptureFormatError(f"{what} is damaged in more than {_MAX_REPAIRS} places")


def _items(cls, raw: Any, what: str, notes: list[str], *args) -> list:
    """The records of a saved list (steps, ranks): a damaged one is left out and said."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        notes.append(f"left out of this saved capture: {what} (not a list)")
        return []
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(cls.from_dict(item, *args, notes))
        except CaptureFormatError as exc:
            notes.append(f"left out of this saved capture: {what}[{i}] ({exc})")
    return out
