"""The torch_xla releases xla_lab supports, and the one place where they differ.

xla_lab is added to an environment that already chose its torch and torch_xla (a TPU VM set up from
pytorch/xla's README, a Kaggle or Colab image), so it names a range instead of a release: torch_xla
2.8.x and 2.9 (the last releases of pytorch/xla; its successor, TorchTPU, is another package). Each
release is tested in CI (the main environment on 2.9.0, a second one on 2.8.1). Where a release
spells something differently, the difference is handled here, and nowhere else.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

SUPPORTED = (2, 8), (2, 10)  # torch_xla >= 2.8, < 2.10: the range pyproject.toml names too
SUPPORTED_TEXT = "torch_xla 2.8.x and 2.9.x (>=2.8,<2.10)"
# What is known of releases outside the range: xla_lab reads torch_xla's sync log, XLA's dump file
# names and the profiler's events, which change between releases
KNOWN_GAPS = {
    "older": "not tested there (the sync log, dump names and profiler events xla_lab reads may differ)",
    "newer": "there is no torch_xla release after 2.9 (pytorch/xla's successor is TorchTPU, "
             "`torch_tpu`), so it is untested: its logs, dumps and bindings may differ",
}


# Supported, but torch_xla itself behaves differently there (checked without xla_lab): xla_lab cannot
# catch a failed C++ check, which ends the process (the kernel) before Python sees an error
KNOWN_ON = {
    (2, 8): [
        "torch_xla 2.8 ends the process where 2.9 raises a RuntimeError, with or without xla_lab: an op "
        "of mismatched shapes while tracing (a failed check in ShapeHelper::ShapeOfXlaOp), and reading a "
        "tensor whose graph failed while running, such as a train step that ran out of memory (a failed "
        "check in PjRtComputationClient::TransferFromDevice); a graph XLA cannot compile still raises",
    ],
}


def errors_end_the_process(torch_xla_version: str) -> bool:
    """True where torch_xla ends the process on a shape error while tracing and on reading the
    result of a graph that failed while running (see KNOWN_ON)."""
    found = release(torch_xla_version)
    return found is not None and found < (2, 9)


def known_differences(torch_xla_version: str) -> list[str]:
    """What differs on this supported release, for ``%xla status`` (nothing on 2.9)."""
    found = release(torch_xla_version)
    return list(KNOWN_ON.get(found, [])) if found else []


@dataclass(frozen=True)
class Versions:
    """What this process runs: the framework and the XLA compiler built into torch_xla."""

    torch: str
    torch_xla: str
    xla: str  # the openxla commit torch_xla was built from

    def rows(self) -> list[tuple[str, str]]:
        """(what, version) rows for ``%xla status``."""
        return [("torch", self.torch), ("torch_xla", self.torch_xla), ("XLA (openxla commit)", self.xla)]


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``2.8.1``, ``2.9.0+git1a2b`` or ``2.10.0.dev2025``."""
    found = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def versions() -> Versions:
    """The versions of torch and torch_xla imported here (imports them)."""
    import torch
    import torch_xla

    try:
        from torch_xla import version as xla_version

        xla = getattr(xla_version, "__xla_gitrev__", "") or "unknown"
    except ImportError:
        xla = "unknown"
    return Versions(str(torch.__version__), str(torch_xla.__version__), xla[:12])


def unsupported(torch_xla_version: str) -> str | None:
    """One line for a torch_xla outside the supported range, naming the range and what is known to be
    missing there; None inside it."""
    found = release(torch_xla_version)
    if found is not None and SUPPORTED[0] <= found < SUPPORTED[1]:
        return None
    side = "older" if found is not None and found < SUPPORTED[0] else "newer"
    return (f"torch_xla {torch_xla_version} is outside the range xla_lab supports, {SUPPORTED_TEXT}: "
            f"{KNOWN_GAPS[side]}. Captures may be incomplete; install a supported torch_xla to be sure.")


def load_problems() -> list[str]:
    """What ``%load_ext xla_lab`` says about the installed framework (nothing when it is supported)."""
    if "torch_xla" not in sys.modules:
        try:
            import torch_xla  # noqa: F401
        except Exception as exc:  # a broken install: say so instead of failing the load
            return [f"torch_xla could not be imported ({type(exc).__name__}: {exc}); xla_lab needs "
                    f"{SUPPORTED_TEXT}"]
    problem = unsupported(versions().torch_xla)
    return [problem] if problem else []


# --- the bindings whose names differ ----------------------------------------------------------------
def placeholder_check(xlac):
    """torch_xla's binding that tells a tensor whose data has no buffer yet: 2.8 and 2.9 spell it
    ``_is_placecholder``; a later spelling fixed the typo."""
    return getattr(xlac, "_is_placecholder", None) or xlac._is_placeholder
