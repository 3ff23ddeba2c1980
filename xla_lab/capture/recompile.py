"""Why a step missed the compile cache, in words: compare its graph's signature
(``hlo/signature.py``) with the nearest earlier graph's. torch_xla's own debug output only says where a
sync happened; this says what changed. The sentence is the record's ``recompile_reason``.
"""

from __future__ import annotations

from xla_lab.hlo.shapes import parse_shape


def describe_line(ln: dict) -> str:
    """A cell line as the reasons and warnings name it: "cell [5] line 3 (loss = model(x))"."""
    cell = ln.get("cell")
    where = f"line {ln['line']}" if cell is None else f"cell [{cell}] line {ln['line']}"
    return where + (f" ({ln['code']})" if ln.get("code") else "")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _at(where: str | None) -> str:
    return f" at {where}" if where else ""


def explain(new: dict, old: dict | None, *, split_by: str | None = None) -> str:
    """One sentence (or two) on why ``new`` is a different graph from ``old``."""
    parts = []
    if split_by:
        parts.append(split_by)
    if old is None:
        parts.append("first compile of this cell: no earlier graph of it to compare with")
        return "; ".join(parts)
    p_new, p_old = new["params"], old["params"]
    if len(p_new) == len(p_old):
        for a, b in zip(p_new, p_old):
            if a["shape"] != b["shape"]:
                sa, sb = parse_shape(a["shape"]), parse_shape(b["shape"])
                what = "dtype" if sa.dims == sb.dims and sa.dtype != sb.dtype else "shape"
                parts.append(f"input {a['index']} changed {what}: {b['shape']} -> {a['shape']}{_at(a['where'])}")
                return "; ".join(parts)
    else:
        extra = [p for p in p_new[len(p_old):]] if len(p_new) > len(p_old) else []
        hint = ""
        if extra:
            wheres = list(dict.fromkeys(p["where"] for p in extra if p["where"]))[:3]
            hint = f" (new inputs from {', '.join(wheres)})" if wheres else ""
        parts.append(
            f"the graph takes {_n(len(p_new), 'input')} instead of {len(p_old)}{hint}: tensors that earlier "
            "steps created, such as optimizer state made on the first step, are now inputs"
            if len(p_new) > len(p_old) else
            f"the graph takes {_n(len(p_new), 'input')} instead of {len(p_old)}")
        return "; ".join(parts)
    if len(new["outputs"]) != len(old["outputs"]):
        parts.append(f"the set of outputs changed: {_n(len(new['outputs']), 'output')} instead of {len(old['outputs'])}")
        return "; ".join(parts)
    c_new, c_old = new["constants"], old["constants"]
    if len(c_new) == len(c_old):
        for a, b in zip(c_new, c_old):
            if a["value"] != b["value"] and a["shape"] == b["shape"]:
                op = f" ({a['op']})" if a.get("op") else ""
                parts.append(f"a Python scalar baked into the graph changed: {b['value']} -> {a['value']}{op}"
                             f"{_at(a['where'])}")
                return "; ".join(parts)
    n_new, n_old = new["nodes"], old["nodes"]
    for i, (a, b) in enumerate(zip(n_new, n_old)):
        if (a["op"], a["shape"]) != (b["op"], b["shape"]):
            parts.append(f"the traced ops changed at node {i}: {a['op']} {a['shape']}{_at(a.get('where'))} "
                         f"where the earlier graph had {b['op']} {b['shape']}{_at(b.get('where'))}")
            return "; ".join(parts)
    if len(n_new) != len(n_old):
        longer, shorter = (n_new, n_old) if len(n_new) > len(n_old) else (n_old, n_new)
        first = longer[len(shorter)]
        verb = "adds" if longer is n_new else "drops"
        parts.append(f"the traced ops changed: this graph {verb} {len(longer) - len(shorter)} ops from node "
                     f"{len(shorter)} on ({first['op']}{_at(first.get('where'))})")
        return "; ".join(parts)
    if not split_by:
        parts.append("same inputs, constants and ops as the earlier graph; the hash differs in how "
                     "inputs are passed (buffer donation, sharding or compile options)")
    return "; ".join(parts)
