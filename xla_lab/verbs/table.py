"""The table of ``%xla`` verbs. A verb is a function ``run(shell, session, args)`` given its own
``magic_arguments`` parser (``@argument`` lines under ``@verb``): its usage, its help (``%xla help
VERB``) and its argument checks come from that parser, so a bad argument is one ``UsageError`` line
naming the verb's usage, whichever verb it is."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from IPython.core.error import UsageError
from IPython.core.magic_arguments import magic_arguments


@dataclass(frozen=True)
class Verb:
    name: str
    run: Callable  # run(shell, session, args) -> the value the magic returns
    summary: str  # one line, for %xla? and %xla help
    reads_only: Callable[[argparse.Namespace], bool]  # True: it need not wait for a precompile job

    @property
    def parser(self) -> argparse.ArgumentParser:
        return self.run.parser

    def usage(self) -> str:
        """``%xla queue [ACTION] [ARG ...]``: the parser's usage on one line."""
        return one_line_usage(self.parser)

    def help(self) -> str:
        """``usage: %xla VERB ...`` on one line, then the parser's arguments."""
        parts = self.parser.format_help().removeprefix("::\n\n").split("\n\n", 1)  # (usage, arguments)
        return f"usage: {self.usage()}\n" + (f"\n{parts[1].rstrip()}\n" if len(parts) > 1 else "")

    def parse(self, words: str) -> argparse.Namespace:
        try:
            return self.parser.parse_argstring(words)
        except UsageError as exc:
            raise self.usage_error(str(exc)) from None

    def usage_error(self, message: str) -> UsageError:
        """One line: what was wrong, then the verb's usage."""
        return UsageError(f"%xla {self.name}: {message.rstrip('.')}; usage: {self.usage()}")


TABLE: dict[str, Verb] = {}


def one_line_usage(parser: argparse.ArgumentParser) -> str:
    """A magic_arguments parser's usage on one line, without IPython's reStructuredText marker."""
    words = parser.format_usage().split()
    return " ".join(words[1:] if words[:1] in (["usage:"], ["::"]) else words)


def verb(name: str, summary: str, reads_only: bool | Callable[[argparse.Namespace], bool] = False,
         usage: str | None = None):
    """Register the decorated function as the verb ``name``, its parser made from the ``@argument``
    decorators below this one; ``usage``: what follows ``%xla NAME`` in its usage, where the parser's
    own would not read well (subcommands)."""
    def register(fn: Callable) -> Callable:
        fn = magic_arguments(name=f"xla {name}")(fn)
        if usage is not None:
            fn.parser.usage = f"%(prog)s {usage}"
        check = reads_only if callable(reads_only) else (lambda args, answer=bool(reads_only): answer)
        TABLE[name] = Verb(name, fn, summary, check)
        return fn

    return register


def find(name: str) -> Verb:
    if name not in TABLE:
        raise UsageError(f"unknown %xla verb {name!r}; use one of: {', '.join(TABLE)} (%xla help VERB)")
    return TABLE[name]


def split(line: str) -> tuple[Verb, str]:
    """``"queue add step x=8x128"`` -> (the queue verb, ``"add step x=8x128"``); nothing is ``status``."""
    name, _, rest = line.strip().partition(" ")
    return find(name or "status"), rest.strip()


def summary_table() -> str:
    """Every verb with its usage and one line of what it does (``%xla?``, ``%xla help``)."""
    lines = []
    for v in TABLE.values():
        lines.append(f"  {v.usage()}")
        lines.append(f"      {v.summary}")
    return "\n".join(lines)
