"""Why a step missed the compile cache, in words: compare its graph's signature
(``hlo/signature.py``) with the nearest earlier graph's. torch_xla's own debug output only says where a
sync happened; this says what changed. The sentence is the record's ``recompile_reason``.
"""

from __future__ import annotations

import difflib
import math
from collections import Counter

from xla_lab.hlo.shapes import parse_shape


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _at(where: str | None) -> str:
    return f" at {where}" if where else ""


MAX_LISTED = 3  # differences of one kind named in full; the rest are counted


def match_inputs(new: list[dict], old: list[dict]) -> tuple[list[tuple[dict, dict]], list[dict], list[dict]]:
    """Pair the entry parameters of two graphs by what they are, not by position: (changed pairs
    (new, old) whose shape or dtype differ, inputs only ``new`` has, inputs only ``old`` has).

    The parameter lists are aligned on their shapes (an added or removed input shifts every later
    position, so pairing by index would call every later input changed); what the alignment leaves
    unmatched is paired where it was made and by rank, so a batch that changed size is one input
    that changed shape, not one input removed and another added."""
    matcher = difflib.SequenceMatcher(a=[p["shape"] for p in old], b=[p["shape"] for p in new], autojunk=False)
    gone, came = [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            gone += old[i1:i2]
            came += new[j1:j2]
    changed = []
    rules = [lambda a, b: a["where"] == b["where"] and _rank(a) == _rank(b),
             lambda a, b: _rank(a) == _rank(b) and _dtype(a) == _dtype(b)]
    if len(came) == len(gone):  # inputs replaced one for one: a dtype change keeps only the rank
        rules.append(lambda a, b: _rank(a) == _rank(b))
    for same in rules:
        for a in list(came):
            b = next((b for b in gone if same(a, b)), None)
            if b is not None:
                changed.append((a, b))
                came.remove(a)
                gone.remove(b)
    # (with repeated shapes the alignment can leave equal inputs unmatched: those only moved)
    changed = [(a, b) for a, b in changed if _dims(a) != _dims(b)]
    changed.sort(key=lambda pair: pair[0]["index"])
    return changed, came, gone


def _dims(p: dict) -> tuple:
    shape = parse_shape(p["shape"])
    return shape.dtype, tuple(shape.dims)


def _rank(p: dict) -> int:
    return len(parse_shape(p["shape"]).dims)


def _dtype(p: dict) -> str:
    return parse_shape(p["shape"]).dtype


def _changed_constants(new: list[dict], old: list[dict], sizes: set[tuple[str, str]]) -> list[tuple[dict, dict]]:
    """Scalars baked into both graphs at the same place whose values differ, when the two graphs bake
    the same scalars (op, shape, line, in order; when they do not, the graphs differ in structure
    and pairing their scalars would pair unrelated ones). ``sizes``: (old, new) dimension pairs of
    inputs that changed shape: a scalar that changed the same way was derived from that shape."""
    key = lambda c: (c.get("op"), c["shape"], c.get("where"))  # noqa: E731
    if len(new) != len(old) or any(key(a) != key(b) for a, b in zip(new, old)):
        return []
    return [(a, b) for a, b in zip(new, old)
            if a["value"] != b["value"] and (_number(b["value"]), _number(a["value"])) not in sizes]


def _number(text) -> str:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return str(text)
    return str(int(value)) if value.is_integer() else str(value)


def _size_changes(changed: list[tuple[dict, dict]]) -> set[tuple[str, str]]:
    """(old, new) sizes that follow from inputs that changed shape: a changed dimension, and the
    products of the dimensions up to and from it (a mean over the tokens of a batch divides by
    batch x sequence)."""
    out = set()
    for a, b in changed:
        da, db = list(parse_shape(a["shape"]).dims), list(parse_shape(b["shape"]).dims)
        if len(da) != len(db):
            continue
        for i in range(len(da)):
            for j in range(i + 1, len(da) + 1):
                old, new = math.prod(db[i:j]), math.prod(da[i:j])
                if old != new:
                    out.add((str(old), str(new)))
    return out


def _counted(items: list[str]) -> list[str]:
    """The same sentence once, with how many times it applies."""
    counts = Counter(items)
    return [text if counts[text] == 1 else f"{text} (x{counts[text]})" for text in dict.fromkeys(items)]


def _op(c: dict) -> str:
    return f" ({c['op']})" if c.get("op") else ""


def _listed(items: list[str], noun: str) -> list[str]:
    more = len(items) - MAX_LISTED
    return items[:MAX_LISTED] + ([f"and {_n(more, 'more ' + noun)}"] if more > 0 else [])


def explain(new: dict, old: dict | None, *, split_by: str | None = None, compared_with: str | None = None,
            first_at: str | None = None) -> str:
    """Why ``new`` is a different graph from ``old``: every difference, most important first (input
    shapes and dtypes, inputs added or removed, baked scalars, traced ops, outputs), joined by "; ".
    ``compared_with``: which earlier graph ``old`` is, when it is not this cell's own; ``first_at``:
    where the step synced, when the cell compiled other graphs before it but none synced there."""
    parts = []
    if split_by:
        parts.append(split_by)
    if old is None:
        parts.append(f"the cell's first graph synced {first_at}: no earlier graph synced there to compare with"
                     if first_at else "first compile of this cell: no earlier graph of it to compare with")
        return "; ".join(parts)
    if compared_with:
        parts.append(f"compared with {compared_with}")
    p_new, p_old = new["params"], old["params"]
    changed, added, removed = match_inputs(p_new, p_old)
    found = []
    for a, b in changed:
        sa, sb = parse_shape(a["shape"]), parse_shape(b["shape"])
        what = "dtype" if sa.dims == sb.dims and sa.dtype != sb.dtype else "shape"
        found.append(f"input {a['index']} changed {what}: {b['shape']} -> {a['shape']}{_at(a['where'])}")
    found = _listed(found, "inputs changed")
    if len(p_new) != len(p_old):
        hint = ""
        if added:
            wheres = list(dict.fromkeys(p["where"] for p in added if p["where"]))[:3]
            hint = f" (new inputs from {', '.join(wheres)})" if wheres else ""
        # (within a cell the usual reason is state the first step made; another cell's graph may differ more)
        found.append(
            f"the graph takes {_n(len(p_new), 'input')} instead of {len(p_old)}{hint}: tensors that earlier "
            "steps created, such as optimizer state made on the first step, are now inputs"
            if len(p_new) > len(p_old) and not compared_with else
            f"the graph takes {_n(len(p_new), 'input')} instead of {len(p_old)}{hint}")
    elif added or removed:
        found += _listed([f"input {p['index']} is new: {p['shape']}{_at(p['where'])}" for p in added], "new inputs")
        found.append(f"{_n(len(removed), 'earlier input')} no longer taken")
    scalars = [f"a Python scalar baked into the graph changed: {b['value']} -> {a['value']}"
               f"{_op(a)}{_at(a['where'])}"
               for a, b in _changed_constants(new["constants"], old["constants"], _size_changes(changed))]
    found += _listed(_counted(scalars), "scalars changed")
    if len(p_new) == len(p_old):  # (with new inputs, new ops are expected: the optimizer's update)
        ops = _ops_change(new["nodes"], old["nodes"], shapes=not changed)
        if ops:
            found.append(ops)
    if len(new["outputs"]) != len(old["outputs"]):
        found.append(f"the set of outputs changed: {_n(len(new['outputs']), 'output')} instead of {len(old['outputs'])}")
    if not found and not split_by:
        found.append("same inputs, constants and ops as the earlier graph; the hash differs in how "
                     "inputs are passed (buffer donation, sharding or compile options)")
    return "; ".join(parts + found)


def _ops_change(n_new: list[dict], n_old: list[dict], shapes: bool) -> str | None:
    """The first traced op that differs (by op, and by shape too when no input shape change already
    explains shapes), or how many ops were added or dropped."""
    for i, (a, b) in enumerate(zip(n_new, n_old)):
        if a["op"] != b["op"] or (shapes and a["shape"] != b["shape"]):
            return (f"the traced ops changed at node {i}: {a['op']} {a['shape']}{_at(a.get('where'))} "
                    f"where the earlier graph had {b['op']} {b['shape']}{_at(b.get('where'))}")
    if len(n_new) != len(n_old):
        longer, shorter = (n_new, n_old) if len(n_new) > len(n_old) else (n_old, n_new)
        first = longer[len(shorter)]
        verb = "adds" if longer is n_new else "drops"
        return (f"the traced ops changed: this graph {verb} {len(longer) - len(shorter)} ops from node "
                f"{len(shorter)} on ({first['op']}{_at(first.get('where'))})")
    return None


def op_similarity(a: dict, b: dict, counts_a: Counter | None = None, counts_b: Counter | None = None) -> float:
    """0..1: how alike two graphs' traced ops are, to find the nearest earlier graph in the kernel
    for a cell with none of its own: 1 when the ops are the same in the same order (shapes aside),
    else the share of (op, line) pairs they have in common, so the same function called from
    another cell matches, and another model that merely uses the same ops does not. ``counts_*``:
    ``op_counts`` of each, when the caller keeps them."""
    na, nb = a["nodes"], b["nodes"]
    if min(len(na), len(nb)) < 0.5 * max(len(na), len(nb)):
        return 0.0  # (the share below cannot reach one half)
    if len(na) == len(nb) and all(x["op"] == y["op"] for x, y in zip(na, nb)):
        return 1.0
    ca = counts_a if counts_a is not None else op_counts(a)
    cb = counts_b if counts_b is not None else op_counts(b)
    total = sum((ca | cb).values())
    return sum((ca & cb).values()) / total if total else 0.0


def op_counts(signature: dict) -> Counter:
    """(op, line) -> count over the graph's traced ops; inputs left out (where an input was made
    says nothing about what the graph computes)."""
    return Counter((n["op"], n.get("where")) for n in signature["nodes"] if n["op"] != "xla::device_data")
