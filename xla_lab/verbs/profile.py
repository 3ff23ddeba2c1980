"""``%xla profile``: profile every ``%%xla`` cell, or export a profiled capture for Perfetto / XProf."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab.verbs.captures import history_entry
from xla_lab.verbs.table import TABLE, verb


@verb("profile", "profile every %%xla cell (as --profile does one), or export a profiled capture for "
                 "Perfetto (DIR/trace.json) and XProf (DIR as a log directory)",
      usage="[on [STEPS | all] | off | export DIR [N]]")
@argument("action", nargs="?", choices=("on", "off", "export"), metavar="ACTION", help="default: say whether profiling is on")
@argument("value", nargs="*", metavar="ARG", help="on: STEPS (a count, or 'all'); export: DIR [N]")
def profile(shell, session, args):
    usage = TABLE["profile"].usage_error
    if args.action is None:
        state = "on (every %%xla cell)" if session.profile_every_cell else "off (use %%xla --profile for one cell)"
        print(f"xla_lab: profiling is {state}.")
    elif args.action in ("on", "off"):
        if len(args.value) > (1 if args.action == "on" else 0):
            raise usage(f"'{args.action}' takes {'at most one STEPS' if args.action == 'on' else 'no arguments'}")
        session.profile_every_cell = args.action == "on"
        if args.value:
            try:
                session.profile_steps = profile_steps(args.value[0])
            except UsageError as exc:
                raise usage(str(exc)) from None
        steps = "every step" if session.profile_steps is None else f"the first {session.profile_steps} steps"
        print(f"xla_lab: profiling {f'every %%xla cell ({steps})' if session.profile_every_cell else 'is off'}.")
    else:
        _export(session, args.value, usage)


def _export(session, words: list[str], usage) -> None:
    from xla_lab.profile.export import export_profile

    if len(words) not in (1, 2):
        raise usage("export takes DIR and optionally a history index N")
    if len(words) == 2:
        try:
            index = int(words[1])
        except ValueError:
            raise usage(f"N is a history index, not {words[1]!r}") from None
        capture = history_entry(session, index)
    else:
        capture = next((c for c in reversed(session.history) if c.profile), None)
    if capture is None or not capture.profile:
        raise UsageError("no profiled capture: run a cell with %%xla --profile first")
    try:
        written = export_profile(capture, words[0], session.raw_profile(capture))
    except OSError as exc:
        raise UsageError(f"cannot write {words[0]}: {exc.strerror or exc}") from None
    for path in written:
        print(f"xla_lab: wrote {path}")


def profile_steps(value: str) -> int | None:
    """``--profile-steps`` / ``%xla profile on STEPS``: a count of steps, or None for all of them."""
    if value.strip().lower() == "all":
        return None
    try:
        steps = int(value)
    except ValueError:
        steps = 0
    if steps < 1:
        raise UsageError(f"--profile-steps takes a number of steps (1 or more) or 'all', not {value!r}")
    return steps
