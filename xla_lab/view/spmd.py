"""SPMD in text: the device count, each collective (what it moves, between which devices, from which
line) and a mesh picture per split input. Rendered from ``GraphArtifacts.spmd``; the summary, rich
and static HTML views all use these lines."""

from __future__ import annotations

from xla_lab.capture.source_ref import ref_text

from .details import fmt_bytes

MAX_PICTURES = 4


def _where(entry: dict) -> str:
    lines = entry.get("lines") or []
    if lines:
        shown = ", ".join(ref_text(ln) for ln in lines[:3])
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


def mesh_text(t: dict) -> str:
    """A grid of the tensor's blocks, each cell naming the devices that hold it (2-D view: the first
    two split dimensions; 1-D tensors are one row)."""
    if not t["blocks"]:
        return f"{t['shape']}: {t['layout']} (every device holds all of it)"
    tiles = [b["tile"] for b in t["blocks"]]
    ndim = len(tiles[0])
    counts = [max(tl[d] for tl in tiles) + 1 for d in range(ndim)]
    split = [d for d in range(ndim) if counts[d] > 1][:2] or [0]
    rows_dim = split[0] if len(split) == 2 else None
    cols_dim = split[-1]
    grid: dict[tuple[int, int], set[int]] = {}
    ranges: dict[tuple[int, int], tuple] = {}
    for b in t["blocks"]:
        r = b["tile"][rows_dim] if rows_dim is not None else 0
        c = b["tile"][cols_dim]
        grid.setdefault((r, c), set()).update(b["devices"])
        ranges[(r, c)] = (b["ranges"][rows_dim] if rows_dim is not None else None, b["ranges"][cols_dim])
    n_rows = counts[rows_dim] if rows_dim is not None else 1
    n_cols = counts[cols_dim]
    cells = {k: "dev " + ",".join(map(str, sorted(v))) for k, v in grid.items()}
    width = max(len(s) for s in cells.values()) + 2
    col_heads = [f"[{ranges[(0, c)][1][0]}:{ranges[(0, c)][1][1]}]" for c in range(n_cols)]
    width = max(width, *(len(h) + 2 for h in col_heads))
    row_heads = [f"[{ranges[(r, 0)][0][0]}:{ranges[(r, 0)][0][1]}]" if rows_dim is not None else ""
                 for r in range(n_rows)]
    lead = max((len(h) for h in row_heads), default=0) + 1
    title = f"{t['shape']} {t['layout']}"
    if rows_dim is not None:
        title += f" (rows: dim {rows_dim}, columns: dim {cols_dim})"
    else:
        title += f" (dim {cols_dim})"
    lines = [title, " " * lead + "".join(h.center(width + 1) for h in col_heads)]
    rule = " " * lead + "+" + "+".join("-" * width for _ in range(n_cols)) + "+"
    lines.append(rule)
    for r in range(n_rows):
        lines.append(row_heads[r].rjust(lead - 1) + " |" + "|".join(cells[(r, c)].center(width) for c in range(n_cols)) + "|")
        lines.append(rule)
    return "\n".join(lines)
