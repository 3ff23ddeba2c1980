"""The supported torch_xla range, as ``%load_ext xla_lab`` says it in the shared shell (the pure
tests of the check are in tests/unit/test_compat.py)."""

from __future__ import annotations

from xla_lab import compat


def test_load_ext_prints_one_line_for_a_torch_xla_outside_the_range(monkeypatch, capsys):
    import torch_xla
    from IPython.testing.globalipapp import get_ipython

    import xla_lab

    monkeypatch.setattr(torch_xla, "__version__", "2.7.0")
    assert len(compat.load_problems()) == 1
    xla_lab.load_ipython_extension(get_ipython())
    lines = [line for line in capsys.readouterr().err.splitlines() if "outside the range" in line]
    assert lines == [f"xla_lab: {compat.unsupported('2.7.0')}"]
