"""``%xla fit``: the largest batch or sequence length of a marked step whose compiled peak fits a budget
(``precompile/fit.py``), from compiles the precompile queue runs while the kernel is idle."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab import display
from xla_lab.verbs.table import TABLE, verb


@verb("fit", "the largest batch or sequence length of a marked step whose compiled peak fits the budget "
             "(compiles only); alone, the latest fit",
      usage="[STEP [batch | ARG[DIM] ...] --budget 16GiB|v5e|A100 [--multiple M] [--max N] [--wait]]")
@argument("step", nargs="?", metavar="STEP", help="a step marked with @xla_lab.step")
@argument("dims", nargs="*", metavar="DIM",
          help="what to grow: batch (default), or ARG[DIM] per tensor argument, e.g. ids[1] mask[1]")
@argument("--budget", help="the memory to fit: 16GiB, 512MiB, or a device such as v5e or A100-80GB")
@argument("--multiple", type=int, default=1, metavar="M", help="sizes are multiples of M")
@argument("--max", type=int, default=None, metavar="N", help="the largest size to try")
@argument("--wait", action="store_true", help="compile now and show the answer (default: in the background)")
def fit(shell, session, args):
    from xla_lab.fits import start_fit
    from xla_lab.view.fit_view import FitView, live_widget

    if args.step is None:
        if not session.fits:
            print("xla_lab: no fit yet: %xla fit STEP batch --budget 16GiB")
        else:
            display.show(shell, FitView(session.fits[-1]))
        return
    if args.budget is None:
        raise TABLE["fit"].usage_error("the argument --budget is required")
    queue = session.start_queue(shell.user_ns)
    queue.adopt(shell.user_ns)
    steps = {s.name: s for s in queue.steps()}
    step = steps.get(args.step)
    if step is None:
        value = shell.user_ns.get(args.step)
        if value is None:
            known = ", ".join(steps) or "none (mark one with @xla_lab.step)"
            raise UsageError(f"no marked step named {args.step!r}; marked steps: {known}")
        step = value
    try:
        view = start_fit(step, " ".join(args.dims) or "batch", args.budget, multiple=args.multiple,
                         max_size=args.max, wait=False, namespace=shell.user_ns)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.wait:
        queue.run_pending()
        display.show(shell, view)
    elif display.is_terminal(shell):
        print(view.text() + "\nxla_lab: %xla fit shows the answer once it is there.")
    else:
        from IPython.display import display as show_live

        show_live(live_widget(view.result))
