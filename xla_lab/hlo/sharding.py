"""SPMD shardings in HLO text: which device holds which block of a tensor, and what collectives move.

XLA writes a sharding as ``{replicated}``, ``{maximal device=N}``, ``{manual}``, or a tiled
``{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}`` (tile counts per dimension, then the device of
each tile in row-major order; a trailing replication dimension when ``last_tile_dim_replicate``), also
in iota form ``{devices=[2,2]<=[4]}`` / ``{devices=[2,2]<=[2,2]T(1,0)}``. The pre-optimization HLO
carries the user's ``mark_sharding`` on the graph's parameters and on ``Sharding`` custom calls; the
partitioned (optimized) module is what each device runs, with the collectives XLA inserted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import product

from .parser import HloModule, Instruction
from .shapes import Shape

COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_TILED = re.compile(r"devices=\[(?P<dims>[\d,]+)\](?P<rest>[^}]*)")


class ShardingParseError(ValueError):
    pass


@dataclass
class Sharding:
    kind: str  # "replicated" | "maximal" | "manual" | "tiled" | "tuple" | "unknown"
    text: str
    tiles: list[int] = field(default_factory=list)  # tiles per tensor dimension
    replicate: int = 1  # copies of each tile (last_tile_dim_replicate)
    devices: list[int] = field(default_factory=list)  # device of each tile (x copy), row-major
    device: int | None = None  # maximal

    @property
    def sharded(self) -> bool:
        return self.kind == "tiled" and any(t > 1 for t in self.tiles)

    def describe(self) -> str:
        if self.kind == "tiled":
            dims = " x ".join(str(t) for t in self.tiles)
            rep = f", each block on {self.replicate} devices" if self.replicate > 1 else ""
            return f"split {dims}{rep}"
        if self.kind == "maximal":
            return f"on device {self.device} only"
        return self.kind

    def blocks(self, dims: list[int]) -> dict[tuple[int, ...], list[int]]:
        """Tile index -> the devices holding it. Replicated tensors are one tile on every device
        (``devices`` is then unknown here: the caller passes the device count)."""
        if self.kind != "tiled":
            return {}
        out: dict[tuple[int, ...], list[int]] = {}
        per_tile = self.replicate
        for n, tile in enumerate(product(*(range(t) for t in self.tiles))):
            out[tile] = self.devices[n * per_tile:(n + 1) * per_tile]
        return out

    def ranges(self, dims: list[int], tile: tuple[int, ...]) -> list[tuple[int, int]]:
        """[start, stop) of a tile along each dimension (XLA pads the last tile when uneven)."""
        out = []
        for size, count, i in zip(dims, self.tiles, tile):
            step = -(-size // count)
            out.append((min(size, i * step), min(size, (i + 1) * step)))
        return out


def parse_sharding(text: str) -> Sharding:
    """Parse the value of a ``sharding=`` attribute."""
    t = text.strip()
    inner = t[1:-1].strip() if t.startswith("{") and t.endswith("}") else t
    if inner.startswith("{"):
        return Sharding("tuple", t)
    if inner.startswith("replicated"):
        return Sharding("replicated", t)
    if inner.startswith("manual"):
        return Sharding("manual", t)
    if inner.startswith("maximal"):
        m = re.search(r"device=(\d+)", inner)
        return Sharding("maximal", t, device=int(m[1]) if m else None)
    m = _TILED.match(inner)
    if not m:
        return Sharding("unknown", t)
    try:
        dims = [int(d) for d in m["dims"].split(",")]
    except ValueError:
        raise ShardingParseError(f"bad tile dimensions in sharding {t!r}") from None
    rest = m["rest"].strip()
    total = 1
    for d in dims:
        total *= d
    if rest.startswith("<="):
        devices = _iota(rest, total, t)
    else:
        ids = re.match(r"[\d,\s]+", rest)
        devices = [int(x) for x in ids[0].replace(" ", "").split(",") if x] if ids else []
    if len(devices) != total:
        raise ShardingParseError(f"sharding {t!r} lists {len(devices)} devices for {total} tiles")
    replicate = 1
    if "last_tile_dim_replicate" in rest:
        replicate = dims.pop()
    elif "last_tile_dims" in rest:  # subgroup kinds (replicated / manual): fold them into copies
        kinds = re.search(r"last_tile_dims=\{([^}]*)\}", rest)
        n = len(kinds[1].split(",")) if kinds else 1
        for _ in range(n):
            replicate *= dims.pop()
    return Sharding("tiled", t, tiles=dims, replicate=replicate, devices=devices)


def _iota(rest: str, total: int, text: str) -> list[int]:
    """``<=[4]`` / ``<=[2,2]T(1,0)``: arange reshaped, optionally transposed, flattened."""
    m = re.match(r"<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if not m:
        raise ShardingParseError(f"bad iota device list in sharding {text!r}")
    shape = [int(x) for x in m[1].split(",")]
    perm = [int(x) for x in m[2].split(",")] if m[2] else list(range(len(shape)))
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    out_shape = [shape[p] for p in perm]
    devices = []
    for idx in product(*(range(s) for s in out_shape)):
        devices.append(sum(idx[k] * strides[perm[k]] for k in range(len(perm))))
    return devices


@dataclass
class ShardedTensor:
    """A graph input (or a ``mark_sharding`` point) and how it is laid out on the devices."""

    name: str  # the HLO instruction
    role: str  # "input N" or "annotation"
    shape: str  # the global (logical) shape
    sharding: str  # XLA's text
    layout: str  # "split 2 x 1, each block on 2 devices"
    per_device_shape: str
    blocks: list[dict]  # [{"tile": [i, j], "ranges": [[start, stop], ...], "devices": [..]}]
    lines: list[dict] = field(default_factory=list)  # cell lines where it was used / annotated

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def sharded_tensors(module: HloModule, lines_of=None, partitioned: bool = False) -> list[ShardedTensor]:
    """The entry parameters and ``Sharding`` annotations of a pre-optimization module, with their
    layout (tensors that are not split, e.g. replicated ones, are listed too: they cost memory on
    every device). ``partitioned``: the module is the optimized one, whose parameters have one
    device's shape and keep their sharding: the whole tensor's shape is that times the tiles (lean
    capture, which has no module before optimization)."""
    out = []
    for ins in module.entry.instructions:
        text = ins.attributes.get("sharding")
        if text is None:
            continue
        if ins.opcode == "parameter":
            role = f"input {ins.literal}"
        elif ins.opcode == "custom-call" and "Sharding" in ins.attributes.get("custom_call_target", ""):
            role = "annotation"
        else:
            continue
        out.append(describe_tensor(ins, text, role, lines_of, partitioned))
    return out


def describe_tensor(ins: Instruction, text: str, role: str, lines_of=None, partitioned: bool = False) -> ShardedTensor:
    sharding = parse_sharding(text)
    dims = list(ins.shape.dims) if isinstance(ins.shape, Shape) and not ins.shape.is_tuple else []
    whole = str(ins.shape)
    if partitioned and sharding.kind == "tiled" and len(sharding.tiles) == len(dims):
        dims = [d * t for d, t in zip(dims, sharding.tiles)]
        whole = f"{ins.shape.dtype}[{','.join(map(str, dims))}]"
    blocks = []
    per_device = dims
    if sharding.kind == "tiled" and len(sharding.tiles) == len(dims):
        for tile, devices in sharding.blocks(dims).items():
            blocks.append({"tile": list(tile), "ranges": [list(r) for r in sharding.ranges(dims, tile)],
                           "devices": devices})
        per_device = [-(-d // t) for d, t in zip(dims, sharding.tiles)]
    dtype = ins.shape.dtype if isinstance(ins.shape, Shape) else ""
    return ShardedTensor(ins.name, role, whole, text, sharding.describe(),
                         f"{dtype}[{','.join(map(str, per_device))}]", blocks,
                         lines_of(ins) if lines_of else [])


@dataclass
class Collective:
    """A collective of the partitioned module: what it moves, between which devices, and why."""

    name: str
    kind: str
    shape: str
    bytes: int  # payload per device: the operand (all-reduce, reduce-scatter, all-to-all,
    # collective-permute) or the gathered result (all-gather)
    groups: list[list[int]]  # replica groups (devices that exchange data)
    group_size: int
    computation: str

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def collectives(module: HloModule) -> list[Collective]:
    out = []
    for comp in module.computations.values():
        for ins in comp.instructions:
            kind = ins.opcode.removesuffix("-start")
            if kind not in COLLECTIVE_OPS:
                continue
            groups = _groups(ins)
            if kind == "all-gather":
                payload = ins.shape.byte_size if isinstance(ins.shape, Shape) else 0
            else:
                payload = sum(comp.by_name[o].shape.byte_size for o in ins.operands
                              if o in comp.by_name and isinstance(comp.by_name[o].shape, Shape))
            out.append(Collective(ins.name, kind, ins.shape_text, payload, groups,
                                  max((len(g) for g in groups), default=0), comp.name))
    return out


def _groups(ins: Instruction) -> list[list[int]]:
    text = ins.attributes.get("replica_groups") or ins.attributes.get("source_target_pairs") or ""
    iota = re.match(r"\[(\d+),(\d+)\]<=(\[[\d,]+\](?:T\([\d,]+\))?)", text.strip())
    if iota:  # [groups,size]<=[N]: iota form
        n_groups, size = int(iota[1]), int(iota[2])
        devices = _iota("<=" + iota[3], n_groups * size, text)
        return [devices[i * size:(i + 1) * size] for i in range(n_groups)]
    return [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([\d,\s]*)\}", text)]


_DEVICE_LIST = re.compile(r"devices=\[[\d,]+\]([\d,]+)")


def num_partitions(module: HloModule) -> int:
    """The devices a module is partitioned over: its header's ``num_partitions``; a module printed from
    a proto (lean capture) has no header config, so the largest device its shardings name, plus one."""
    try:
        if "num_partitions" in module.attributes:
            return int(module.attributes["num_partitions"])
    except ValueError:
        return 1
    most = -1
    for ins in module.entry.instructions:
        found = _DEVICE_LIST.search(ins.attributes.get("sharding", "") or "")
        if found:
            most = max([most] + [int(d) for d in found[1].split(",") if d])
    return most + 1 if most >= 1 else 1


def spmd_summary(before: HloModule | None, after: HloModule | None, kernels: list[dict] | None,
                 line_of=None) -> dict | None:
    """What SPMD did to a graph, for every view: the device count, each input's and annotation's
    layout, and each collective with its payload, groups and the cell lines that caused it (those of
    its kernel in the fusion map). None for a graph that is neither partitioned nor annotated."""
    devices = num_partitions(after) if after is not None else 1
    lines = (lambda ins: [x for x in [line_of(ins)] if x]) if line_of else None
    if before is not None:
        tensors = sharded_tensors(before, lines)
    else:  # (lean capture: the optimized module's parameters keep their shardings)
        tensors = sharded_tensors(after, lines, partitioned=True) if after is not None and devices > 1 else []
    if devices <= 1 and not any(t.blocks for t in tensors):
        return None
    by_kernel = {k["name"]: k for k in kernels or []}
    moves = []
    for c in collectives(after) if after is not None else []:
        entry = c.to_dict()
        kernel = by_kernel.get(c.name)
        entry["lines"] = kernel["lines"] if kernel else []
        entry["lines_inferred"] = bool(kernel and kernel.get("lines_inferred"))
        entry["sources"] = kernel["sources"] if kernel else []
        moves.append(entry)
    return {"devices": devices, "tensors": [t.to_dict() for t in tensors], "collectives": moves,
            "memory_per_device": True}
