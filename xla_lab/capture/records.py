"""The data contract: one ``CellCapture`` per run of a ``%%xla`` cell, one ``StepRecord`` per sync.

Everything xla_lab shows is rendered from these records, and they travel as JSON (versioned) so the
same bytes feed the terminal, notebook outputs, the JupyterLab panel and tests. Heavy per-graph text
(IR, HLO before/after) lives in one ``GraphArtifacts`` per graph hash that every step running that
graph shares: a loop of 10,000 cache hits holds one copy, not 10,000.
"""

from __future__ import annotations

import json
import types
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from . import ir_graph

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
    compiled_in: int | None = None  # execution count of the cell whose run compiled it
    # Analysis of the compile (xla_lab.capture.analysis), once per graph:
    fusions: list[dict] | None = None  # kernels of the optimized module (hlo/fusion_map.py Kernel)
    memory: dict | None = None  # peak / parameter / output / temp bytes, largest buffers
    signature: dict | None = None  # inputs, baked constants, ops, outputs: what recompiles compare
    # constants of 1 MiB or more baked into the graph (hlo/constants.py): [{instruction, shape, bytes, where}]
    large_constants: list[dict] | None = None
    # Per node of the rebuilt graph (ir_source "hlo-before"), by node id: {"ids": [node id],
    # "kernel": [kernel name | None], "scope": [index into "scopes" | -1], "scopes": [str],
    # "line": [index into "lines" | -1], "lines": [{"cell", "line", "code"}]}, the lists parallel to
    # "ids" (analysis.node_info)
    node_info: dict | None = None
    # The graph's while loops (scan, scan_layers, while_loop, fori_loop; analysis.loop_records), outer
    # first: [{"instruction", "computation", "body", "condition", "trip_count" (None: not known before
    # it runs), "trip_count_from" ("backend_config" | "condition" | None), "runs" (body runs per
    # execution of the graph), "parent" (the enclosing loop's instruction), "op" (torch_xla's op name,
    # e.g. "xla__scan"), "kernels" (names of the kernels it runs), "lines" / "model_lines" (the line
    # that called the loop)}]. None in captures made before loops were recorded.
    loops: list[dict] | None = None
    # SPMD (hlo/sharding.py spmd_summary): device count, each input's layout on the devices, each
    # collective with its payload, groups and cell lines. None for graphs on one device.
    spmd: dict | None = None
    # Where the compile's seconds went (profile/compile_profile.py): phases, passes, per-kernel compile
    # time, counts; None when the compile was not profiled (the reason is in the capture's notes)
    compile_profile: dict | None = None
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
    dump_files: int | None = None
    dump_bytes: int | None = None

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
    def from_dict(cls, data: dict[str, Any]) -> "GraphArtifacts":
        return cls(**_known(cls, data, "artifact"))


@dataclass
class StepRecord:
    """One sync of the lazy graph: a ``torch_xla.sync()``, an implicit sync (``.item()``, ``print``),
    or the sync ``%%xla`` does at the end of the cell."""

    index: int
    graph_name: str | None
    graph_hash: str
    cache: str  # "miss" | "hit" | "precompiled"
    sync_cause: str
    sync_line: int | None = None  # line of the cell that forced the sync (1-based), if in the cell
    sync_code: str | None = None  # the text of that line
    timings: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(TIMING_KEYS))
    fallback_ops: dict[str, int] = field(default_factory=dict)
    recompile_reason: str | None = None  # for cache misses: what changed from the nearest earlier graph
    saved_s: float | None = None  # cache="precompiled": the compile seconds a precompile job took off this step
    artifacts: GraphArtifacts | None = field(default=None, repr=False)

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
    def from_dict(cls, data: dict[str, Any], artifacts: dict[str, GraphArtifacts]) -> "StepRecord":
        fields = _known(cls, data, "step")
        fields.pop("artifacts", None)
        if fields.get("cache") not in CACHE_STATES:
            raise CaptureFormatError(f"step {data.get('index')}: unknown cache state {data.get('cache')!r}")
        timings = fields.get("timings") or {}
        fields["timings"] = {k: timings.get(k) for k in TIMING_KEYS}
        return cls(**fields, artifacts=artifacts.get(fields["graph_hash"]))


@dataclass
class RankRecord:
    """One rank of a multi-process launch (``xmp.spawn``, ``torch_xla.launch``) that ran in the cell,
    recorded in its worker (``capture/worker.py``) and joined in the kernel (``capture/ranks.py``)."""

    rank: int
    launch: int  # which launch of the cell (1-based, in the order they ended)
    process: int  # the worker's process id
    status: str  # "ok" | "raised" | "killed"
    device: str | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    # the rank's explicit syncs, as a single-device cell's steps (compile seconds are the rank's own)
    steps: list[StepRecord] = field(default_factory=list)
    # per step: the rank's wall time from its previous sync's return (or its start) to this sync's return
    step_s: list[float] = field(default_factory=list)
    # per step: where it synced ({"cell", "line", "code"} or {"file", "line", "function", "code"})
    lines: list[dict | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = _fields_dict(self, ("steps",))
        data["steps"] = [s.to_dict() for s in self.steps]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], artifacts: dict[str, GraphArtifacts]) -> "RankRecord":
        fields = _known(cls, data, "rank")
        fields["steps"] = [StepRecord.from_dict(s, artifacts) for s in data.get("steps") or []]
        return cls(**fields)


@dataclass
class CellCapture:
    """Everything recorded for one run of one ``%%xla`` cell."""

    cell_id: str
    execution_count: int | None
    source: str
    started_at: float
    graph_name: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float | None = None
    # Transfers (and anything else timed) that happened after the last sync of the cell.
    outside_steps: dict[str, float] = field(default_factory=dict)
    # Deltas of torch_xla.debug.metrics over the cell: the numbers the step timings add up to.
    metrics: dict[str, Any] = field(default_factory=dict)
    fallback_ops: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    # %%xla --profile: measured time joined to the steps and kernels (profile/join.py join_profile),
    # with the machine's peaks for the roofline; None when the cell was not profiled
    profile: dict | None = None
    # multi-process launches in the cell: each rank's own steps (the kernel's are ``steps``), and per
    # launch {"launch", "function", "start_method", "processes", "error"}
    ranks: list[RankRecord] = field(default_factory=list)
    launches: list[dict] = field(default_factory=list)
    # what would cut the cell's compile time (profile/compile_advice.py): [{"kind", "text", "evidence",
    # "graph_hash" (None: the cell's), "line" (a source reference or None), "compiled_in"}]
    advice: list[dict] = field(default_factory=list)
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
            raise CaptureFormatError(f"not an xla_lab capture (schema={schema!r})")
        if schema != SCHEMA:
            raise CaptureFormatError(f"capture schema {schema!r} is not readable by this xla_lab ({SCHEMA})")
        raw_artifacts = data.get("artifacts") or {}
        if not isinstance(raw_artifacts, dict):
            raise CaptureFormatError("capture: field 'artifacts' must be an object (graph hash -> artifacts)")
        artifacts = {h: GraphArtifacts.from_dict(a) for h, a in raw_artifacts.items()}
        fields = _known(cls, data, "capture")
        fields.pop("artifacts", None)
        fields["steps"] = [StepRecord.from_dict(s, artifacts) for s in data.get("steps") or []]
        fields["ranks"] = [RankRecord.from_dict(r, artifacts) for r in data.get("ranks") or []]
        return cls(**fields)

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


def _known(cls, data: dict[str, Any], what: str) -> dict[str, Any]:
    """Keep the keys ``cls`` knows (newer writers may add fields); insist on the required ones."""
    if not isinstance(data, dict):
        raise CaptureFormatError(f"{what} must be a JSON object")
    out = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
    for name, f in cls.__dataclass_fields__.items():
        required = f.default is MISSING and f.default_factory is MISSING
        if required and name not in out:
            raise CaptureFormatError(f"{what} is missing the field {name!r}")
    hints = _hints(cls)
    for name, value in out.items():
        allowed = hints.get(name)
        if allowed is not None and not isinstance(value, allowed):
            names = " or ".join(sorted({"null" if t is type(None) else t.__name__ for t in allowed}))
            raise CaptureFormatError(f"{what}: field {name!r} must be {names}, got {type(value).__name__}")
    _check_nested(cls, out, what)
    return out


_JSON_TYPES: dict[type, tuple] = {}


def _hints(cls) -> dict[str, tuple]:
    """Field -> the JSON types it may hold (from the dataclass annotations), so hostile or broken JSON
    fails here with the field's name instead of somewhere in a view."""
    if cls not in _JSON_TYPES:
        import typing

        table = {str: (str,), int: (int,), float: (int, float), bool: (bool,), dict: (dict,), list: (list,),
                 type(None): (type(None),)}
        out = {}
        for name, hint in typing.get_type_hints(cls).items():
            if name == "artifacts" and cls is StepRecord:
                continue
            options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
            allowed: tuple = ()
            for option in options:
                base = typing.get_origin(option) or option
                if base not in table:
                    break
                allowed += table[base]
            else:
                out[name] = allowed
        _JSON_TYPES[cls] = out
    return _JSON_TYPES[cls]


# --- the nested parts every view reads ----------------------------------------------------------
# A schema is a type tuple, [item schema] for a list, {key: schema} for an object (a key ending in
# "?" may be absent), or ("map", value schema) for an object with free keys.
_NUM = (int, float)
_NONE = type(None)
_LINE = {"cell?": (int, _NONE), "line": (int,), "code?": (str, _NONE), "file?": (str, _NONE),
         "function?": (str, _NONE)}
_KERNEL = {"name": (str,), "kind": (str,), "computation?": (str,), "members": [(str,)], "aten_ops": [(str,)],
           "lines": [_LINE], "sources": [(str,)], "shape": (str,), "flops": _NUM, "bytes": _NUM,
           "collective?": (bool,), "lines_inferred?": (bool,), "model_lines?": [_LINE],
           "runs?": (int, _NONE), "loop?": (str, _NONE)}
_LOOP = {"instruction": (str,), "computation?": (str,), "body": (str,), "condition?": (str,),
         "trip_count": (int, _NONE), "trip_count_from?": (str, _NONE), "runs?": (int, _NONE),
         "parent?": (str, _NONE), "op?": (str, _NONE), "kernels": [(str,)], "lines": [_LINE],
         "model_lines?": [_LINE], "backward?": (bool,)}
_MEMORY = {"peak_bytes?": _NUM, "parameter_bytes?": _NUM, "output_bytes?": _NUM, "temp_bytes?": _NUM,
           "constant_bytes?": _NUM, "largest?": [{"bytes": _NUM, "kind": (str,), "instruction?": (str, _NONE),
                                                 "shape?": (str, _NONE), "source?": (_LINE, _NONE)}]}
_SPMD = {"devices": (int,), "memory_per_device?": (bool,),
         "tensors": [{"name": (str,), "role": (str,), "shape": (str,), "sharding": (str,), "layout": (str,),
                      "per_device_shape": (str,), "blocks": [{"tile": [(int,)], "ranges": [[(int,)]],
                                                              "devices": [(int,)]}], "lines?": [_LINE]}],
         "collectives": [{"name": (str,), "kind": (str,), "shape": (str,), "bytes": _NUM, "groups": [[(int,)]],
                          "group_size": (int,), "lines": [_LINE], "lines_inferred?": (bool,),
                          "sources?": [(str,)]}]}
_STAT = [_NUM]  # [count, total ns, longest ns], per kernel (and per other event of the module)
_COMPUTE = {"runs": (int,), "compute_ns": _NUM, "shared_ns": _NUM, "median_ns?": _NUM, "left_out": ("map", [_NUM])}
_PROFILE = {"steps": [{"step": (int,), "graph_hash": (str,), "start_ns": _NUM, "span_ns": _NUM, "busy_ns": _NUM,
                       "kernel_ns": _NUM, "compute_ns?": _NUM, "left_out_ns?": _NUM, "wall_ns?": (int, float, _NONE),
                       "idle_before_ns": _NUM, "host": ("map", _NUM)}],
            "graphs": ("map", {"module": (str,), "executions": (int,), "kernels": ("map", _STAT),
                               "other": ("map", _STAT), "compute?": ("map", _COMPUTE)}),
            "unmatched_executions": (int,), "unmatched_ns": _NUM, "span_ns": _NUM,
            "timeline": [[(str, int, float)]], "timeline_dropped": (int,),
            "peaks?": ({"flops_per_s": _NUM, "bytes_per_s": _NUM, "source": (str,)}, _NONE)}
_NODE_INFO = {"ids": [(int,)], "kernel": [(str, _NONE)], "scope": [(int,)], "scopes": [(str,)], "line": [(int,)],
              "lines": [{"cell?": (int, _NONE), "line": (int,), "code?": (str, _NONE)}]}
_NESTED = {
    GraphArtifacts: {"fusions": [_KERNEL], "loops": [_LOOP], "memory": _MEMORY, "spmd": _SPMD, "node_info": _NODE_INFO,
                     "large_constants": [{"instruction": (str,), "shape": (str,), "bytes": _NUM,
                                          "where?": (str, _NONE)}]},
    StepRecord: {"timings": ("map", (int, float, _NONE)), "fallback_ops": ("map", (int,))},
    RankRecord: {"step_s": [_NUM], "lines": [(_LINE, _NONE)]},
    CellCapture: {"notes": [(str,)], "launches": [{"launch": (int,), "function": (str,), "start_method": (str,),
                                                   "processes": (int,), "error?": (str, _NONE)}], "fallback_ops": ("map", (int,)), "outside_steps": ("map", _NUM),
                  "profile": _PROFILE,
                  "metrics": ("map", (int, float, str, list, dict, _NONE))},
}


def _check_nested(cls, fields: dict[str, Any], what: str) -> None:
    for name, schema in _NESTED.get(cls, {}).items():
        if fields.get(name) is not None:
            _check(fields[name], schema, f"{what}.{name}")
    if cls is GraphArtifacts and fields.get("node_info") is not None:
        _check_node_info(fields["node_info"], f"{what}.node_info")
    if cls is CellCapture and fields.get("profile") is not None:
        _check_profile(fields["profile"], f"{what}.profile")


def _check_profile(profile: dict, path: str) -> None:
    """Kernel stats are [count, total ns, longest ns]; timeline rows [lane, name, start, duration, step]."""
    for graph_hash, graph in profile["graphs"].items():
        for table, size in (("kernels", 3), ("other", 3)):
            for name, stat in graph[table].items():
                if len(stat) != size:
                    raise CaptureFormatError(f"{path}.graphs[{graph_hash!r}].{table}[{name!r}] must be "
                                             f"[count, total ns, longest ns]")
    for i, row in enumerate(profile["timeline"]):
        if len(row) != 5 or not (isinstance(row[0], str) and isinstance(row[1], str)
                                 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row[2:])):
            raise CaptureFormatError(f"{path}.timeline[{i}] must be [lane, name, start ns, duration ns, step]")


def _check_node_info(info: dict, path: str) -> None:
    """The per-node lists run parallel to ``ids`` and index into ``scopes`` / ``lines`` (-1: none)."""
    n = len(info["ids"])
    for key, table in (("kernel", None), ("scope", "scopes"), ("line", "lines")):
        if len(info[key]) != n:
            raise CaptureFormatError(f"{path}.{key} has {len(info[key])} entries for {n} nodes")
        if table is not None:
            size = len(info[table])
            bad = next((i for i in info[key] if not -1 <= i < size), None)
            if bad is not None:
                raise CaptureFormatError(f"{path}.{key} refers to {table}[{bad}] of {size}")


def _check(value: Any, schema, path: str) -> None:
    if isinstance(schema, list):
        if not isinstance(value, list):
            raise CaptureFormatError(f"{path} must be a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check(item, schema[0], f"{path}[{i}]")
    elif isinstance(schema, dict):
        if not isinstance(value, dict):
            raise CaptureFormatError(f"{path} must be an object, got {type(value).__name__}")
        for key, sub in schema.items():
            name = key.rstrip("?")
            if name not in value:
                if key.endswith("?"):
                    continue
                raise CaptureFormatError(f"{path} is missing {name!r}")
            _check(value[name], sub, f"{path}.{name}")
    elif schema and schema[0] == "map":
        if not isinstance(value, dict):
            raise CaptureFormatError(f"{path} must be an object, got {type(value).__name__}")
        for key, item in value.items():
            _check(item, schema[1], f"{path}[{key!r}]")
    else:  # a tuple of types, possibly holding nested schemas
        plain = tuple(t for t in schema if isinstance(t, type))
        if isinstance(value, plain):
            return
        for option in schema:
            if isinstance(option, dict) and isinstance(value, dict):
                return _check(value, option, path)
        names = " or ".join(sorted({"null" if t is _NONE else t.__name__ for t in plain} | (
            {"object"} if any(isinstance(o, dict) for o in schema) else set())))
        raise CaptureFormatError(f"{path} must be {names}, got {type(value).__name__}")
