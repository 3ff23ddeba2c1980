"""The supported torch_xla range (``xla_lab/compat.py``): pure tests of the check that ``%load_ext``
and ``%xla status`` print, and of the versions read from the installed torch_xla."""

from __future__ import annotations

import tomllib
from pathlib import Path

from xla_lab import compat


def test_the_supported_releases_pass_and_others_get_one_line_naming_the_range():
    for inside in ("2.8.0", "2.8.1", "2.9.0", "2.9.0+gitabc123", "2.9.1rc1"):
        assert compat.unsupported(inside) is None, inside
    for outside, words in (("2.7.0", "not tested there"), ("2.10.0", "no torch_xla release after 2.9"),
                           ("3.0.0", "TorchTPU"), ("nightly", "untested")):
        line = compat.unsupported(outside)
        assert line is not None and "\n" not in line, outside
        assert f"torch_xla {outside} is outside the range" in line and compat.SUPPORTED_TEXT in line
        assert words in line, (outside, line)


def test_pyproject_names_the_same_range_and_pins_nothing_a_user_chose():
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    deps = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip(): d for d in project["dependencies"]}
    low, high = compat.SUPPORTED
    assert deps["torch-xla"].replace(" ", "") == f"torch-xla>={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    assert deps["torch"].replace(" ", "") == f"torch>={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    every = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    assert not [d for d in every if "==" in d], "exact pins live in requirements-lock.txt"


def test_the_installed_framework_is_read_and_supported():
    import torch
    import torch_xla
    from torch_xla import version

    found = compat.versions()
    assert found.torch == str(torch.__version__) and found.torch_xla == torch_xla.__version__
    assert found.xla == version.__xla_gitrev__[:12]
    assert [what for what, _ in found.rows()] == ["torch", "torch_xla", "XLA (openxla commit)"]
    assert compat.load_problems() == []  # CI runs 2.9.0 and 2.8.1


def test_what_differs_on_a_supported_release_is_said_once_per_release():
    assert compat.known_differences("2.9.0") == [] and not compat.errors_end_the_process("2.9.0")
    notes = compat.known_differences("2.8.1")
    assert len(notes) == 1 and "ends the process" in notes[0] and compat.errors_end_the_process("2.8.0")
    assert compat.known_differences("2.7.0") == []  # outside the range: unsupported() says so instead
