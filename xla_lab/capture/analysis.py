"""Turn one compile's dump into answers, once per graph: the fusion map, memory, the graph signature.

Source lines: every op's full Python stack comes from the binary dump (``hlo/proto_frames.py``);
the first frame in a notebook cell gives the *cell line* shown to the user (``{"cell": 5, "line": 3,
"code": "loss = model(x).sum()"}``), the innermost frame the library location ("linear.py:134").
"""

from __future__ import annotations

import linecache
import os

from xla_lab.hlo.fusion_map import build_fusion_map
from xla_lab.hlo.memory import memory_summary
from xla_lab.hlo.parser import HloModule, HloParseError, parse_module
from xla_lab.hlo.proto_frames import ProtoError, PyFrame, instruction_stacks
from xla_lab.hlo.recompile import graph_signature

from .lowered_graph import ir_nodes_from_module
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
    """Fill ``art.fusions``, ``art.memory``, ``art.signature``. Returns problems worth a note."""
    problems: list[str] = []
    after = _parse(art.hlo_after, "optimized HLO", problems)
    before = _parse(art.hlo_before, "HLO before optimization", problems)
    stacks_after = _stacks(proto_after, problems)
    stacks_before = _stacks(proto_before, problems)

    def lines_of(stacks):
        def f(name: str) -> list[dict]:
            ln = cells.line(stacks.get(name, []))
            return [ln] if ln else []
        return f

    def first_line(stacks):
        def f(name: str) -> dict | None:
            return cells.line(stacks.get(name, []))
        return f

    def innermost(ins) -> str | None:
        if ins.source:
            file, line = ins.source
            return f"{os.path.basename(file)}:{line}"
        return None

    if after is not None:
        fmap = build_fusion_map(after, lines_of(stacks_after), innermost)
        art.fusions = [k.to_dict() for k in fmap.kernels]
        art.memory = memory_summary(art.memory_report, art.buffer_assignment,
                                    source_of=lambda name: _source(after, name, stacks_after, cells))
    if before is not None:
        nodes = ir_nodes_from_module(before)
        line = first_line(stacks_before)
        for n in nodes:
            where = None
            for member in n["hlo"]:
                where = line(member)
                if where:
                    break
            n["where"] = _describe(where) if where else n.get("location")
        art.signature = graph_signature(
            before, [{"op": n["op"], "shape": n["shape"], "where": n["where"]} for n in nodes], line)
    return problems


def _describe(ln: dict) -> str:
    from xla_lab.hlo.recompile import describe_line

    return describe_line(ln)


def _source(module: HloModule, name: str, stacks, cells: CellFiles) -> dict | None:
    ln = cells.line(stacks.get(name, []))
    if ln:
        return ln
    try:
        ins = module.instruction(name)
    except KeyError:
        return None
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
