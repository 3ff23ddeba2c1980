"""What a precompile job's step prints goes to the job's record, not to the user's screen.

The job runs in a background thread while the kernel is idle, so it must not swap the process-wide
``sys.stdout`` / ``sys.stderr``: the terminal's prompt swaps them too (prompt_toolkit's
``patch_stdout``), and Jupyter sets the parent message of the next cell on whatever ``sys.stdout``
is when the request arrives. A swap from the job then restores a stale stream (terminal IPython went
silent for the rest of the session) or leaves the kernel's stream with the previous cell's parent
(output under the wrong cell). So nothing shared is touched: the job calls a copy of the step
function whose ``print`` writes to the job's buffer. That covers what the step's own code (and the
functions it defines) prints; code elsewhere that prints (a model's ``forward`` in a ``.py`` module)
writes where the kernel sends a background thread's output.
"""

from __future__ import annotations

import builtins
import functools
import io
import sys
import types
from typing import Callable


def _print_to(sink: io.StringIO, *values, file=None, **options) -> None:
    if file is None or file is sys.stdout or file is sys.stderr:
        file = sink
    builtins.print(*values, file=file, **options)


def with_private_print(fn: Callable, sink: io.StringIO) -> Callable:
    """``fn`` with ``print`` (to stdout or stderr) writing to ``sink``; ``fn`` itself if it is not a
    plain Python function (a callable object, a builtin), which then prints as it would."""
    if not isinstance(fn, types.FunctionType):
        return fn
    own_builtins = dict(vars(builtins))
    own_builtins["print"] = functools.partial(_print_to, sink)
    own_globals = dict(fn.__globals__)  # read-only for a step that follows the rule (it writes no globals)
    own_globals["__builtins__"] = own_builtins
    copy = types.FunctionType(fn.__code__, own_globals, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__dict__.update(fn.__dict__)
    return copy
