"""XLA's own dump of each compile: HLO before and after optimization, memory report, buffers.

XLA writes ``module_NNNN.<graph name>.<id>.<what>.txt`` for every compile once ``--xla_dump_to`` is
set. The CPU compiler of XLA 2.9 also writes LLVM IR, MLIR and object files with no flag to stop it,
so after each cell we read the HLO text (and the binary dump before optimization, for call stacks) of
each new module and delete everything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(
    r"^module_(?P<num>\d+)\.(?P<name>.+)\.(?P<uid>\d+)\."
    r"(?P<kind>before_optimizations\.txt"
    r"|\w+_after_optimizations\.txt"
    r"|\w+_after_optimizations-memory-usage-report\.txt"
    r"|\w+_after_optimizations-buffer-assignment\.txt"
    r"|before_optimizations\.hlo\.pb)$"
)
_MODULE = re.compile(r"^module_(?P<num>\d+)\.")

# Programs the PJRT runtime compiles for itself, not graphs of a sync: they have no compile entry in
# torch_xla's sync log, so a module of theirs paired with the log's compiles by order would take the
# next graph's place. ReplicateShardedData: reading a sharded tensor's value (a copy of it, printing it)
# gathers its shards in a small all-gather program of its own.
RUNTIME_PROGRAMS = frozenset({"ReplicateShardedData"})


@dataclass
class CompiledModule:
    number: int
    graph_name: str
    hlo_before: str | None = None
    hlo_after: str | None = None
    memory_report: str | None = None
    buffer_assignment: str | None = None
    # the binary dump before optimization: it alone carries each op's full Python stack (XLA also
    # writes the optimized module's, ten times larger and not needed: deleted unread)
    proto_before: bytes | None = None
    # Lean capture (no dump; ``profile/lean_modules.py``): the optimized module as a profiler session
    # recorded it, its unique id, and its buffer allocations; the text is printed from it when analysed.
    module_proto: bytes | None = None
    allocations: list | None = None
    # Full capture: the files XLA's CPU compiler wrote beside the HLO for this module (LLVM IR, MLIR,
    # object files; deleted unread): what the dump cost the compile, in files and bytes
    dump_files: int = 0
    dump_bytes: int = 0

    @property
    def label(self) -> str:
        return f"module_{self.number:04d}"

    def ensure_text(self) -> None:
        """Lean capture: print the optimized module's text from its proto (torch_xla's own printer, the
        dump's format with operand shapes), once."""
        if self.hlo_after is None and self.module_proto:
            import torch_xla

            xlac = torch_xla._XLAC
            self.hlo_after = xlac._xla_computation_text(
                xlac._xla_op_computation_from_module_proto(self.graph_name, self.module_proto))


def _kind(kind: str) -> str:
    if kind == "before_optimizations.hlo.pb":
        return "proto_before"
    if kind == "before_optimizations.txt":
        return "hlo_before"
    if kind.endswith("memory-usage-report.txt"):
        return "memory_report"
    if kind.endswith("buffer-assignment.txt"):
        return "buffer_assignment"
    return "hlo_after"


class DumpDirectory:
    """Collects new compiled modules from the dump directory and keeps the directory small."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._seen: set[int] = set()

    def collect(self) -> list[CompiledModule]:
        """Modules written since the last call, in compile order (the runtime's own programs left out:
        ``RUNTIME_PROGRAMS``); their files are then removed."""
        if not self.path.is_dir():
            return []
        modules: dict[int, CompiledModule] = {}
        other: dict[int, list[int]] = {}  # module -> sizes of its non-HLO files
        for entry in self.path.iterdir():
            m = _NAME.match(entry.name)
            if m:
                num = int(m["num"])
                if num in self._seen:
                    continue
                if m["name"] in RUNTIME_PROGRAMS:
                    self._seen.add(num)  # (its files are deleted with the others')
                    continue
                mod = modules.setdefault(num, CompiledModule(num, m["name"]))
                attr = _kind(m["kind"])
                value = entry.read_bytes() if attr.startswith("proto") else entry.read_text(errors="replace")
                setattr(mod, attr, value)
            else:
                found = _MODULE.match(entry.name)
                if found and int(found["num"]) not in self._seen:
                    try:
                        other.setdefault(int(found["num"]), []).append(entry.stat().st_size)
                    except OSError:
                        pass
        for num, mod in modules.items():
            sizes = other.get(num, [])
            mod.dump_files, mod.dump_bytes = len(sizes), sum(sizes)
        self._seen.update(modules)
        self.prune()
        return [modules[n] for n in sorted(modules)]

    def prune(self) -> None:
        """Delete every file of modules already read, and all non-HLO files (.ll, .mlir, .o)."""
        for entry in self.path.iterdir():
            m = _MODULE.match(entry.name)
            if not m or int(m["num"]) in self._seen or not _NAME.match(entry.name):
                try:
                    entry.unlink()
                except (IsADirectoryError, FileNotFoundError, PermissionError):
                    pass

    def size_bytes(self) -> int:
        if not self.path.is_dir():
            return 0
        return sum(e.stat().st_size for e in self.path.iterdir() if e.is_file())
