"""``%xla whatif scan``: scan_layers' compile measured beside the unrolled stack's
(``precompile/scan_whatif.py``)."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from xla_lab.verbs.table import TABLE, verb


@verb("whatif", "would scan_layers cut the compile of a stack of identical layers? Both compiled on copies, "
                "side by side, on the inputs the model gave its first layer in the last %%xla step",
      usage="scan LAYERS [input=8x32x192]")
@argument("kind", choices=("scan",), help="the change to measure")
@argument("layers", metavar="LAYERS", help="the layer stack, as an expression of the notebook: e.g. model.layers")
@argument("input", metavar="input=SHAPE", nargs="?", default=None,
          help="input=8x32x192: the hidden state's shape, for a stack no %%xla cell has run yet (its layers "
               "then take the hidden state alone), or another shape than the one recorded")
def whatif(shell, session, args):
    from xla_lab.precompile.layer_call import NotScannable, describe
    from xla_lab.precompile.scan_whatif import measure, optimizer_of

    usage = TABLE["whatif"].usage_error
    shape = _shape(usage, args.input) if args.input is not None else None
    try:
        layers = eval(args.layers, shell.user_ns)  # (an expression naming the user's layers)
    except Exception as exc:
        raise UsageError(f"cannot evaluate {args.layers!r}: {type(exc).__name__}: {exc}") from None
    call, prompt = session.layer_call(layers)
    if call is not None:
        inputs = "its other inputs as the model passed them in the last %%xla step"
        if shape is not None:
            call = call.with_hidden_shape(shape)
    elif shape is not None:
        import torch

        call = describe((torch.empty(shape),), {})
        inputs = "the hidden state alone (input=)"
    else:
        raise UsageError(f"%xla whatif: how the model calls {args.layers} is not known yet: run the step once in "
                         "a %%xla cell (its call of the first layer is recorded), or give input=SHAPE for layers "
                         "that take the hidden state alone")
    if session.queue is not None:
        session.queue.wait_for_job()  # never beside a precompile job
    try:
        return measure(args.layers, layers, call, step_compile_s=_step_compile_s(session, args.layers, prompt),
                       optimizer=optimizer_of(layers, shell.user_ns), inputs=inputs)
    except NotScannable as exc:
        raise UsageError(f"%xla whatif: {exc}") from None


def _shape(usage, text: str) -> tuple[int, ...]:
    if not text.startswith("input="):
        raise usage(f"the input shape is written input=8x32x192, not {text!r}")
    try:
        shape = tuple(int(d) for d in text[len("input="):].lower().split("x"))
    except ValueError:
        raise usage(f"cannot read the input shape {text!r}: write it as input=8x32x192") from None
    if not shape or any(d < 1 for d in shape):
        raise usage(f"cannot read the input shape {text!r}: dimensions are positive integers")
    return shape


def _step_compile_s(session, expr: str, prompt: int | None) -> float | None:
    """The latest measured compile whose advice named this layer stack, else the last compile of the
    cell that ran it (the step that holds the stack)."""
    for capture in reversed(session.history):
        for a in reversed(capture.advice):
            if a.get("kind") == "scan_layers" and a["evidence"].get("expr") == expr:
                return a["evidence"].get("compile_s")
    for capture in reversed(session.history):
        if capture.execution_count == prompt:
            compiled = [s.timings.get("compile_s") for s in capture.steps if s.cache == "miss"]
            compiled = [c for c in compiled if c]
            return compiled[-1] if compiled else None
    return None
