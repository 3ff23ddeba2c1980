"""HLO shapes as XLA prints them: ``f32[8,32]{1,0}``, ``(f32[2], s32[])``, ``s32[<=10]``, ``token[]``.

Layouts (``{1,0}``, ``{1,0:T(8,128)}``) and ``/*index=5*/`` comments are accepted and dropped; a
dimension written ``<=N`` is dynamic with bound N (kept in ``dims``), ``?`` is an unbounded dynamic
dimension (kept as -1, counted as 0 elements).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

# Bytes per element (XLA's ByteWidth: sub-byte types round up to one byte). token/opaque have none.
DTYPE_BYTES: dict[str, int] = {
    "pred": 1,
    "s2": 1, "s4": 1, "s8": 1, "u2": 1, "u4": 1, "u8": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16,
    "f4e2m1fn": 1,
    "f8e3m4": 1, "f8e4m3": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1,
    "f8e5m2": 1, "f8e5m2fnuz": 1, "f8e8m0fnu": 1,
    "token": 0, "opaque": 0,
}

MAX_TUPLE_DEPTH = 64  # XLA never nests this deep; the bound keeps the recursive helpers safe


class ShapeError(ValueError):
    """Text that is not an HLO shape."""


@dataclass(frozen=True)
class Shape:
    """An array shape (``dtype`` set) or a tuple (``dtype`` None, elements in ``tuple_shapes``).

    ``dynamic`` has one flag per dimension when any dimension is dynamic (``<=N`` keeps N in ``dims``,
    ``?`` is -1), and is ``()`` otherwise, so ``parse_shape("f32[8]") == Shape("f32", (8,))``.
    """

    dtype: str | None
    dims: tuple[int, ...]
    tuple_shapes: tuple["Shape", ...] = ()
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype is None

    @functools.cached_property  # shapes are shared through parse_shape's cache: compute once
    def elements(self) -> int:
        if self.is_tuple:
            return 0
        return math.prod(max(d, 0) for d in self.dims)

    @functools.cached_property
    def byte_size(self) -> int:
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        return self.elements * DTYPE_BYTES[self.dtype]

    def leaves(self) -> list["Shape"]:
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return out

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        dyn = tuple(self.dynamic) + (False,) * (len(self.dims) - len(self.dynamic))
        parts = ["?" if d < 0 else (f"<={d}" if is_dyn else str(d)) for d, is_dyn in zip(self.dims, dyn)]
        return f"{self.dtype}[{','.join(parts)}]"


_SPACE = re.compile(r"\s*")
_DTYPE = re.compile(r"[a-z][a-z0-9]*")
_DIMS = re.compile(r"\[([^\]]*)\]")
_DIM = re.compile(r"\s*(<=)?\s*(\d{1,19}|\?)\s*")
_LAYOUT_CHARS = re.compile(r"[^{}()\[\]]*")


def _skip(text: str, pos: int) -> int:
    """Skip whitespace and ``/* ... */`` comments."""
    while True:
        pos = _SPACE.match(text, pos).end()
        if not text.startswith("/*", pos):
            return pos
        end = text.find("*/", pos + 2)
        if end < 0:
            raise ShapeError(f"unterminated comment in shape {text!r}")
        pos = end + 2


def _skip_layout(text: str, pos: int) -> int:
    """``text[pos] == '{'``: the position after its matching '}' (layouts nest only () and {})."""
    closers = {"{": "}", "(": ")", "[": "]"}
    stack = []
    while True:
        if pos >= len(text):
            raise ShapeError(f"unclosed layout in shape {text!r}")
        c = text[pos]
        if c in closers:
            stack.append(closers[c])
        else:  # one of )]}
            if c != stack[-1]:
                raise ShapeError(f"unbalanced layout in shape {text!r}")
            stack.pop()
            if not stack:
                return pos + 1
        pos = _LAYOUT_CHARS.match(text, pos + 1).end()


def _parse(text: str, pos: int, depth: int) -> tuple[Shape, int]:
    pos = _skip(text, pos)
    if text.startswith("(", pos):
        if depth >= MAX_TUPLE_DEPTH:
            raise ShapeError(f"tuple shape nested deeper than {MAX_TUPLE_DEPTH}")
        pos = _skip(text, pos + 1)
        elements: list[Shape] = []
        if text.startswith(")", pos):
            return Shape(None, (), ()), pos + 1
        while True:
            shape, pos = _parse(text, pos, depth + 1)
            elements.append(shape)
            pos = _skip(text, pos)
            if text.startswith(",", pos):
                pos += 1
            elif text.startswith(")", pos):
                return Shape(None, (), tuple(elements)), pos + 1
            else:
                raise ShapeError(f"expected ',' or ')' at {pos} in shape {text!r}")
    m = _DTYPE.match(text, pos)
    if not m:
        raise ShapeError(f"expected an element type at {pos} in shape {text!r}")
    dtype = m.group()
    if dtype not in DTYPE_BYTES:
        raise ShapeError(f"unknown element type {dtype!r} in shape {text!r}")
    d = _DIMS.match(text, m.end())
    if not d:
        raise ShapeError(f"expected '[dims]' after {dtype!r} in shape {text!r}")
    dims: list[int] = []
    dynamic: list[bool] = []
    if d[1].strip():
        for item in d[1].split(","):
            dm = _DIM.fullmatch(item)
            if not dm:
                raise ShapeError(f"bad dimension {item!r} in shape {text!r}")
            if dm[2] == "?":
                dims.append(-1)
                dynamic.append(True)
            else:
                dims.append(int(dm[2]))
                dynamic.append(bool(dm[1]))
    pos = d.end()
    if text.startswith("{", pos):
        pos = _skip_layout(text, pos)
    return Shape(dtype, tuple(dims), (), tuple(dynamic) if any(dynamic) else ()), pos


def parse_shape(text: str) -> Shape:
    """The shape written in ``text`` (layout and comments ignored); ShapeError if it is not one."""
    if not isinstance(text, str):
        raise ShapeError(f"not a shape: {text!r}")
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> Shape:
    """Cached: a module writes the same few hundred shapes over and over, and Shape is immutable.
    (Errors are not cached; they are rare.)"""
    shape, pos = _parse(text, 0, 0)
    if _skip(text, pos) != len(text):
        raise ShapeError(f"unexpected text after the shape: {text!r}")
    return shape
