"""SPMD in text: the device count, each collective (what it moves, between which devices, from which
line) and a mesh picture per split input. Rendered from ``GraphArtifacts.spmd``; the summary, rich
and static HTML views all use these lines."""

from __future__ import annotations

from xla_lab.hlo.sharding import mesh_text

from .details import fmt_bytes

MAX_PICTURES = 4


def _where(entry: dict) -> str:
    lines = entry.get("lines") or []
    if lines:
        shown = ", ".join(f"[{ln['cell']}] line {ln['line']}" if ln.get("cell") is not None else f"line {ln['line']}"
                          for ln in lines[:3])
        code = lines[0].get("code")
        via = " (via data flow)" if entry.get("lines_inferred") else ""
        return f"{shown}{via}" + (f": {code}" if code else "")
    return ", ".join(entry.get("sources") or []) or "no source line"


def spmd_lines(spmd: dict | None, pictures: int = MAX_PICTURES) -> list[str]:
    if not spmd:
        return []
    n = spmd["devices"]
    moves = spmd["collectives"]
    total = sum(c["bytes"] for c in moves)
    out = [f"SPMD over {n} devices (memory figures are per device): {len(moves)} collective"
           f"{'s' if len(moves) != 1 else ''} moving {fmt_bytes(total)} per device per step"]
    for c in moves:
        groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in c["groups"][:4])
        more = " ..." if len(c["groups"]) > 4 else ""
        out.append(f"  {c['kind']:<18} {c['shape']:<20} {fmt_bytes(c['bytes']):>10}  groups {groups}{more}  <- {_where(c)}")
    split = [t for t in spmd["tensors"] if t["blocks"]]
    for t in split[:pictures]:
        out.append(f"  {t['role']}: {t['shape']} -> {t['per_device_shape']} per device")
        out.extend("    " + line for line in mesh_text(t).splitlines())
    if len(split) > pictures:
        out.append(f"  ... {len(split) - pictures} more split tensors")
    return out
