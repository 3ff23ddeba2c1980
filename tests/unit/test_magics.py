"""The %%xla magic documents its options and every %xla verb; each verb has its own parser, usage and help
(the magics at work are in tests/kernel/test_magics.py)."""

import pytest
from IPython.core.error import UsageError

from xla_lab import verbs
from xla_lab.magics import XlaMagics

# A bad argument for every verb of the table: a verb added without one fails here.
BAD = {"status": "status now", "history": "history 3", "show": "show last", "clear": "clear all",
       "report": "report", "save": "save maybe", "mode": "mode medium", "fit": "fit step --bogus",
       "profile": "profile sideways", "queue": "queue frob", "whatif": "whatif unroll layers input=2",
       "help": "help a b"}


def test_cell_magic_documents_its_options_and_every_verb():
    doc = XlaMagics.xla.__doc__
    for option in ("--no-sync", "--quiet", "--name", "--profile", "--save"):
        assert option in doc
    for v in verbs.TABLE.values():
        assert v.usage() in doc and v.summary in doc


def test_every_verb_has_a_parser_with_usage_and_help():
    assert set(verbs.TABLE) == set(BAD)
    for name, v in verbs.TABLE.items():
        assert v.usage().startswith(f"%xla {name}") and "\n" not in v.usage()
        assert v.help().startswith(f"%xla {name}") or v.help().startswith(f"usage: %xla {name}"), v.help()


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_argument_is_one_line_naming_the_usage(name):
    """(Parsing happens before any verb runs: no session, no kernel.)"""
    v, rest = verbs.table.split(BAD[name])
    with pytest.raises(UsageError) as info:
        v.parse(rest)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"%xla {name}: ") and f"usage: {v.usage()}" in message


def test_an_unknown_verb_names_the_verbs():
    with pytest.raises(UsageError, match="unknown %xla verb 'frob'; use one of: status, history"):
        verbs.table.split("frob now")


def test_which_lines_need_not_wait_for_a_precompile_job():
    assert verbs.reads_only("") and verbs.reads_only("status") and verbs.reads_only("show 2")
    assert verbs.reads_only("queue") and verbs.reads_only("queue pause") and verbs.reads_only("help queue")
    assert not verbs.reads_only("queue run") and not verbs.reads_only("queue add step x=2")
    assert not verbs.reads_only("fit step --budget 1GiB") and not verbs.reads_only("clear")
    assert not verbs.reads_only("show nonsense")  # (waits, then fails with its usage)
