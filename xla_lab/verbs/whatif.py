"""``%xla whatif scan``: scan_layers' compile measured beside the unrolled stack's
(``precompile/scan_whatif.py``)."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab.verbs.table import TABLE, verb


@verb("whatif", "would scan_layers cut the compile of a stack of identical layers? Both compiled on copies, "
                "side by side", usage="scan LAYERS input=8x32x192")
@argument("kind", choices=("scan",), help="the change to measure")
@argument("layers", metavar="LAYERS", help="the layer stack, as an expression of the notebook: e.g. model.layers")
@argument("input", metavar="input=SHAPE", help="input=8x32x192: the shape of the hidden state the first layer takes")
def whatif(shell, session, args):
    from xla_lab.precompile.scan_whatif import measure, optimizer_of

    usage = TABLE["whatif"].usage_error
    if not args.input.startswith("input="):
        raise usage(f"the input shape is written input=8x32x192, not {args.input!r}")
    try:
        layers = eval(args.layers, shell.user_ns)  # (an expression naming the user's layers)
    except Exception as exc:
        raise UsageError(f"cannot evaluate {args.layers!r}: {type(exc).__name__}: {exc}") from None
    try:
        shape = tuple(int(d) for d in args.input[len("input="):].lower().split("x"))
    except ValueError:
        raise usage(f"cannot read the input shape {args.input!r}: write it as input=8x32x192") from None
    if not shape or any(d < 1 for d in shape):
        raise usage(f"cannot read the input shape {args.input!r}: dimensions are positive integers")
    if session.queue is not None:
        session.queue.wait_for_job()  # never beside a precompile job
    try:
        return measure(args.layers, layers, shape, step_compile_s=_step_compile_s(session, args.layers),
                       optimizer=optimizer_of(layers, shell.user_ns))
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _step_compile_s(session, expr: str) -> float | None:
    """The latest measured compile whose advice named this layer stack."""
    for capture in reversed(session.history):
        for a in capture.advice:
            if a.get("kind") == "scan_layers" and a["evidence"].get("expr") == expr:
                return a["evidence"].get("compile_s")
    return None
