"""XLA's persistent compile cache, per notebook, where the PJRT client can read it back.

With it, a restarted kernel starts warm: graphs compiled in an earlier session of the same notebook
load from disk instead of compiling. torch_xla 2.9's CPU client writes that cache but cannot load an
executable back ("Deserializing serialized executable not supported"), so on CPU xla_lab leaves it
off and says so. ``XLA_LAB_PERSISTENT_CACHE=0`` turns it off everywhere.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from xla_lab import settings

CAN_READ_BACK = {"TPU", "CUDA", "GPU"}


def cache_dir(notebook: str | None = None) -> Path:
    """One directory per notebook (Jupyter tells the kernel its notebook in JPY_SESSION_NAME)."""
    notebook = notebook or os.environ.get("JPY_SESSION_NAME") or os.getcwd()
    digest = hashlib.sha256(notebook.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xla_lab" / "compile-cache"
    return root / f"{Path(notebook).stem or 'session'}-{digest}"


def enable(device: str) -> str:
    """Turn the cache on if this client can use it; returns what happened, for ``%xla status``."""
    if os.environ.get("XLA_PERSISTENT_CACHE_PATH"):
        return f"on at {os.environ['XLA_PERSISTENT_CACHE_PATH']} (set before xla_lab loaded)"
    if not settings.current().persistent_cache:
        return "off (XLA_LAB_PERSISTENT_CACHE=0)"
    if device.upper() not in CAN_READ_BACK:
        return (f"off: the {device} client cannot load compiled graphs back from disk, so a restarted "
                "kernel compiles them again (the precompile queue still hides what it can)")
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return "off: XLA's compile cache had already started when xla_lab loaded"
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(path), readonly=False)
    return f"on at {path}: a restarted kernel loads this notebook's compiled graphs"
