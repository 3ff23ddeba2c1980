"""``%xla queue``: what the precompile queue is doing, and steering it."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab import display
from xla_lab.verbs.table import TABLE, verb

ACTIONS = ("status", "pause", "resume", "clear", "run", "add")
_STEERING = {"status", "pause", "resume", "clear"}  # only read or steer the queue: need not wait for its job


@verb("queue", "the precompile queue: its jobs (live), pause, resume, clear, run the pending jobs now, or add a "
               "variant of a marked step",
      reads_only=lambda args: args.action in _STEERING,
      usage="[status | pause | resume | clear | run | add STEP ARG=8x128 ...]")
@argument("action", nargs="?", choices=ACTIONS, metavar="ACTION", default="status", help="what to do (default: status)")
@argument("shapes", nargs="*", metavar="ARG", help="add: STEP, then ARG=8x128 per tensor argument (a scalar is ARG=)")
def queue(shell, session, args):
    from xla_lab.view import queue_view

    q = session.start_queue(shell.user_ns)
    if args.shapes and args.action != "add":
        raise TABLE["queue"].usage_error(f"'{args.action}' takes no arguments")
    if args.action == "pause":
        q.pause()
        print("xla_lab: precompile queue paused (jobs in the queue wait for %xla queue resume).")
    elif args.action == "resume":
        q.resume()
        print("xla_lab: precompile queue resumed.")
    elif args.action == "clear":
        print(f"xla_lab: dropped {q.clear()} pending precompile jobs.")
    elif args.action == "run":
        # What a pause to read and think gives the queue, on demand (and deterministic in
        # notebooks run top to bottom, where cells follow each other with no idle time).
        q.plan()
        q.run_pending()
        display.show(shell, queue_view.QueueView(q))
    elif args.action == "add":
        try:
            q.add_variant(*parse_variant(q, args.shapes))
        except ValueError as exc:  # the step has not run, or has no such argument
            raise UsageError(str(exc)) from None
        display.show(shell, queue_view.QueueView(q))
    elif display.is_terminal(shell):
        display.show(shell, queue_view.QueueView(q))
    else:
        from IPython.display import display as show_live

        show_live(queue_view.live_widget(q))


def parse_variant(queue, words: list[str]):
    """``STEP x=8x128 y=8x128`` -> (step, {"x": (8, 128), "y": (8, 128)})."""
    usage = TABLE["queue"].usage_error
    if not words:
        raise usage("add needs a marked step and its shapes: %xla queue add STEP ARG=8x128 [ARG=...]")
    steps = {s.name: s for s in queue.steps()}
    if words[0] not in steps:
        known = ", ".join(steps) or "none (mark one with @xla_lab.step)"
        raise UsageError(f"no marked step named {words[0]!r}; marked steps: {known}")
    shapes = {}
    for word in words[1:]:
        name, sep, shape = word.partition("=")
        try:
            if not sep:
                raise ValueError
            dims = tuple(int(d) for d in shape.lower().split("x")) if shape else ()
        except ValueError:
            raise usage(f"cannot read {word!r}: write ARG=8x128 (a scalar is ARG=)") from None
        if any(d < 1 for d in dims):
            raise usage(f"cannot read {word!r}: a dimension is a positive integer")
        shapes[name] = dims
    if not shapes:
        raise usage("give at least one ARG=shape, e.g. x=8x256")
    return steps[words[0]], shapes
