"""The shapes of a capture's nested sections, as types: what the records' fields (``records.py``) hold
beneath them. One definition: pydantic validates a saved capture against these types (and the
records' dataclass fields that name them), and the JSON Schema that the extension's TypeScript types
are generated from is made from them (``schema.py``).

Why pydantic: it validates stdlib dataclasses and ``TypedDict``s as they are (the records stay plain
dataclasses; the sections stay dicts, which every view reads), reports each error with its location
(so a damaged part can be named and dropped while the rest loads), and writes JSON Schema from the
same types. Keys that these types do not name (a newer writer's) are kept as they are, unchecked
(``extra="allow"``): every key a view reads is named here (the fuzzer mutates every key of the
recorded captures), and a capture nested deeper than any writer nests is refused whole
(``records.MAX_DEPTH``: the fuzzer once put a 3,000-deep list under an unnamed key).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, with_config
from typing_extensions import NotRequired, TypedDict



def _bounded(value):
    """Numbers a view can do arithmetic on: finite, within float's range (lax validation reads a
    400-digit string as an int, and float() of it overflows)."""
    if isinstance(value, float) and not math.isfinite(value) or abs(value) > 1e300:
        raise ValueError("number out of range")
    return value


def _parses(text: str) -> str:
    """An HLO shape that parses (views compare and size shapes: a hand-edited one must not reach them)."""
    from xla_lab.hlo.shapes import parse_shape

    try:
        parse_shape(text)
    except Exception as exc:
        raise ValueError(f"not an HLO shape: {str(exc)[:80]}") from None
    return text


Shape = Annotated[str, AfterValidator(_parses)]


class Row:
    """A fixed-length JSON array of these types, kept a list as the writer made it (``Row[str, Num]``)."""

    def __class_getitem__(cls, items):
        return Annotated[tuple[items], AfterValidator(list)]
Int = Annotated[int, AfterValidator(_bounded)]
Num = Annotated[int | float, AfterValidator(_bounded)]  # (an int stays an int: JSON numbers round-trip as they were)
_OPEN = ConfigDict(extra="allow")
Scalar = str | Int | float | bool | None


@with_config(_OPEN)
class Line(TypedDict):
    """A source reference: a cell's line (``cell``: its prompt, None when unknown) or a file's."""
    line: Int
    cell: NotRequired[Int | None]
    code: NotRequired[str | None]
    file: NotRequired[str | None]
    function: NotRequired[str | None]


@with_config(_OPEN)
class Kernel(TypedDict):
    """A kernel of the optimized module (``hlo/fusion_map.py``)."""
    name: str
    kind: str
    members: list[str]
    aten_ops: list[str]
    lines: list[Line]
    sources: list[str]
    shape: str
    flops: Num
    bytes: Num
    computation: NotRequired[str]
    collective: NotRequired[bool]
    lines_inferred: NotRequired[bool]
    model_lines: NotRequired[list[Line]]
    runs: NotRequired[Int | None]
    loop: NotRequired[str | None]


@with_config(_OPEN)
class Loop(TypedDict):
    """A while loop of the graph (scan, scan_layers, while_loop, fori_loop)."""
    instruction: str
    body: str
    trip_count: Int | None
    kernels: list[str]
    lines: list[Line]
    computation: NotRequired[str]
    condition: NotRequired[str]
    trip_count_from: NotRequired[str | None]
    runs: NotRequired[Int | None]
    parent: NotRequired[str | None]
    op: NotRequired[str | None]
    model_lines: NotRequired[list[Line]]
    backward: NotRequired[bool]


@with_config(_OPEN)
class Buffer(TypedDict):
    bytes: Num
    kind: str
    allocation: NotRequired[Int | None]
    parameter: NotRequired[Int | None]
    values: NotRequired[Int | None]
    instruction: NotRequired[str | None]
    shape: NotRequired[str | None]
    source: NotRequired[Line | None]


@with_config(_OPEN)
class Memory(TypedDict, total=False):
    """XLA's buffer assignment, summed."""
    peak_bytes: Num
    parameter_bytes: Num
    output_bytes: Num
    temp_bytes: Num
    constant_bytes: Num
    live_out_bytes: Num
    allocations: Int
    largest: list[Buffer]


@with_config(_OPEN)
class Block(TypedDict):
    tile: list[Int]
    ranges: list[Row[Int, Int]]  # per dimension, [start, end)
    devices: list[Int]


def _same_rank(tensor: dict) -> dict:
    """Every block of a tensor has one tile index and one range per dimension (the mesh is drawn
    from them)."""
    ranks = {len(b["tile"]) for b in tensor["blocks"]} | {len(b["ranges"]) for b in tensor["blocks"]}
    if len(ranks) > 1 or 0 in ranks or any(t < 0 for b in tensor["blocks"] for t in b["tile"]):
        raise ValueError("the blocks' tiles and ranges do not have one entry per dimension")
    return tensor


@with_config(ConfigDict(extra="allow", title="ShardedTensor"))  # (the schema's name: without the check)
class _ShardedTensor(TypedDict):
    name: str
    role: str
    shape: Shape
    sharding: str
    layout: str
    per_device_shape: str
    blocks: list[Block]
    lines: NotRequired[list[Line]]


ShardedTensor = Annotated[_ShardedTensor, AfterValidator(_same_rank)]


@with_config(_OPEN)
class Collective(TypedDict):
    name: str
    kind: str
    shape: Shape
    bytes: Num
    groups: list[list[Int]]
    group_size: Int
    lines: list[Line]
    lines_inferred: NotRequired[bool]
    sources: NotRequired[list[str]]
    computation: NotRequired[str | None]


@with_config(_OPEN)
class Spmd(TypedDict):
    """An SPMD graph's devices, inputs' layouts and collectives (``hlo/sharding.py``)."""
    devices: Int
    tensors: list[ShardedTensor]
    collectives: list[Collective]
    memory_per_device: NotRequired[bool]


@with_config(_OPEN)
class NodeLine(TypedDict):
    line: Int
    cell: NotRequired[Int | None]
    code: NotRequired[str | None]


def _parallel(info: dict) -> dict:
    """The per-node lists run parallel to ``ids`` and index into ``scopes`` / ``lines`` (-1: none)."""
    n = len(info["ids"])
    for key, table in (("kernel", None), ("scope", "scopes"), ("line", "lines")):
        if len(info[key]) != n:
            raise ValueError(f"{key} has {len(info[key])} entries for {n} nodes")
        if table is not None:
            size = len(info[table])
            bad = next((i for i in info[key] if not -1 <= i < size), None)
            if bad is not None:
                raise ValueError(f"{key} refers to {table}[{bad}] of {size}")
    return info


@with_config(ConfigDict(extra="allow", title="NodeInfo"))  # (the schema's name: without the check)
class _NodeInfo(TypedDict):
    ids: list[Int]
    kernel: list[str | None]
    scope: list[Int]
    scopes: list[str]
    line: list[Int]
    lines: list[NodeLine]


NodeInfo = Annotated[_NodeInfo, AfterValidator(_parallel)]


@with_config(_OPEN)
class LargeConstant(TypedDict):
    instruction: str
    shape: Shape
    bytes: Num
    where: NotRequired[str | None]


@with_config(_OPEN)
class Param(TypedDict):
    index: Int
    shape: Shape
    where: NotRequired[str | None]


@with_config(_OPEN)
class Constant(TypedDict):
    value: str
    shape: Shape
    op: str
    where: NotRequired[str | None]


@with_config(_OPEN)
class Node(TypedDict):
    op: str
    shape: Shape
    where: NotRequired[str | None]


@with_config(_OPEN)
class Signature(TypedDict):
    """What a recompile explanation compares (``hlo/signature.py``)."""
    params: list[Param]
    constants: list[Constant]
    nodes: list[Node]
    outputs: list[Shape]


@with_config(_OPEN)
class Phase(TypedDict):
    name: str
    ns: Num
    share: Num


@with_config(_OPEN)
class Pass(TypedDict):
    name: str
    ns: Num
    count: Int


@with_config(_OPEN)
class Pipeline(TypedDict):
    name: str
    ns: Num


@with_config(_OPEN)
class KernelCompile(TypedDict):
    name: str
    ns: Num
    op_count: NotRequired[Num | None]
    start_ns: NotRequired[Num]


def _positive_compile(profile: dict) -> dict:
    if profile["compile_ns"] <= 0:
        raise ValueError("compile_ns must be positive")
    return profile


@with_config(ConfigDict(extra="allow", title="CompileProfile"))  # (the schema's name: without the check)
class _CompileProfile(TypedDict):
    """Where one compile's seconds went (``profile/compile_profile.py``)."""
    compile_ns: Num
    explained: Num
    phases: list[Phase]
    kernels: list[KernelCompile]
    lowering_ns: NotRequired[Num | None]
    traced: NotRequired[Num | None]
    execution_wait_ns: NotRequired[Num | None]
    kernel_threads: NotRequired[Int | None]
    kernel_thread_ns: NotRequired[Num | None]
    kernel_events: NotRequired[bool | None]
    module: NotRequired[str | None]
    step: NotRequired[Int | None]
    started_ns: NotRequired[Num]
    thread: NotRequired[str | Int | None]
    passes: NotRequired[list[Pass]]
    pipelines: NotRequired[list[Pipeline]]
    codegen: NotRequired[dict[str, Num | None]]
    counts: NotRequired[dict[str, Num | None]]


CompileProfile = Annotated[_CompileProfile, AfterValidator(_positive_compile)]

Stat = Row[Num, Num, Num]  # a kernel's (or other event's) [count, total ns, longest ns]


@with_config(_OPEN)
class Compute(TypedDict):
    runs: Int
    compute_ns: Num
    shared_ns: Num
    left_out: dict[str, list[Num]]  # why -> [runs, ns]
    median_ns: NotRequired[Num]


@with_config(_OPEN)
class ProfiledGraph(TypedDict):
    module: str
    executions: Int
    kernels: dict[str, Stat]
    other: dict[str, Stat]
    compute: NotRequired[dict[str, Compute]]


@with_config(_OPEN)
class ProfiledStep(TypedDict):
    step: Int
    graph_hash: str
    start_ns: Num
    span_ns: Num
    busy_ns: Num
    kernel_ns: Num
    idle_before_ns: Num
    host: dict[str, Num]
    compute_ns: NotRequired[Num]
    left_out_ns: NotRequired[Num]
    wall_ns: NotRequired[Num | None]


@with_config(_OPEN)
class Peaks(TypedDict):
    flops_per_s: Num
    bytes_per_s: Num
    source: str


@with_config(_OPEN)
class Profile(TypedDict):
    """``%%xla --profile``: measured time joined to the steps and kernels (``profile/join.py``)."""
    steps: list[ProfiledStep]
    graphs: dict[str, ProfiledGraph]
    unmatched_executions: Int
    unmatched_ns: Num
    span_ns: Num
    timeline: list[Row[str, str, Num, Num, Num]]  # [lane, name, start ns, duration ns, step]
    timeline_dropped: Int
    peaks: NotRequired[Peaks | None]
    recorded_steps: NotRequired[Int]


@with_config(_OPEN)
class Launch(TypedDict):
    """A multi-process launch of the cell."""
    launch: Int
    function: str
    start_method: str
    processes: Int
    error: NotRequired[str | None]


@with_config(_OPEN)
class Advice(TypedDict):
    """What would cut the cell's compile time (``profile/compile_advice.py``); ``evidence`` is the
    kind's own."""
    kind: str
    text: str
    evidence: dict[str, Scalar | list[Scalar]]
    graph_hash: str | None
    line: Line | None
    compiled_in: Int | None


@with_config(_OPEN)
class Metrics(TypedDict, total=False):
    """Deltas of torch_xla's metrics over the cell (``capture/metrics.py``)."""
    totals_s: dict[str, Num]
    counts: dict[str, Int]
    counters: dict[str, Num]
    samples_lost: dict[str, Int]


CacheState = Literal["miss", "hit", "precompiled"]
RankStatus = Literal["ok", "raised", "killed"]
