"""Memory budgets as people write them: ``16GiB``, ``16 GB``, ``1.5e9``, or a device's name (``v5e``,
``TPU v4``, ``A100-80GB``, ``H100``), read as the memory of one chip (HBM per chip for TPUs, the card's
memory for GPUs). Under SPMD a budget is per device, compared with the per-device peak of the
partitioned program. Pure: no torch_xla.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GiB = 1 << 30
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
}

# Memory per chip (HBM for TPUs, the card's memory for GPUs), in GiB as the vendors list it.
DEVICES: dict[str, tuple[str, float]] = {
    "v2": ("TPU v2 (HBM per chip)", 16), "v3": ("TPU v3 (HBM per chip)", 32),
    "v4": ("TPU v4 (HBM per chip)", 32), "v5e": ("TPU v5e (HBM per chip)", 16),
    "v5litepod": ("TPU v5e (HBM per chip)", 16), "v5p": ("TPU v5p (HBM per chip)", 95),
    "v6e": ("TPU v6e Trillium (HBM per chip)", 32),
    "a100": ("NVIDIA A100 40GB", 40), "a10040gb": ("NVIDIA A100 40GB", 40), "a10080gb": ("NVIDIA A100 80GB", 80),
    "h100": ("NVIDIA H100 80GB", 80), "h10080gb": ("NVIDIA H100 80GB", 80), "h200": ("NVIDIA H200 141GB", 141),
    "l4": ("NVIDIA L4 24GB", 24), "t4": ("NVIDIA T4 16GB", 16), "a10": ("NVIDIA A10 24GB", 24),
    "a10g": ("NVIDIA A10G 24GB", 24), "v100": ("NVIDIA V100 16GB", 16), "v10032gb": ("NVIDIA V100 32GB", 32),
    "l40s": ("NVIDIA L40S 48GB", 48), "rtx4090": ("NVIDIA RTX 4090 24GB", 24),
}


@dataclass(frozen=True)
class Budget:
    bytes: int
    label: str  # as the result names it: "16.0 GiB" or "TPU v5e (HBM per chip), 16 GiB"
    device: str | None = None  # the named device, if the budget was one


def _device_key(text: str) -> str:
    key = re.sub(r"[\s_\-]", "", text.lower())
    key = re.sub(r"^(tpu|nvidia|gpu)", "", key)
    return key


def parse_budget(text) -> Budget:
    """A budget from ``16GiB``, ``16 GB``, ``512MiB``, a number of bytes, or a device name. Raises
    ValueError with one line saying what is accepted."""
    if isinstance(text, bool):
        raise ValueError(f"cannot read the budget {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
        if not value > 0 or value != value or value == float("inf"):
            raise ValueError(f"the budget must be a positive amount of memory, got {text!r}")
        return Budget(int(value), _fmt(int(value)))
    raw = str(text).strip()
    key = _device_key(raw)
    if key in DEVICES:
        name, gib = DEVICES[key]
        return Budget(int(gib * GiB), f"{name}, {gib:g} GiB", name)
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)", raw.lower())
    if not m or m[2] not in _UNITS:
        known = "v4, v5e, v5p, v6e, A100, A100-80GB, H100, L4, T4, ..."
        raise ValueError(f"cannot read the budget {raw!r}: write an amount such as 16GiB, 16GB or 512MiB, "
                         f"or a device ({known})")
    value = float(m[1]) * _UNITS[m[2]]
    if value < 1:
        raise ValueError(f"the budget must be a positive amount of memory, got {raw!r}")
    return Budget(int(value), _fmt(int(value)))


def _fmt(n: int) -> str:
    for scale, prefix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}".replace(".00 ", " ")
    return f"{n} B"
