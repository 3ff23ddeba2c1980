"""The instructions of an HLO module's ENTRY computation, with their debug metadata.

Enough of HLO text to rebuild the captured graph from XLA's "before optimizations" dump: name, shape,
opcode, operands, and ``metadata={op_type=... op_name=... source_file=... source_line=...}`` (present
when ``XLA_HLO_DEBUG=1``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_INSTRUCTION = re.compile(
    r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<shape>.+?) (?P<opcode>[a-z][\w\-]*)\((?P<args>[^)]*)\)(?P<rest>.*)$"
)
_OPERAND = re.compile(r"%([\w.\-]+)")
_METADATA = re.compile(r"metadata=\{(?P<body>[^}]*)\}")
_META_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S+))')


class HloTextError(ValueError):
    """The text is not HLO this reader understands (message names the line)."""


@dataclass
class Instruction:
    name: str
    shape: str
    opcode: str
    operands: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    is_root: bool = False

    @property
    def op_type(self) -> str | None:
        return self.metadata.get("op_type")

    @property
    def source(self) -> tuple[str, int] | None:
        file, line = self.metadata.get("source_file"), self.metadata.get("source_line")
        if not file or not line:
            return None
        try:
            return file, int(line)
        except ValueError:
            return None


def parse_metadata(text: str) -> dict[str, str]:
    m = _METADATA.search(text)
    if not m:
        return {}
    return {k: (q or u) for k, q, u in _META_FIELD.findall(m["body"])}


def entry_instructions(hlo_text: str) -> list[Instruction]:
    """Instructions of the ENTRY computation, in the order the dump lists them (operands first)."""
    lines = hlo_text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("ENTRY ")), None)
    if start is None:
        raise HloTextError("no ENTRY computation found")
    out: list[Instruction] = []
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if line.startswith("}"):
            return out
        if not line.strip():
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            raise HloTextError(f"line {number}: not an HLO instruction: {line.strip()[:120]}")
        out.append(Instruction(
            name=m["name"], shape=m["shape"], opcode=m["opcode"],
            operands=_OPERAND.findall(m["args"]), metadata=parse_metadata(m["rest"]),
            is_root=bool(m["root"]),
        ))
    raise HloTextError("the ENTRY computation is not closed by '}'")
