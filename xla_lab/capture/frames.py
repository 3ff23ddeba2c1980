"""Which Python frames are the model's own code, and which are the machinery between it and XLA.

A kernel or a sync is credited to the *model's own line*: the innermost frame outside torch,
torch_xla (and functorch), xla_lab, IPython and Python's standard library. That is a notebook cell, a
user's module, or a library the model comes from (``transformers/models/bert/modeling_bert.py``,
``torchvision/models/resnet.py``), never ``linear.py:134`` or ``adam.py:447``.
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import os
import re
import sys
import sysconfig
from typing import Iterable, Protocol



class _Frame(Protocol):
    file: str
    function: str
    line: int


# (with the Jupyter kernel's own machinery: a frame of its event loop is never the model's line, e.g.
# tornado's ``platform/asyncio.py`` under a backward that runs from the cell)
_INTERNAL_PACKAGES = ("torch", "torch_xla", "functorch", "xla_lab", "IPython", "ipykernel", "tornado", "zmq",
                      "jupyter_client", "jupyter_core", "traitlets", "nest_asyncio")


@functools.cache
def _internal_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(package directories, standard library directories), each ending in a separator."""
    packages = set()
    for name in _INTERNAL_PACKAGES:
        module = sys.modules.get(name)
        spec = module.__spec__ if module is not None else importlib.util.find_spec(name)
        packages.update((spec.submodule_search_locations or []) if spec else [])
    paths = sysconfig.get_paths()
    stdlib = {paths["stdlib"], paths["platstdlib"]}
    return (tuple(os.path.join(os.path.realpath(r), "") for r in packages),
            tuple(os.path.join(os.path.realpath(r), "") for r in stdlib if r))


@functools.lru_cache(maxsize=8192)
def is_internal(file: str) -> bool:
    """Is this file part of torch, torch_xla (the machinery between a model and XLA), xla_lab, IPython
    and the Jupyter kernel, or Python's standard library, rather than the model's own code (a cell, a local module, a
    library such as transformers or torchvision)?"""
    if file.startswith("<"):  # "<ipython-input-3-...>" is a cell; these are generated machinery:
        return file.startswith(_GENERATED)
    path = os.path.realpath(file)
    packages, stdlib = _internal_roots()
    if path.startswith(packages) or _INSTALLED_INTERNAL.search(path):
        return True
    return path.startswith(stdlib) and "/site-packages/" not in path and "/dist-packages/" not in path


# importlib, torch.fx's graph code, and the code IPython's %time / %timeit compile from a cell's line (the
# cell's frame below them names the line the user wrote)
_GENERATED = ("<frozen ", "<eval_with_key>", "<timed exec>", "<timed eval>", "<magic-timeit>")
# the same packages installed elsewhere (frames recorded in another environment: a saved capture)
_INSTALLED_INTERNAL = re.compile(r"/(?:site|dist)-packages/(?:%s)/" % "|".join(_INTERNAL_PACKAGES))


@functools.lru_cache(maxsize=4096)
def import_path(file: str) -> str:
    """A model file's path as short as it is unambiguous: relative to the ``sys.path`` entry it was
    imported from (``transformers/models/bert/modeling_bert.py``), else as given."""
    path = os.path.realpath(file)
    best = ""
    for entry in sys.path:
        root = os.path.join(os.path.realpath(entry or os.getcwd()), "")
        if path.startswith(root) and len(root) > len(best):
            best = root
    return path[len(best):] if best else file


def model_frame(frames: Iterable[_Frame], stop_at: str | None = None):
    """The innermost frame of ``frames`` (innermost first) that is the model's own code, or None when
    that is the frame in ``stop_at`` (the running cell: its line is already known) or there is none."""
    for frame in frames:
        if frame.file == stop_at:
            return None
        if not is_internal(frame.file):
            return frame
    return None


def frame_code(frame: _Frame) -> str | None:
    return linecache.getline(frame.file, frame.line).strip() or None
