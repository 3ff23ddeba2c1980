"""``%xla VERB [ARGS]``: the verbs, one table (``table.py``), each with its own parser; ``run`` is the
line magic's dispatch and ``reads_only`` tells the foreground gate (``hooks.py``) which lines need not
wait for a precompile job."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab import session as session_mod
from xla_lab.verbs import captures, fit, profile, queue, whatif  # noqa: F401  (each registers its verbs)
from xla_lab.verbs.table import TABLE, split, summary_table, verb


@verb("help", "every verb, or one verb's usage and arguments", reads_only=True)
@argument("verb", nargs="?", metavar="VERB", help="a verb of %%xla")
def help_(shell, session, args):
    if args.verb is None:
        print("%xla VERB [ARGS]  (%xla alone: status)\n" + summary_table())
        return
    if args.verb not in TABLE:
        raise TABLE["help"].usage_error(f"no verb {args.verb!r}; verbs: {', '.join(TABLE)}")
    v = TABLE[args.verb]
    print(f"{v.summary}\n\n{v.help()}")


def run(shell, line: str):
    """``%xla LINE``: the verb's value (what the magic returns)."""
    v, rest = split(line)
    args = v.parse(rest)
    session = session_mod.get()
    session.settle()  # (every verb reads complete captures)
    return v.run(shell, session, args)


def reads_only(line: str) -> bool:
    """Does ``%xla LINE`` only read or steer xla_lab's own state (no wait for a precompile job)? A line
    that does not parse is not: it waits, then fails with its usage."""
    try:
        v, rest = split(line)
        return v.reads_only(v.parse(rest))
    except UsageError:
        return False


__all__ = ["TABLE", "reads_only", "run", "summary_table"]
