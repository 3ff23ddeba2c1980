"""XLA's HLO text (the ``--xla_dump_hlo_as_text`` dumps) as Python objects.

One pass over the lines. Each instruction line is cut with a few anchored, precompiled regexes (no
nested quantifiers, so no catastrophic backtracking) and a small scanner for the parts that nest:
balanced ``()``, ``[]``, ``{}``, quoted strings with escapes and ``/* ... */`` comments, as in
``replica_groups={{0,1},{2,3}}``, ``metadata={op_type="a" source_file="x,y{.py"}``,
``backend_config={"known_trip_count":{"n":"5"}}`` or ``(f32[4]{0}, /*index=5*/f32[1])``. The
scanner jumps from one bracket or quote to the next with ``re.search``, so the time is linear in the
text. Operand and called-computation names are resolved once the whole module is read.

Speed: an optimized module of a real model has ~100k instruction lines, nearly all in one simple form.
Those take a fast path (``_FAST_HEAD``, a regex for the whole line up to the operands, written by
name as XLA's dump writes them or each with its shape as torch_xla's printer does for lean capture), their
attribute texts, which repeat a lot, are checked once per distinct text, and their ``attributes`` and
``metadata`` dicts are built only when read. The fast path accepts only what the scanner accepts, with
the same result, so the guarantees below do not depend on it.

Malformed text raises :class:`HloParseError` (``"line N: <what is wrong>: <the line>"``) and nothing
else.
"""

from __future__ import annotations

import gc
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from .shapes import Shape, ShapeError, parse_shape

__all__ = [
    "Computation", "HloModule", "HloParseError", "Instruction", "parse_module", "parse_signature",
]


class HloParseError(ValueError):
    """The text is not HLO this parser understands; the message starts with ``line N: ``."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


class Instruction:
    """One instruction line.

    ``attributes`` and ``metadata`` of a line in the common form (see ``_FAST_HEAD``) are built on
    first use from its attribute text, which the parser has checked already and which thousands of
    lines share (see ``_SharedAttributes``).
    """

    __slots__ = ("name", "opcode", "shape", "shape_text", "operands", "called", "is_root", "line",
                 "literal", "_attributes", "_metadata", "_shared")
    __hash__ = None  # compared by value, as the dataclass it was

    def __init__(self, name: str, opcode: str, shape: Shape, shape_text: str, operands: list[str],
                 attributes: dict[str, str] | None, metadata: dict[str, str] | None, called: list[str],
                 is_root: bool, line: int, literal: str | None = None):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.shape_text = shape_text
        self.operands = operands
        self._attributes = attributes
        self._metadata = metadata
        self.called = called
        self.is_root = is_root
        self.line = line
        self.literal = literal
        self._shared: _SharedAttributes | None = None  # where None attributes/metadata come from

    @property
    def attributes(self) -> dict[str, str]:
        if self._attributes is None:
            self._attributes = self._shared.attributes()
        return self._attributes

    @attributes.setter
    def attributes(self, value: dict[str, str]) -> None:
        self._attributes = value

    @property
    def metadata(self) -> dict[str, str]:
        """A dict of this instruction's own (``op_type``, ``op_key`` and ``source`` read the shared
        one until this is asked for, so analyses of big modules copy nothing)."""
        if self._metadata is None:
            self._metadata = dict(self._shared_metadata())
        return self._metadata

    @metadata.setter
    def metadata(self, value: dict[str, str]) -> None:
        self._metadata = value

    def _shared_metadata(self) -> dict[str, str]:
        """The metadata dict shared by all lines with this attribute text: read, never change."""
        try:
            return self._shared.metadata()
        except _Fail as e:  # not expected: the parser has checked the text
            raise HloParseError(f"line {self.line}: {e}", self.line) from None

    def _read_metadata(self) -> dict[str, str]:
        return self._metadata if self._metadata is not None else self._shared_metadata()

    @property
    def fusion_kind(self) -> str | None:
        return self.attributes.get("kind") if self.opcode == "fusion" else None

    @property
    def op_type(self) -> str | None:
        key = self.op_key
        return key[0] if key is not None else self._read_metadata().get("op_type")

    @property
    def op_key(self) -> tuple[str, str | None, str | None, str | None] | None:
        """``(op_type, op_name, source_file, source_line)`` of the metadata, None without an op_type:
        what the instructions of one lazy-IR op share, before and after optimization. Built once
        per attribute text (analyses ask for it for every instruction of a big module)."""
        if self._metadata is not None:
            return _op_key(self._metadata)
        key = self._shared.op_key
        if key is False:
            key = self._shared.op_key = _op_key(self._shared_metadata())
        return key

    @property
    def source(self) -> tuple[str, int] | None:
        md = self._read_metadata()
        file, line = md.get("source_file"), md.get("source_line")
        if not file or not line:
            return None
        try:
            return file, int(line)
        except ValueError:
            return None

    _FIELDS = ("name", "opcode", "shape", "shape_text", "operands", "attributes", "metadata", "called",
               "is_root", "line", "literal")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._FIELDS)

    def __repr__(self) -> str:
        return "Instruction(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self._FIELDS) + ")"


@dataclass
class Computation:
    name: str
    instructions: list[Instruction]
    is_entry: bool
    signature: str

    @property
    def root(self) -> Instruction:
        for ins in self.instructions:
            if ins.is_root:
                return ins
        return self.instructions[-1]

    @cached_property
    def by_name(self) -> dict[str, Instruction]:
        return {ins.name: ins for ins in self.instructions}

    @property
    def parameters(self) -> list[Instruction]:
        params = [ins for ins in self.instructions if ins.opcode == "parameter"]
        return sorted(params, key=lambda ins: int(ins.literal or 0))


@dataclass
class HloModule:
    name: str
    attributes: dict[str, str]
    computations: dict[str, Computation]

    @property
    def entry(self) -> Computation:
        for comp in self.computations.values():
            if comp.is_entry:
                return comp
        raise KeyError("the module has no ENTRY computation")

    @cached_property
    def _instruction_index(self) -> dict[str, Instruction]:
        index: dict[str, Instruction] = {}
        for ins in self.instructions():
            index.setdefault(ins.name, ins)
        return index

    def instruction(self, name: str) -> Instruction:
        """The instruction called ``name`` (without ``%``) in any computation; KeyError if none."""
        return self._instruction_index[name]

    def instructions(self) -> Iterator[Instruction]:
        for comp in self.computations.values():
            yield from comp.instructions

    def callers(self) -> dict[str, list[Instruction]]:
        """Every computation's name -> the instructions that call it (``[]`` for the entry)."""
        out: dict[str, list[Instruction]] = {name: [] for name in self.computations}
        for ins in self.instructions():
            for callee in dict.fromkeys(ins.called):
                out.setdefault(callee, []).append(ins)
        return out


# --------------------------------------------------------------------------------------------------
# The scanner. Helpers raise _Fail(what); the line loop adds the line number and the line.


class _Fail(Exception):
    pass


_CLOSER = {"(": ")", "[": "]", "{": "}"}
_META_NEEDLE = ", metadata={"
# a metadata group with at most one level of nested braces, its strings opaque, within one line (the fast
# path of strip_metadata; lines it leaves a group on are scanned)
_META_STRING = r'"(?:[^"\\\n]|\\.)*"'
_METADATA = re.compile(r", metadata=\{(?:[^{}\"\n]|%s|\{(?:[^{}\"\n]|%s)*\})*\}" % (_META_STRING, _META_STRING))


def strip_metadata(text: str) -> str:
    """HLO text without each instruction's ``metadata={...}`` (op type, source file and line): what a
    reader of the module wants to see, at a fraction of its size. The one rule of both languages
    (``extension/src/core/hlo.ts`` stripMetadata; the golden ``tests/fixtures/hlo/strip_metadata.json``):
    a group ends at the ``}`` closing its ``{``, braces nest, quoted strings are opaque (a
    ``source_file`` with ``{`` in it never ends it), and a group left open runs to the end of its line."""
    if _META_NEEDLE not in text:
        return text
    text = _METADATA.sub("", text)
    if _META_NEEDLE not in text:
        return text
    return "\n".join(_strip_line(line) if _META_NEEDLE in line else line for line in text.split("\n"))


def _strip_line(line: str) -> str:
    """The rule, character by character (deeper nesting, groups left open)."""
    k = line.find(_META_NEEDLE)
    while k >= 0:
        depth, j = 0, k + len(_META_NEEDLE) - 1
        while j < len(line):
            c = line[j]
            if c == '"':
                j += 1
                while j < len(line) and line[j] != '"':
                    j += 2 if line[j] == "\\" else 1
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        line = line[:k] + line[j + 1:]
        k = line.find(_META_NEEDLE, k)
    return line


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r'[()\[\]{}"]|/\*')
_VALUE_STOP = re.compile(r'[,()\[\]{}"]|/\*')
_SHAPE_STOP = re.compile(r'[\s()\[\]{}"]|/\*')


def _string_end(s: str, pos: int) -> int:
    m = _STRING.match(s, pos)
    if m is None:
        raise _Fail("unterminated string")
    return m.end()


def _comment_end(s: str, pos: int) -> int:
    end = s.find("*/", pos + 2)
    if end < 0:
        raise _Fail("unterminated /* comment")
    return end + 2


def _balanced_end(s: str, pos: int) -> int:
    """``s[pos]`` opens a bracket: the position just after the bracket that closes it."""
    stack = [_CLOSER[s[pos]]]
    pos += 1
    while True:
        m = _BRACKET.search(s, pos)
        if m is None:
            raise _Fail(f"unbalanced brackets: '{stack[-1]}' missing")
        c, j = m.group(), m.start()
        if c == '"':
            pos = _string_end(s, j)
        elif c == "/*":
            pos = _comment_end(s, j)
        elif c in _CLOSER:
            stack.append(_CLOSER[c])
            pos = j + 1
        elif c != stack[-1]:
            raise _Fail(f"unbalanced brackets: '{c}' where '{stack[-1]}' was expected")
        else:
            stack.pop()
            pos = j + 1
            if not stack:
                return pos


def _skip(s: str, c: str, j: int, where: str = "") -> int:
    """``c`` found at ``j`` opens a string, a comment or a bracket group: the position after it."""
    if c == '"':
        return _string_end(s, j)
    if c == "/*":
        return _comment_end(s, j)
    if c in _CLOSER:
        return _balanced_end(s, j)
    raise _Fail(f"unbalanced brackets: unexpected '{c}'{where}")


def _value_end(s: str, pos: int, end: int | None = None) -> int:
    """From ``pos``, the end of a value: the first ',' outside brackets and strings, or ``end``."""
    end = len(s) if end is None else end
    while True:
        m = _VALUE_STOP.search(s, pos, end)
        if m is None:
            return end
        c, j = m.group(), m.start()
        if c == ",":
            return j
        pos = _skip(s, c, j)
        if pos > end:
            raise _Fail("unbalanced brackets")


def _check_balanced(s: str) -> None:
    pos = 0
    while True:
        m = _BRACKET.search(s, pos)
        if m is None:
            return
        pos = _skip(s, m.group(), m.start())


def _split_items(s: str, start: int, end: int) -> list[str]:
    """Split ``s[start:end]`` (balanced) at top-level commas; comments are dropped."""
    items: list[str] = []
    parts: list[str] = []
    pos = seg = start
    while True:
        m = _VALUE_STOP.search(s, pos, end)
        if m is None:
            parts.append(s[seg:end])
            items.append("".join(parts))
            return items
        c, j = m.group(), m.start()
        if c == ",":
            parts.append(s[seg:j])
            items.append("".join(parts))
            parts = []
            pos = seg = j + 1
        elif c == "/*":  # comments are dropped from the items
            parts.append(s[seg:j])
            pos = seg = _comment_end(s, j)
        else:
            pos = _skip(s, c, j)
        if pos > end:
            raise _Fail("unbalanced brackets")


def _shape_end(s: str, pos: int) -> int:
    """The end of the shape that starts at ``pos``: the first whitespace outside brackets."""
    while True:
        m = _SHAPE_STOP.search(s, pos)
        if m is None:
            return len(s)
        c, j = m.group(), m.start()
        if c.isspace():
            return j
        pos = _skip(s, c, j, " in the shape")


_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _unescape(m: re.Match) -> str:
    if m[1]:
        return chr(int(m[1], 8))
    if m[2]:
        return chr(int(m[2], 16))
    return _ESCAPES.get(m[3], m[3])


def _unquote(quoted: str) -> str:
    inner = quoted[1:-1]
    return _ESCAPE.sub(_unescape, inner) if "\\" in inner else inner


# --------------------------------------------------------------------------------------------------
# Lines.

_NAME = re.compile(r"[\w.\-]+")
_MODULE_HEAD = re.compile(r"\s*HloModule\s+%?([^\s,]+)")
_INSTR_HEAD = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_COMP_HEAD = re.compile(r"(ENTRY\s+)?%?([\w.\-]+)")
_SIMPLE_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[\d,<=?]*\](?:\{[\w,:()*]*\})?(?=\s)")
_OPCODE = re.compile(r"\s+([a-z][\w\-]*)\(")
_SIMPLE_ARGS = re.compile(r'\(([^()\[\]{}"/]*)\)')
_PARAM_NUMBER = re.compile(r"\d{1,9}")
_ATTR = re.compile(r"\s*,\s*([\w.\-]+)\s*=")
_META_KEY = re.compile(r"\s*([\w.\-]+)=")
_META_BARE = re.compile(r'[^\s"(){}\[\]]+')
_TRAILING = re.compile(r"\s*")

# Attributes whose value names the computations an instruction calls.
_CALL_ATTRIBUTES = frozenset({
    "calls", "to_apply", "body", "condition", "true_computation", "false_computation",
    "branch_computations", "called_computations", "select", "scatter",
})


# The fast path: most lines of a big module are ``%name = f32[8,128]{1,0} opcode(%a, %b), key=value,
# metadata={op_type="..." source_line=12}``. ``_FAST_HEAD`` matches such a line up to its operands and
# ``_FAST_ATTRIBUTES`` checks the rest when its values nest no deeper than ``{..[..]..}`` and its
# strings have no escapes; any other line goes to the careful scanner below. What they accept the
# scanner accepts too, with the same result (a test parses the fixtures, and mutated fixtures, both
# ways). Atomic groups and possessive quantifiers keep them from backtracking, and at most 16
# attributes keep the duplicate-key look-aheads linear.
_STR = r'"[^"\\]*+"'  # a string without escapes
_PLAIN = r'[^{}()\[\]"/\\]*+'  # no brackets, strings or comments
_LIST = rf"\[{_PLAIN}(?:{_STR}{_PLAIN})*+\]"
_FAST_VALUE = (rf"(?:\{{{_PLAIN}(?:(?:{_STR}|{_LIST}){_PLAIN})*+\}}"  # {...} with strings and [...]s
               r'|[^\s,(){}\[\]"/=\\]++)')                             # or a bare word
# metadata={key="string" key=bare ...}, as _metadata reads it ('/' kept out: the scanner reads '/*').
_FAST_META = r'\{(?>[\w.\-]+=(?:' + _STR + r'|[^\s"(){}\[\]/\\]++(?=[ }])) ?)*+\}'
_FAST_ATTR_VALUE = rf"(?:(?<=, metadata=){_FAST_META}|(?<!, metadata=){_FAST_VALUE})"
_FAST_SHAPE = r"[a-z][a-z0-9]*\[[\d,<=?]*\](?:\{[\w,:()*]*\})?"  # an array shape
_FAST_OPERAND = r"(?:/\*index=\d+\*/)?%?[\w.\-]+"
# An operand with its shape, as torch_xla's printer writes every operand (lean capture's text):
# ``f32[8]{0} %a`` or ``/*index=5*/s32[] %b``.
_FAST_SHAPED_OPERAND = rf"(?:/\*index=\d+\*/)?{_FAST_SHAPE} %?[\w.\-]+"
# [ROOT] %name = shape opcode(operands); the attribute text after it is checked by _FAST_ATTRIBUTES.
_FAST_HEAD = re.compile(
    r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*"
    rf"({_FAST_SHAPE})\s+([a-z][\w\-]*)"
    rf"\(((?:{_FAST_OPERAND}(?:, {_FAST_OPERAND})*+)?"
    rf"|{_FAST_SHAPED_OPERAND}(?:, {_FAST_SHAPED_OPERAND})*+)\)")
_FAST_ATTRIBUTES = re.compile(
    rf"(?>, (?P<key>[\w.\-]+)={_FAST_ATTR_VALUE}(?!.*, (?P=key)=)){{0,16}}+\s*")  # unique keys
_FAST_PAIR = re.compile(rf", ([\w.\-]+)=({_FAST_ATTR_VALUE})")  # the (key, value)s of a fast line
_FAST_NAME = re.compile(r"[\w.\-]+(?=,|\Z)")  # the operand names of a fast line's operand text
_FAST_META_PAIR = re.compile(r'([\w.\-]+)=(?:"([^"]*)"|([^\s"(){}\[\]]+))')
_FAST_META_CHECK = re.compile(_FAST_META)
# (p0: f32[8]{0}, /*index=1*/p1: s32[]) -> (f32[8]{0}, s32[]): a signature _check_signature accepts.
_FAST_SIGNATURE = re.compile(
    rf"\((?:[\w.\-]+: {_FAST_SHAPE}(?:, (?:/\*index=\d+\*/)?[\w.\-]+: {_FAST_SHAPE})*+)?\)"
    rf" -> (?:{_FAST_SHAPE}|\((?:{_FAST_SHAPE}(?:, (?:/\*index=\d+\*/)?{_FAST_SHAPE})*+)?\))")


def _fast_metadata(value: str) -> dict[str, str]:
    """``_metadata(value)``, quicker when ``value`` is in the fast form. File names and op names repeat
    thousands of times in a big module, so they are interned."""
    if not _FAST_META_CHECK.fullmatch(value):
        return _metadata(value)
    return {key: sys.intern(quoted or bare) for key, quoted, bare in _FAST_META_PAIR.findall(value)}


def _attributes(s: str, pos: int) -> dict[str, str]:
    """``, key=value, key=value`` from ``pos`` to the end of ``s``."""
    out: dict[str, str] = {}
    while True:
        m = _ATTR.match(s, pos)
        if m is None:
            if _TRAILING.match(s, pos).end() != len(s):
                raise _Fail("expected ', name=value'")
            return out
        key = m[1]
        end = _value_end(s, m.end())
        value = s[m.end():end].strip()
        if not value:
            raise _Fail(f"attribute {key} has no value")
        if key in out:
            raise _Fail(f"attribute {key} given twice")
        out[key] = value
        pos = end


def _metadata(value: str) -> dict[str, str]:
    if len(value) < 2 or value[0] != "{" or value[-1] != "}":
        raise _Fail("metadata is not {...}")
    out: dict[str, str] = {}
    pos, end = 1, len(value) - 1
    while True:
        m = _META_KEY.match(value, pos, end)
        if m is None:
            if _TRAILING.match(value, pos, end).end() != end:
                raise _Fail("metadata is not key=value pairs")
            return out
        key, pos = m[1], m.end()
        c = value[pos] if pos < end else ""
        if c == '"':
            stop = _string_end(value, pos)
            out[key] = _unquote(value[pos:stop])
        elif c in _CLOSER:
            stop = _balanced_end(value, pos)
            out[key] = value[pos:stop]
        else:
            bare = _META_BARE.match(value, pos, end)
            if bare is None:
                raise _Fail(f"metadata {key} has no value")
            stop = bare.end()
            out[key] = bare.group()
        if stop > end:
            raise _Fail("metadata is not key=value pairs")
        pos = stop


def _computation_names(key: str, value: str) -> list[str]:
    if value.startswith("{"):
        if not value.endswith("}"):
            raise _Fail(f"{key}= is not a computation or a {{list}} of them")
        inner = value[1:-1].strip()
        parts = inner.split(",") if inner else []
    else:
        parts = [value]
    names = []
    for part in parts:
        part = part.strip()
        name = part[1:] if part.startswith("%") else part
        if not _NAME.fullmatch(name):
            raise _Fail(f"{key}= names no computation: {part!r}")
        names.append(name)
    return names


def _new_shape(shape_text: str, shapes: dict[str, Shape]) -> Shape:
    try:
        shape = shapes[shape_text] = parse_shape(shape_text)
    except ShapeError as e:
        raise _Fail(f"bad shape {shape_text!r} ({e})") from None
    return shape


_CALL_KEY = re.compile(", (?:" + "|".join(sorted(_CALL_ATTRIBUTES)) + ")=")


class _SharedAttributes:
    """Attribute text in the fast form, checked once for all the lines that end with it: in a big
    module ~70k lines end in only ~4k different texts (the same metadata, dimensions, ...)."""

    __slots__ = ("text", "called", "op_key", "_attributes", "_metadata")

    def __init__(self, text: str):
        self.text = text
        self._attributes: dict[str, str] | None = None
        self._metadata: dict[str, str] | None = None
        self.op_key: tuple | None | bool = False  # Instruction.op_key, once known
        self.called: list[str] = []
        if _CALL_KEY.search(text):  # the names of the called computations are checked at once
            for key, value in self._parsed().items():
                if key in _CALL_ATTRIBUTES:
                    self.called.extend(_computation_names(key, value))

    def _parsed(self) -> dict[str, str]:
        if self._attributes is None:
            self._attributes = dict(_FAST_PAIR.findall(self.text))
        return self._attributes

    def attributes(self) -> dict[str, str]:
        """The attributes, in a dict of the caller's own."""
        return dict(self._parsed())

    def metadata(self) -> dict[str, str]:
        """The metadata, shared: ``Instruction.metadata`` copies it for the caller."""
        if self._metadata is None:
            meta = self._parsed().get("metadata")
            self._metadata = _fast_metadata(meta) if meta is not None else {}
        return self._metadata


def _op_key(md: dict[str, str]) -> tuple | None:
    op_type = md.get("op_type")
    if not op_type:
        return None
    return op_type, md.get("op_name"), md.get("source_file"), md.get("source_line")


def _fast_instruction(m: re.Match, line: str, number: int, shapes: dict[str, Shape],
                      shared: dict[str, _SharedAttributes | None]) -> Instruction | None:
    """What ``_instruction`` makes of a line that ``_FAST_HEAD`` matched, with its checks in the same
    order; None if the attribute text is not in the fast form. ``shared`` holds the attribute texts
    seen so far (None for those not in the fast form)."""
    root, name, shape_text, opcode, inner = m.groups()
    shape = shapes.get(shape_text) or _new_shape(shape_text, shapes)
    literal = None
    if opcode == "parameter" or opcode == "constant":
        operands = []
        literal = inner
        if opcode == "parameter" and not (inner.isdecimal() and len(inner) < 10):  # as _PARAM_NUMBER
            raise _Fail(f"parameter number {inner!r} is not an integer")
    elif "[" in inner:  # every operand with its shape (_FAST_SHAPED_OPERAND): the name is the last word
        operands = [item[item.rfind(" ") + 1:].lstrip("%") for item in inner.split(", ")]
    elif "/" in inner:
        operands = _FAST_NAME.findall(inner)  # skips the /*index=N*/ comments
    else:
        operands = inner.replace("%", "").split(", ") if inner else []
    tail = line[m.end():]
    if not tail:
        return Instruction(name, opcode, shape, shape_text, operands, {}, {}, [], root is not None,
                           number, literal)
    attributes = shared.get(tail, False)
    if attributes is False:  # the first line with this text
        attributes = shared[tail] = _SharedAttributes(tail) if _FAST_ATTRIBUTES.fullmatch(tail) else None
    if attributes is None:
        return None
    ins = Instruction(name, opcode, shape, shape_text, operands, None, None,
                      list(attributes.called) if attributes.called else [], root is not None, number,
                      literal)
    ins._shared = attributes
    return ins


def _instruction(s: str, head: re.Match, number: int, shapes: dict[str, Shape]) -> Instruction:
    name = head[2]
    pos = head.end()
    # The shape, as written.
    m = _SIMPLE_SHAPE.match(s, pos)
    end = m.end() if m else _shape_end(s, pos)
    shape_text = s[pos:end]
    if not shape_text:
        raise _Fail("expected a shape after '='")
    shape = shapes.get(shape_text) or _new_shape(shape_text, shapes)
    # The opcode and its parenthesized operands.
    m = _OPCODE.match(s, end)
    if m is None:
        raise _Fail("expected an opcode and '(' after the shape")
    opcode = m[1]
    open_paren = m.end() - 1
    simple = _SIMPLE_ARGS.match(s, open_paren)
    if simple:
        close = simple.end()
        inner = simple[1]
        items = inner.split(",") if inner.strip() else []
    else:
        close = _balanced_end(s, open_paren)
        inner = s[open_paren + 1:close - 1]
        items = _split_items(s, open_paren + 1, close - 1)
        if len(items) == 1 and not items[0].strip():
            items = []
    literal = None
    operands: list[str] = []
    if opcode == "constant":
        literal = inner.strip()
    elif opcode == "parameter":
        literal = inner.strip()
        if not _PARAM_NUMBER.fullmatch(literal):
            raise _Fail(f"parameter number {literal!r} is not an integer")
    else:
        for item in items:
            item = item.strip()
            if not item:
                raise _Fail("empty operand")
            token = item.rsplit(None, 1)[-1]
            operand = token[1:] if token.startswith("%") else token
            if not _NAME.fullmatch(operand):
                raise _Fail(f"bad operand {item!r}")
            operands.append(operand)
    attributes = _attributes(s, close)
    meta = attributes.get("metadata")
    metadata = _fast_metadata(meta) if meta is not None else {}
    called: list[str] = []
    for key, value in attributes.items():
        if key in _CALL_ATTRIBUTES:
            called.extend(_computation_names(key, value))
    return Instruction(
        name=name, opcode=opcode, shape=shape, shape_text=shape_text, operands=operands,
        attributes=attributes, metadata=metadata, called=called, is_root=bool(head[1]),
        line=number, literal=literal,
    )


def _computation_header(stripped: str) -> tuple[str, bool, str] | None:
    """(name, is_entry, signature) of a ``[ENTRY] %name [(params) -> shape] {`` line, else None."""
    body = stripped[:-1].rstrip()
    m = _COMP_HEAD.match(body)
    if m is None:
        return None
    signature = body[m.end():]
    if signature and not (signature[0].isspace() or signature[0] == "("):
        return None
    signature = signature.strip()
    if signature and signature[0] != "(":
        return None
    return m[2], bool(m[1]), signature


def _check_signature(signature: str) -> None:
    if not signature or _FAST_SIGNATURE.fullmatch(signature):
        return
    close = _balanced_end(signature, 0)
    tail = signature[close:].strip()
    if tail and not tail.startswith("->"):
        raise _Fail("expected '-> shape' after the parameters")
    _check_balanced(tail)


def _short(line: str) -> str:
    text = line.strip()
    return text if len(text) <= 120 else text[:117] + "..."


def _error(number: int, what: str, line: str) -> HloParseError:
    return HloParseError(f"line {number}: {what}: {_short(line)}", number)


def parse_module(text: str) -> HloModule:
    """Parse the text of one HLO module (as XLA dumps it); HloParseError if it is malformed."""
    # ~100k instructions each hold a few lists: the cyclic collector would walk them all again and
    # again while they are made (a third of the time), and none of them can be garbage yet.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse_module(text)
    finally:
        if collecting:
            gc.enable()


def _parse_module(text: str, fast: bool = True) -> HloModule:
    """``fast=False`` reads every line with the careful scanner (the tests compare the two)."""
    lines = text.split("\n")
    shapes: dict[str, Shape] = {}
    module_name: str | None = None
    module_attributes: dict[str, str] = {}
    module_line = 0
    computations: dict[str, Computation] = {}
    comp_lines: dict[str, int] = {}
    entry_name: str | None = None
    current: Computation | None = None
    current_names: dict[str, Instruction] = {}
    current_root: Instruction | None = None
    current_params: set[str] = set()
    shared: dict[str, _SharedAttributes | None] = {}
    fast_head = _FAST_HEAD.match if fast else lambda line: None
    number = 0
    line = ""
    try:
        for number, line in enumerate(lines, start=1):
            # Most lines are an instruction in the common form.
            head = fast_head(line) if current is not None else None
            ins = _fast_instruction(head, line, number, shapes, shared) if head is not None else None
            if ins is None:
                stripped = line.strip()
                if not stripped or stripped.startswith("//") or (
                        stripped.startswith("/*") and stripped.find("*/", 2) == len(stripped) - 2):
                    continue  # blank lines and comment lines
                if module_name is None:
                    m = _MODULE_HEAD.match(line)
                    if m is None:
                        raise _Fail("expected 'HloModule <name>' first")
                    module_name, module_line = m[1], number
                    module_attributes = _attributes(line, m.end())
                    continue
                if current is None:  # between computations: a header
                    current = _computation_start(line, stripped, computations, entry_name)
                    computations[current.name] = current
                    comp_lines[current.name] = number
                    if current.is_entry:
                        entry_name = current.name
                    current.__dict__["by_name"] = current_names = {}  # filled in below
                    current_root, current_params = None, set()
                    continue
                if stripped == "}":
                    if not current.instructions:
                        raise _Fail(f"computation {current.name} has no instructions")
                    current = None
                    continue
                head = _INSTR_HEAD.match(line)
                if head is None:
                    if stripped.endswith("{") and _computation_header(stripped):
                        raise _Fail(f"computation {current.name} is not closed by '}}' before the next one")
                    raise _Fail("expected an instruction 'name = shape opcode(operands)'")
                ins = _instruction(line, head, number, shapes)
            if ins.name in current_names:
                raise _Fail(f"a second instruction named {ins.name} in computation {current.name}")
            if ins.is_root:
                if current_root is not None:
                    raise _Fail(f"a second ROOT in computation {current.name}")
                current_root = ins
            if ins.opcode == "parameter":
                if ins.literal in current_params:
                    raise _Fail(f"a second parameter({ins.literal}) in computation {current.name}")
                current_params.add(ins.literal)
            current_names[ins.name] = ins
            current.instructions.append(ins)
    except _Fail as e:
        raise _error(number, str(e), line) from None

    if module_name is None:
        raise _error(len(lines), "the text ends before 'HloModule <name>'", lines[-1])
    if current is not None:
        n = comp_lines[current.name]
        raise _error(n, f"computation {current.name} is not closed by '}}'", lines[n - 1])
    if entry_name is None:
        raise _error(module_line, "no ENTRY computation", lines[module_line - 1])
    for comp in computations.values():
        names = comp.by_name
        for ins in comp.instructions:
            for operand in ins.operands:
                if operand not in names:
                    raise _error(ins.line, f"operand %{operand} is not an instruction of "
                                           f"computation {comp.name}", lines[ins.line - 1])
            for callee in ins.called:
                if callee not in computations:
                    raise _error(ins.line, f"calls %{callee}, which is not a computation of the module",
                                 lines[ins.line - 1])
    return HloModule(name=module_name, attributes=module_attributes, computations=computations)


def _computation_start(line: str, stripped: str, computations: dict[str, Computation],
                       entry_name: str | None) -> Computation:
    """The (empty) computation that a line between computations starts; _Fail if it starts none."""
    if stripped == "}":
        raise _Fail("'}' outside a computation")
    if _INSTR_HEAD.match(line):
        raise _Fail("instruction outside a computation")
    if stripped.startswith("HloModule"):
        raise _Fail("a second HloModule header")
    header = _computation_header(stripped) if stripped.endswith("{") else None
    if header is None:
        raise _Fail("expected a computation '[ENTRY] %name (parameters) -> shape {'")
    name, is_entry, signature = header
    _check_signature(signature)
    if name in computations:
        raise _Fail(f"a second computation named {name}")
    if is_entry and entry_name is not None:
        raise _Fail(f"a second ENTRY computation (the first is {entry_name})")
    return Computation(name=name, instructions=[], is_entry=is_entry, signature=signature)


def parse_signature(signature: str) -> tuple[list[tuple[str, Shape]], Shape | None]:
    """``(p0: f32[16], p1: s32[]) -> (f32[16], s32[])`` -> ([("p0", f32[16]), ...], result shape).

    The result is None when the signature has no ``-> shape``. ShapeError if it is malformed.
    """
    text = signature.strip()
    try:
        if not text.startswith("("):
            raise _Fail("expected '(' first")
        close = _balanced_end(text, 0)
        items = _split_items(text, 1, close - 1)
    except _Fail as e:
        raise ShapeError(f"bad signature {signature!r}: {e}") from None
    if len(items) == 1 and not items[0].strip():
        items = []
    params = []
    for item in items:
        name, colon, shape = item.partition(":")
        if not colon:
            raise ShapeError(f"bad signature {signature!r}: parameter {item.strip()!r} has no ': shape'")
        params.append((name.strip().lstrip("%"), parse_shape(shape.strip())))
    tail = text[close:].strip()
    if not tail:
        return params, None
    if not tail.startswith("->"):
        raise ShapeError(f"bad signature {signature!r}: expected '-> shape'")
    return params, parse_shape(tail[2:].strip())
