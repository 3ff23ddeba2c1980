"""A source reference: where in the user's code something happened, and its one written form.

A reference is a dict (it travels in captures, saved notebooks and the panel's JSON as is):
``{"cell": 5, "line": 3, "code": "loss = model(x)"}`` for line 3 of the cell that ran as In[5], or
``{"cell": None, "file": ".../modeling_bert.py", "line": 413, "function": "forward", "code": ...}``
for a line of a file. Every view writes it one way, ``ref_text``: ``[5]:3``, ``modeling_bert.py:413``,
and ``[?]:3`` for a cell line whose prompt is unknown. The TypeScript side has the same function
(``lineRef`` in ``extension/src/core/format.ts``), and ``tests/fixtures/captures/golden.json`` holds
both to the same strings.

Which prompt names a cell line *now* depends on the cells that ran since (after Run All a model
cell's ``[2]`` is ``[12]``): ``shown_ref`` takes that knowledge (``prompts.CellPrompts``) as an
argument, so one capture renders the same way for the same prompts.
"""

from __future__ import annotations

from typing import Mapping, Protocol


class Prompts(Protocol):
    def current(self, prompt: int, line: int | None, code: str | None) -> int: ...


def ref_text(ref: Mapping | None) -> str:
    """``[5]:3`` (line 3 of the cell run as In[5]), ``modeling_bert.py:413`` (a file), ``[?]:3`` (a
    cell line whose prompt is unknown); ``-`` for no line."""
    if not ref or ref.get("line") is None:
        return "-"
    cell = ref.get("cell")
    if cell is not None:
        return f"[{cell}]:{ref['line']}"
    file = ref.get("file")
    if file:
        return f"{str(file).rsplit('/', 1)[-1]}:{ref['line']}"
    return f"[?]:{ref['line']}"


def ref_with_code(ref: Mapping) -> str:
    """``[5]:3 (loss = model(x))``: a reference in a sentence (recompile reasons, warnings)."""
    return ref_text(ref) + (f" ({ref['code']})" if ref.get("code") else "")


def cell_ref(execution_count: int | None, line: int | None, code: str | None = None) -> dict | None:
    """The reference of a line of a cell run as ``execution_count`` (None when there is no line)."""
    return None if line is None else {"cell": execution_count, "line": line, "code": code}


def shown_ref(ref: Mapping, execution_count: int | None, source: str, compiled_in: int | None,
              prompts: Prompts | None = None) -> dict:
    """A recorded reference as the run being shown names it: a line of the run that compiled the graph
    (``[3]:4``) as the run shown (``[4]:4``) when that run is of the same cell text (a cache hit reuses
    the graph), and, given ``prompts``, any cell line as the newest prompt of its cell."""
    ref = dict(ref)
    cell = ref.get("cell")
    if not isinstance(cell, int):
        return ref
    if compiled_in is not None and cell == compiled_in and execution_count is not None and cell != execution_count:
        lines = source.splitlines()
        n = ref.get("line")
        if isinstance(n, int) and 1 <= n <= len(lines) and (ref.get("code") in (None, lines[n - 1].strip())):
            ref["cell"] = cell = execution_count
    if prompts is not None:
        ref["cell"] = prompts.current(cell, ref.get("line"), ref.get("code"))
    return ref
