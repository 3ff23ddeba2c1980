"""Turn one compile's dump into answers, once per graph: the fusion map, memory, the graph signature.

Source lines: every op's full Python stack comes from the binary dump (``hlo/proto_frames.py``);
the first frame in a notebook cell gives the *cell line* shown to the user (``{"cell": 5, "line": 3,
"code": "loss = model(x).sum()"}``), the innermost frame the library location ("linear.py:134").
"""

from __future__ import annotations

import functools
import gc
import linecache
import os

from xla_lab.hlo.fusion_map import build_fusion_map
from xla_lab.hlo.memory import memory_summary
from xla_lab.hlo.parser import HloModule, HloParseError, parse_module
from xla_lab.hlo.proto_frames import ProtoError, PyFrame, instruction_stacks
from xla_lab.hlo.recompile import graph_signature
from xla_lab.hlo.sharding import ShardingParseError, spmd_summary

from .lowered_graph import format_ir_text, ir_nodes_from_module
from .records import GraphArtifacts


class CellFiles:
    """Which source files are notebook cells, and their execution counts."""

    def __init__(self, files: dict[str, int | None] | None = None):
        self.files = dict(files or {})

    @classmethod
    def from_shell(cls, shell, current_file: str | None, current_count: int | None) -> "CellFiles":
        files: dict[str, int | None] = {}
        try:
            files.update(shell.compile._filename_map)  # IPython's own map: file -> In[N]
        except AttributeError:
            pass
        if current_file:
            files[current_file] = current_count
        return cls(files)

    def line(self, stack: list[PyFrame]) -> dict | None:
        """The innermost frame of the stack that is in a notebook cell."""
        for frame in stack:
            if frame.file in self.files:
                code = linecache.getline(frame.file, frame.line).strip() or None
                return {"cell": self.files[frame.file], "line": frame.line, "code": code}
        return None


def analyze(art: GraphArtifacts, proto_before: bytes | None, proto_after: bytes | None,
            cells: CellFiles) -> list[str]:
    """Fill ``art.fusions``, ``art.memory``, ``art.signature`` and (unless torch_xla's own IR text is
    there) ``art.ir_text`` rebuilt from the HLO. Returns problems worth a note.

    Call stacks are read from the pre-optimization proto only (small; the optimized one of a large
    model is 10x bigger and slow to decode in Python). Optimized instructions keep their op's
    metadata, so they are matched back to the pre-optimization ops with the same aten op, innermost
    frame and dimensions; where several such ops came from different cell lines, the kernel lists
    them all. ``proto_after`` is accepted for callers that have it but not needed.
    """
    del proto_after
    # A large model's analysis builds a few hundred thousand small objects; the garbage collector
    # would rescan them again and again (a third of the time) though nothing here makes cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze(art, proto_before, cells)
    finally:
        if was_enabled:
            gc.enable()


def _analyze(art: GraphArtifacts, proto_before: bytes | None, cells: CellFiles) -> list[str]:
    problems: list[str] = []
    after = _parse(art.hlo_after, "optimized HLO", problems)
    before = _parse(art.hlo_before, "HLO before optimization", problems)
    stacks_before = _stacks(proto_before, problems)

    def first_line(name: str) -> dict | None:
        return cells.line(stacks_before.get(name, []))

    if after is not None:
        lines_by_key = _lines_by_key(before, stacks_before, cells) if before is not None else {}

        def lines_of(ins) -> list[dict]:
            key = _key(ins)
            if key is None:
                return []
            # XLA may reshape an op while optimizing: fall back to matching without dimensions.
            return lines_by_key.get(key) or lines_by_key.get(key[:3], [])

        fmap = build_fusion_map(after, lines_of, _innermost)
        art.fusions = [k.to_dict() for k in fmap.kernels]
        art.memory = memory_summary(art.memory_report, art.buffer_assignment,
                                    source_of=lambda name: _source(after, name, lines_of))


    if before is not None:
        nodes = ir_nodes_from_module(before)
        if art.ir_source != "lazy-ir":  # torch_xla's own IR text (IR log on) is preferred
            art.ir_text = format_ir_text(nodes)
            art.ir_source = "hlo-before"
        for n in nodes:
            where = None
            for member in n["hlo"]:
                where = first_line(member)
                if where:
                    break
            n["where"] = _describe(where) if where else n.get("location")
        art.signature = graph_signature(
            before, [{"op": n["op"], "shape": n["shape"], "where": n["where"]} for n in nodes], first_line)
    try:
        art.spmd = spmd_summary(before, after, art.fusions, lambda ins: first_line(ins.name))
    except ShardingParseError as exc:
        problems.append(f"could not read the graph's shardings: {exc}")
    return problems


def _key(ins) -> tuple | None:
    md = ins.metadata
    if not md.get("op_type"):
        return None
    return md.get("op_type"), md.get("source_file"), md.get("source_line"), ins.shape.dims


def _lines_by_key(before: HloModule, stacks: dict[str, list[PyFrame]], cells: CellFiles) -> dict:
    out: dict[tuple, dict[tuple, dict]] = {}
    for ins in before.instructions():
        key = _key(ins)
        if key is None:
            continue
        ln = cells.line(stacks.get(ins.name, []))
        for k in (key, key[:3]):
            bucket = out.setdefault(k, {})
            if ln:
                bucket.setdefault((ln["cell"], ln["line"]), ln)
    return {k: list(v.values()) for k, v in out.items()}


def _innermost(ins) -> str | None:
    return _short(ins.source) if ins.source else None


@functools.lru_cache(maxsize=4096)
def _short(source: tuple[str, int]) -> str:
    return f"{os.path.basename(source[0])}:{source[1]}"


def _describe(ln: dict) -> str:
    from xla_lab.hlo.recompile import describe_line

    return describe_line(ln)


def _source(module: HloModule, name: str, lines_of) -> dict | None:
    try:
        ins = module.instruction(name)
    except KeyError:
        return None
    lines = lines_of(ins)
    if lines:
        return lines[0]
    if ins.source:
        return {"cell": None, "line": ins.source[1], "file": os.path.basename(ins.source[0]), "code": None}
    return None


def _parse(text: str | None, what: str, problems: list[str]) -> HloModule | None:
    if not text:
        return None
    try:
        return parse_module(text)
    except HloParseError as exc:
        problems.append(f"could not read the {what}: {exc}")
        return None


def _stacks(data: bytes | None, problems: list[str]) -> dict[str, list[PyFrame]]:
    if not data:
        return {}
    try:
        return instruction_stacks(data)
    except ProtoError as exc:
        problems.append(f"could not read call stacks from XLA's binary dump: {exc}")
        return {}
