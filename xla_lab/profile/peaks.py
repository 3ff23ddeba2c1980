"""This machine's peaks for the roofline: FLOP/s of a large float32 matmul and bytes/s of a large
copy, measured once by a short microbenchmark (about half a second) and cached per host in
``~/.cache/xla_lab/peaks.json``. ``XLA_LAB_PEAKS="FLOPS,BYTES"`` (e.g. ``"197e12,819e9"`` for a TPU
v5e) sets them instead: on TPU and GPU, give the device's own figures.

The CPU client runs XLA's kernels on the same cores and memory torch's CPU kernels use, so torch's
best matmul and copy stand for what the hardware gives; XLA's kernels may reach less of it (that is
what the roofline shows). The bytes are DRAM-sized copies: kernels whose data fits in caches can run
above the memory roof.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from xla_lab import settings

def cache_file() -> Path:
    """Where measured peaks are kept (read when asked, not at import: the environment may change first)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xla_lab" / "peaks.json"


def _key(device: str) -> str:
    return f"{platform.node()}|{os.cpu_count()}|{device}"


def measure() -> dict:
    """Best of a few runs: a 1024^3 float32 matmul and a 64 MiB copy, with torch on the CPU."""
    import torch

    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up (thread pool, allocator)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    flops = 2 * n**3 / best
    src = torch.empty(16 * 2**20)  # 64 MiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    moved = 2 * src.numel() * src.element_size()  # read + write
    return {"flops_per_s": flops, "bytes_per_s": moved / best,
            "source": f"measured on this machine ({os.cpu_count()} CPUs): float32 matmul 1024^3, 64 MiB copy"}


def at_least(device: str, flops_per_s: float) -> dict | None:
    """The measured peaks, raised so that the FLOP/s peak is at least ``flops_per_s`` (a rate a kernel
    achieved): measured again now, the best of that, the cached figure and the kernel's is kept (cached).
    A measurement taken while the machine was busy (seen: 93 GFLOP/s cached, 183-198 measured on the
    quiet machine) otherwise put kernels at 150% of the compute roof. None where the peaks are not
    measured (``XLA_LAB_PEAKS`` given, or not the CPU)."""
    if settings.current().peaks is not None or device.upper() != "CPU":
        return None
    known = peaks(device) or {}
    now = measure()
    best = max(now["flops_per_s"], known.get("flops_per_s", 0.0), flops_per_s)
    found = {"flops_per_s": best, "bytes_per_s": max(now["bytes_per_s"], known.get("bytes_per_s", 0.0)),
             "source": now["source"] + ("" if best > flops_per_s else "; the FLOP/s peak is the best rate a kernel "
                                        "achieved here, above what the microbenchmark measured")}
    _save(device, found)
    return found


def _save(device: str, found: dict) -> None:
    try:
        cache = cache_file()
        cached = json.loads(cache.read_text()) if cache.exists() else {}
    except (OSError, ValueError):
        cached = {}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cached = cached if isinstance(cached, dict) else {}
        cached[_key(device)] = found
        cache.write_text(json.dumps(cached, indent=1))
    except OSError:
        pass  # a read-only home: measured again next session


def peaks(device: str = "CPU") -> dict | None:
    """``{"flops_per_s", "bytes_per_s", "source"}``; None where unknown (a TPU or GPU without
    ``XLA_LAB_PEAKS``)."""
    given = settings.current().peaks
    if given is not None:
        if given == settings.PEAKS_UNREADABLE:  # set, but not to two positive numbers (settings said so)
            return None
        flops, moved = given
        return {"flops_per_s": flops, "bytes_per_s": moved, "source": settings.name("peaks")}
    if device.upper() != "CPU":
        return None
    key = _key(device)
    try:
        cached = json.loads(cache_file().read_text())
        found = cached.get(key)
        if isinstance(found, dict) and found.get("flops_per_s", 0) > 0 and found.get("bytes_per_s", 0) > 0:
            return found
    except (OSError, ValueError, AttributeError):
        cached = {}
    found = measure()
    _save(device, found)
    return found
