"""The panel model's shape (schema ``xla_lab.panel/1``), as types: what ``panel_model.py`` builds and the
browser reads. One definition: ``panel_schema.py`` writes the JSON Schema from these types (with the
capture format's, which the model's ``capture`` is), and the extension generates its TypeScript types
and its validator from that file at build time (``extension/gen-types.mjs``). The tests validate every
model the fuzzer and the kernels build against these types, so Python cannot write what the browser's
types do not say.

Fields are required where ``panel_model.py`` always writes them; ``NotRequired`` marks what older
writers left out. Numbers that may be missing are ``None``, never absent.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, WithJsonSchema, with_config
from typing_extensions import NotRequired, TypedDict

from xla_lab.capture.format import Int, Line, Num, Peaks, Pipeline, Phase, Pass

SCHEMA = "xla_lab.panel/1"  # the model's version: its schema file is named by it (panel_schema.py)
_OPEN = ConfigDict(extra="allow")

# The capture as saved (``CellCapture.to_dict()``): its schema is the capture format's (``panel_schema``
# refers to it); the loader (``records.py``) validates it, so here it is only an object.
SavedCapture = Annotated[dict[str, Any], WithJsonSchema({"type": "object"})]


@with_config(_OPEN)
class StepRow(TypedDict):
    """One row of the step table: a run of steps with the same graph, cache result, cause and line
    (``report.StepRow``); ``text`` is the row in one line, as every renderer writes it."""
    steps: str
    first: Int
    last: Int
    count: Int
    cache: str
    cause: str
    ref: Line | None
    graph: str
    compile_s: Num | None
    execute_s: Num | None
    trace_s: Num | None
    text: str


@with_config(_OPEN)
class RankRow(TypedDict):
    """A rank of one of the cell's multi-process launches (``ranks.RankRow``)."""
    launch: Int
    rank: Int
    device: str
    steps: Int
    compiled: Int
    compile_s: Num
    step_s: Num
    mean_step_s: Num | None
    status: str
    line: str


@with_config(_OPEN)
class Recompile(TypedDict):
    step: Int
    reason: str


@with_config(_OPEN)
class Summary(TypedDict):
    rows: list[StepRow]
    steps: Int
    compiles: Int
    cache_hits: Int
    precompiled: Int
    trace_s: Num
    compile_s: Num
    execute_s: Num
    transfer_s: Num
    execution_wait_s: Num
    recompiles: list[Recompile]
    warnings: list[str]
    ranks: list[RankRow]


@with_config(_OPEN)
class GraphNode(TypedDict):
    id: Int
    op: str
    shape: str | None
    cell: Int | None
    line: Int | None
    code: str | None
    scope: str | None
    kernel: str | None


@with_config(_OPEN)
class Graph(TypedDict):
    """A graph's nodes (each with its kernel, scope and cell line), edges ``[src, dst]`` and roots."""
    name: str
    hash: str
    nodes: list[GraphNode]
    edges: list[tuple[Int, Int]]
    roots: list[Int]
    ir_source: NotRequired[str | None]
    steps: NotRequired[list[Int]]
    kernel_share: NotRequired[Num | None]
    absent: NotRequired[str | None]  # why there are no nodes (lean capture)


@with_config(_OPEN)
class SourceLine(TypedDict):
    """A cell line with the main graph's kernels it feeds."""
    line: Int
    code: str
    kernels: list[str]
    flops: NotRequired[Num]


@with_config(_OPEN)
class ModelLine(SourceLine):
    function: str


@with_config(_OPEN)
class ModelFile(TypedDict):
    """A model file (a local module, a library) and its lines that feed kernels."""
    file: str
    lines: list[ModelLine]


@with_config(_OPEN)
class RunStep(TypedDict):
    index: Int
    cache: str
    trace_s: Num | None
    compile_s: Num | None
    execute_s: Num | None
    transfer_s: Num | None
    execution_wait_s: Num | None


@with_config(_OPEN)
class Run(TypedDict):
    """An earlier run of the cell (or this one), for the runs chart."""
    execution_count: Int | None
    started_at: Num
    steps: list[RunStep]


@with_config(_OPEN)
class ProfileKernel(TypedDict):
    """A kernel by measured time, beside its estimates and roofline reading."""
    graph_hash: str
    name: str
    kind: str
    count: Int
    total_ns: Num
    mean_ns: Num
    longest_ns: Num
    share: Num
    flops: Num
    bytes: Num
    flops_per_s: Num | None
    bytes_per_s: Num | None
    roof_share: Num | None
    bound: str | None
    lines: list[Line]
    model_lines: list[Line]
    sources: list[str]
    median_ns: NotRequired[Num | None]
    roof_text: NotRequired[str | None]
    runs: NotRequired[Int | None]
    left_out_text: NotRequired[str | None]


@with_config(_OPEN)
class ProfileLine(TypedDict):
    """A cell line or a model line by the measured time of the kernels it fed."""
    label: str
    cell: Int | None
    line: Int | None
    file: str | None
    code: str | None
    total_ns: Num
    share: Num
    kernels: list[str]


@with_config(_OPEN)
class OpTime(TypedDict):
    op: str
    total_ns: Num
    share: Num


@with_config(_OPEN)
class ProfileStep(TypedDict):
    step: Int
    cache: str
    start_ns: Num
    span_ns: Num
    busy_ns: Num
    kernel_ns: Num
    idle_before_ns: Num
    host: dict[str, Num]
    execute_s: Num | None
    compute_ns: NotRequired[Num | None]
    left_out_ns: NotRequired[Num | None]


@with_config(_OPEN)
class CompareRow(TypedDict):
    name: str
    before_mean_ns: Num | None
    after_mean_ns: Num | None
    before_total_ns: Num
    after_total_ns: Num


# This run's kernels beside the latest earlier profiled run of the cell (``with``: its prompt; a
# keyword in Python, hence the functional form).
Compare = with_config(_OPEN)(TypedDict("Compare", {
    "with": Int | None, "before_step_ns": Num, "after_step_ns": Num, "rows": list[CompareRow]}))


@with_config(_OPEN)
class ProfileTab(TypedDict):
    """Measured time of a profiled cell (``%%xla --profile``), ``panel_model.profile_model``."""
    peaks: Peaks | None
    kernels: list[ProfileKernel]
    kernels_more: Int
    lines: list[ProfileLine]
    model_lines: list[ProfileLine]
    ops: list[OpTime]
    steps: list[ProfileStep]
    compare: Compare | None
    recorded_steps: NotRequired[Int]
    cell_steps: NotRequired[Int]


@with_config(_OPEN)
class CompileCounts(TypedDict, total=False):
    hlo_before: Num | None
    hlo_after: Num | None
    kernels: Num | None
    functions: Num | None


@with_config(_OPEN)
class CompileCodegen(TypedDict, total=False):
    """LLVM codegen: machine code of ``functions`` in ``parts`` on ``threads`` threads."""
    ns: Num | None
    functions: Num | None
    parts: Num | None
    thread_ns: Num | None
    threads: Num | None


@with_config(_OPEN)
class CompileKernel(TypedDict):
    """A kernel's emission time (its HLO to LLVM IR) and the lines it came from."""
    name: str
    kind: str
    ns: Num
    share: Num
    op_count: Num | None
    lines: list[Line]
    model_lines: list[Line]
    aten_ops: list[str]


@with_config(_OPEN)
class Untimed(TypedDict):
    reason: str
    kernels: list[str]


@with_config(_OPEN)
class CompileLine(TypedDict):
    """A line's share of kernel compile time (``kernels``: how many it fed; ``top_kernels``: the longest)."""
    ref: Line | None
    label: str
    ns: Num
    share: Num
    kernels: Int
    top_kernels: list[str]


@with_config(_OPEN)
class CompileOp(TypedDict):
    op: str
    ns: Num
    share: Num


@with_config(_OPEN)
class CompileAdvice(TypedDict):
    kind: str
    text: str
    where: str | None
    line: Line | None


@with_config(_OPEN)
class CompileEntry(TypedDict):
    """Where one compile's seconds went (``panel_model.compile_model``); the phases add up to ``compile_ns``."""
    graph_hash: str
    graph_name: str | None
    step: Int | None
    module: str | None
    compile_ns: Num
    lowering_ns: Num | None
    execution_wait_ns: Num | None
    explained: Num
    phases: list[Phase]
    pipelines: list[Pipeline]
    passes: list[Pass]
    counts: CompileCounts
    codegen: CompileCodegen
    kernel_threads: Int | None
    kernel_thread_ns: Num | None
    kernels: list[CompileKernel]
    untimed: list[Untimed]
    lines: list[CompileLine]
    model_lines: list[CompileLine]
    ops: list[CompileOp]
    advice: list[CompileAdvice]
    text: list[str]  # the summary the terminal prints


@with_config(_OPEN)
class PanelModel(TypedDict):
    """One run of a ``%%xla`` cell as the panel draws it."""
    schema: str
    capture: SavedCapture
    summary: Summary
    main_graph: str | None
    graphs: dict[str, Graph]
    source_lines: list[SourceLine]
    model_files: list[ModelFile]
    runs: list[Run]
    profile: ProfileTab | None
    compile: list[CompileEntry]
    partial: NotRequired[bool]  # a quiet run's steps and summary only (the side panel asks for the rest)
