"""The %%xla magic documents its options (the magics at work are in tests/kernel/test_magics.py)."""

from xla_lab.magics import XlaMagics


def test_cell_magic_documents_its_options():
    doc = XlaMagics.xla.__doc__
    for option in ("--no-sync", "--quiet", "--name", "status", "history", "show"):
        assert option in doc
