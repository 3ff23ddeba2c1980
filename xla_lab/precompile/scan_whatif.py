"""The scan_layers what-if: would ``torch_xla.experimental.scan_layers`` cut the compile of a stack of
identical layers? Measured, never guessed: the stack is compiled twice on a private copy (its
parameters copied through the host, as a precompile job's shadow is), once unrolled and once scanned
(``layer_call.scanned``), forward, backward and the weights' update, on the inputs the model gave its
first layer in the last ``%%xla`` step (``layer_call.CallRecording``: the attention mask, positions,
rotary embeddings, flags), rebuilt as device data of the same shapes. The user's modules, tensors,
pending lazy work and random-number state are untouched: only the copy's tensors are synced
(``_xla_sync_multi``), and the random state is restored afterwards.

``layer_stacks`` finds the candidates in a namespace: ``nn.ModuleList`` / ``nn.Sequential`` children of
the notebook's modules holding two or more layers of one class with the same parameter shapes (what
``scan_layers`` needs: one layer's code run with each layer's weights).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field

import torch

from .layer_call import LayerCall, NotScannable, hidden_of, leaves, scanned, with_hidden
from .shadow import RngState, shadow_copy

MIN_LAYERS = 2


@dataclass
class WhatIf:
    expr: str
    layers: int
    input_shape: tuple[int, ...]
    unrolled_s: float  # CompileTime of the unrolled stack (forward, backward, the weights' update)
    scanned_s: float  # the same stack through scan_layers
    step_compile_s: float | None = None  # the step's measured compile that holds the stack, if known
    optimizer: str = "AdamW"  # the update compiled with the stack (the user's optimizer class)
    inputs: str = ""  # where the layer's inputs came from (the recorded call, or input=)
    notes: list[str] = field(default_factory=list)

    @property
    def predicted_step_s(self) -> float | None:
        """The step's compile with the stack scanned: its measured compile, less the unrolled stack's,
        plus the scanned stack's."""
        if self.step_compile_s is None:
            return None
        return max(self.step_compile_s - self.unrolled_s + self.scanned_s, 0.0)

    @property
    def recommended(self) -> bool:
        return self.scanned_s < 0.9 * self.unrolled_s

    def text(self) -> str:
        out = [f"scan_layers what-if for {self.expr} ({self.layers} layers, hidden state {tuple(self.input_shape)}"
               f"{', ' + self.inputs if self.inputs else ''}), forward, backward and the {self.optimizer} update, "
               "measured on a copy:",
               f"  unrolled: {self.unrolled_s:.2f} s CompileTime   scanned: {self.scanned_s:.2f} s "
               f"({self.scanned_s / self.unrolled_s:.2f}x)" if self.unrolled_s else "  unrolled: 0 s"]
        if self.predicted_step_s is not None:
            out.append(f"  the step's compile: {self.step_compile_s:.2f} s measured -> about "
                       f"{self.predicted_step_s:.2f} s with the stack scanned")
        out.append(f"  recommended: {self.expr} = xla_lab.ScannedStack({self.expr}) runs it through "
                   "torch_xla.experimental.scan_layers as measured here" if self.recommended else
                   "  not recommended: scanning does not cut this stack's compile by 10% or more")
        out.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        import html

        return {"text/plain": self.text(), "text/html": f"<pre>{html.escape(self.text())}</pre>"}


def _source_span(cls) -> tuple[str, int, int] | None:
    """The file and line span of the class's own methods (from their code objects: a class written in
    a notebook cell has no source file ``inspect`` can find, its methods' code still names the cell's)."""
    spans = []
    for value in vars(cls).values():
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is None:
            continue
        lines = [line for _, _, line in code.co_lines() if line is not None]
        spans.append((code.co_filename, code.co_firstlineno, max(lines, default=code.co_firstlineno)))
    if not spans:
        return None
    file = spans[0][0]
    mine = [sp for sp in spans if sp[0] == file]
    return file, min(sp[1] for sp in mine), max(sp[2] for sp in mine)


def _identical(layers: list[torch.nn.Module]) -> bool:
    if len(layers) < MIN_LAYERS or len({type(m) for m in layers}) != 1:
        return False
    shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in layers]
    return bool(shapes[0]) and all(s == shapes[0] for s in shapes[1:])


def _is_torch(cls) -> bool:
    return cls.__module__.split(".")[0] in ("torch", "torch_xla")


def stack_modules(namespace: dict, limit: int = 8) -> list[tuple[str, torch.nn.Module]]:
    """(expr, module list) for each stack of identical layers in the notebook's modules, named as the
    notebook reaches it (``model.bert.encoder.layer``)."""
    out, seen = [], set()
    for var, value in list(namespace.items()):
        if var.startswith("_") or not isinstance(value, torch.nn.Module) or id(value) in seen:
            continue
        for path, module in value.named_modules():
            if id(module) in seen or not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            seen.add(id(module))
            if _identical(list(module)):
                out.append((f"{var}.{path}" if path else var, module))
                if len(out) >= limit:
                    return out
        seen.add(id(value))
    return out


def layer_stacks(namespace: dict, cell_files: dict | None = None, limit: int = 8) -> list[dict]:
    """Stacks of identical layers in the notebook's modules: [{"expr", "count", "cls", "spans",
    "largest_param"}], the
    spans being the source lines of the layer's own classes and of its submodules' that are not
    torch's ([{"file", "cell", "first", "last"}]): the lines its kernels are credited to (a model line
    is the innermost frame outside torch). ``cell``: the prompt of the cell that defined a class, from
    ``cell_files`` (file -> prompt); ``file`` is then None."""
    out = []
    for expr, module in stack_modules(namespace, limit):
        layers = list(module)
        spans = []
        for cls in dict.fromkeys(type(m) for m in layers[0].modules()):
            span = None if _is_torch(cls) else _source_span(cls)
            if span is not None:
                cell = (cell_files or {}).get(span[0])
                spans.append({"file": None if cell is not None else span[0], "cell": cell,
                              "first": span[1], "last": span[2]})
        if not spans and not _is_torch(type(layers[0])):
            continue
        params = sorted((tuple(p.shape) for p in layers[0].parameters()), key=lambda d: -math.prod(d))
        out.append({"expr": expr, "count": len(layers), "cls": type(layers[0]).__name__, "spans": spans,
                    "largest_param": list(params[0])})
    return out


def differing_settings(layers: list[torch.nn.Module]) -> list[str]:
    """Plain settings (numbers, flags, strings) of the layers' submodules that differ between layers:
    scan_layers runs the first layer's code for all, so a layer with another setting (a sliding window
    on some layers only) would compute something else. A setting that numbers the layers 0, 1, 2, ...
    (``layer_idx``, which Hugging Face's layers keep for their cache) is their name, not their code."""
    def settings(layer):
        return {f"{path}.{k}".lstrip("."): v for path, m in layer.named_modules() for k, v in vars(m).items()
                if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str, type(None)))}

    per_layer = [settings(layer) for layer in layers]
    out = []
    for key in per_layer[0]:
        values = [s.get(key, "(missing)") for s in per_layer]
        if len(set(map(repr, values))) == 1:
            continue
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values) and \
                values == list(range(values[0], values[0] + len(values))):
            continue
        out.append(key)
    return out


def _same_optimizer(optimizer, params, notes: list[str]):
    """An optimizer of ``optimizer``'s class and settings over ``params`` (its defaults, as far as its
    constructor takes them: AdamW's carry Adam's ``decoupled_weight_decay``); AdamW without one, or
    when the class cannot be built so (said in ``notes``)."""
    if optimizer is not None:
        kind = type(optimizer)
        takes = inspect.signature(kind.__init__).parameters
        settings = {k: v for k, v in optimizer.defaults.items() if k in takes}
        try:
            return kind(params, **settings)
        except Exception as exc:
            note = f"the update uses AdamW: {kind.__name__} could not be built with its settings ({exc})"
            if note not in notes:
                notes.append(note)
    return torch.optim.AdamW(params)


def _compile_s(run) -> float:
    import torch_xla.debug.metrics as met

    before = (met.metric_data("CompileTime") or (0, 0.0))[1]
    run()
    return ((met.metric_data("CompileTime") or (0, 0.0))[1] - before) / 1e9


def optimizer_of(layers, namespace: dict):
    """The notebook's optimizer that updates these layers' weights, if any."""
    if not isinstance(layers, (torch.nn.ModuleList, torch.nn.Sequential)) or not len(layers):
        return None
    first = next(iter(layers[0].parameters()), None)
    for value in list(namespace.values()):
        if isinstance(value, torch.optim.Optimizer) and any(
                p is first for group in value.param_groups for p in group["params"]):
            return value
    return None


def measure(expr: str, layers, call: LayerCall, step_compile_s: float | None = None, optimizer=None,
            inputs: str = "") -> WhatIf:
    """Compile ``layers`` (a ModuleList of identical layers) unrolled and scanned on copies, forward,
    backward and the weights' update, each layer called as ``call`` describes (the hidden state from
    the one before), and compare the compile times. The update matters: scanned, each layer's gradient
    is a slice of one stacked gradient, and the optimizer's work on those slices compiles into kernels
    of their own (on a decoder of 8 blocks the scanned step's extra compile was 0.6 s without the update
    in the what-if and 1.5 s with it, 2.0 s in the real step). ``optimizer``: the user's, whose class and
    settings the copy's update uses (AdamW's defaults without one). A stack that cannot be scanned
    raises ``NotScannable`` with one line."""
    import torch_xla
    import torch_xla.debug.metrics as met

    layers = list(layers) if isinstance(layers, (torch.nn.ModuleList, torch.nn.Sequential, list, tuple)) else []
    if not _identical(layers):
        raise NotScannable(f"{expr} is not a stack of {MIN_LAYERS} or more layers of one class with the same "
                           "parameter shapes: scan_layers runs one layer's code with each layer's weights")
    differ = differing_settings(layers)
    if differ:
        raise NotScannable(f"{expr}'s layers differ in {', '.join(differ[:3])}: scan_layers runs the first layer's "
                           "code with every layer's weights, so the others would compute something else")
    device = next(layers[0].parameters()).device
    if device.type != "xla":
        raise NotScannable(f"{expr} is on {device}, not on the XLA device: move the model there first")
    problem = call.problem(expr)
    if problem:
        raise NotScannable(problem)
    rng = RngState.save()
    notes = []
    if call.dropped:
        notes.append(f"{', '.join(call.dropped)} passed as None: a training step's layers do not read a cache")
    try:
        def run(scan: bool) -> None:
            copy = shadow_copy(torch.nn.ModuleList(layers))
            args, kwargs = call.inputs(device, torch.Generator().manual_seed(0))
            hidden = call.hidden
            x = leaves(args, kwargs)[hidden]
            executions = (met.metric_data("ExecuteTime") or (0,))[0]
            try:
                if scan:
                    out = hidden_of(scanned(copy, args, kwargs))
                else:
                    out = x
                    for layer in copy:
                        layer_args, layer_kwargs = with_hidden(args, kwargs, hidden, out)
                        output = layer(*layer_args, **layer_kwargs)
                        out = hidden_of(output)
                        if out is None or out.shape != x.shape:
                            raise NotScannable(f"{expr}[0] returned {_what(output)} for a hidden state of shape "
                                               f"{tuple(x.shape)}: scan_layers passes one layer's output to the next")
            except NotScannable:
                raise
            except Exception as exc:
                how = "through scan_layers" if scan else f"with {inputs or 'the inputs the model gave it'}"
                raise NotScannable(f"{expr}[0] failed when run {how}: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
            if (met.metric_data("ExecuteTime") or (0,))[0] != executions:
                raise NotScannable(f"{expr}[0] reads a tensor's value while it runs (a graph ran in its forward): "
                                   "scan_layers traces one layer once for all, without values")
            update = _same_optimizer(optimizer, copy.parameters(), notes)
            # a loss whose gradient depends on the output, as a real loss's does (the gradient of a sum
            # is a constant XLA folds into the backward pass)
            out.float().pow(2).mean().backward()
            update.step()
            state = [t for st in update.state.values() for t in st.values() if torch.is_tensor(t)]
            tensors = [x.grad] + list(copy.parameters()) + state
            torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True)  # only the copy's tensors

        start = time.time()
        unrolled = _compile_s(lambda: run(False))
        scanned_s = _compile_s(lambda: run(True))
        if unrolled == 0.0 or scanned_s == 0.0:
            notes.append("a variant hit XLA's compile cache (it was measured before in this process): "
                         "its compile time reads 0; restart the kernel to measure again")
        notes.append(f"measured in {time.time() - start:.1f} s")
    finally:
        rng.restore()
    name = type(optimizer).__name__ if optimizer is not None else "AdamW (no optimizer of these layers found)"
    return WhatIf(expr, len(layers), tuple(call.hidden_input.shape), unrolled, scanned_s,
                  step_compile_s=step_compile_s, optimizer=name, inputs=inputs, notes=notes)


def _what(output) -> str:
    hidden = hidden_of(output)
    return f"shape {tuple(hidden.shape)}" if hidden is not None else f"a {type(output).__name__}"
