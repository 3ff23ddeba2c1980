"""The scan_layers what-if: would ``torch_xla.experimental.scan_layers`` cut the compile of a stack of
identical layers? Measured, never guessed: the stack is compiled twice on a private copy (its
parameters copied through the host, as a precompile job's shadow is), once unrolled and once scanned,
forward, backward and the weights' update, and the two compile times are compared. The user's modules, tensors, pending
lazy work and random-number state are untouched: only the copy's tensors are synced
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
        out = [f"scan_layers what-if for {self.expr} ({self.layers} layers, input {tuple(self.input_shape)}), "
               f"forward, backward and the {self.optimizer} update, measured on a copy:",
               f"  unrolled: {self.unrolled_s:.2f} s CompileTime   scanned: {self.scanned_s:.2f} s "
               f"({self.scanned_s / self.unrolled_s:.2f}x)" if self.unrolled_s else "  unrolled: 0 s"]
        if self.predicted_step_s is not None:
            out.append(f"  the step's compile: {self.step_compile_s:.2f} s measured -> about "
                       f"{self.predicted_step_s:.2f} s with the stack scanned")
        out.append("  recommended: wrap the stack in torch_xla.experimental.scan_layers.scan_layers(layers, x)"
                   if self.recommended else
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


def layer_stacks(namespace: dict, cell_files: dict | None = None, limit: int = 8) -> list[dict]:
    """Stacks of identical layers in the notebook's modules: [{"expr", "count", "cls", "spans",
    "largest_param"}], the
    spans being the source lines of the layer's own classes and of its submodules' that are not
    torch's ([{"file", "cell", "first", "last"}]): the lines its kernels are credited to (a model line
    is the innermost frame outside torch). ``cell``: the prompt of the cell that defined a class, from
    ``cell_files`` (file -> prompt); ``file`` is then None."""
    out, seen = [], set()
    for var, value in list(namespace.items()):
        if var.startswith("_") or not isinstance(value, torch.nn.Module) or id(value) in seen:
            continue
        for path, module in value.named_modules():
            if id(module) in seen or not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
                continue
            seen.add(id(module))
            layers = list(module)
            if not _identical(layers):
                continue
            spans = []
            for cls in dict.fromkeys(type(m) for m in layers[0].modules()):
                span = None if _is_torch(cls) else _source_span(cls)
                if span is not None:
                    cell = (cell_files or {}).get(span[0])
                    spans.append({"file": None if cell is not None else span[0], "cell": cell,
                                  "first": span[1], "last": span[2]})
            if not spans and not _is_torch(type(layers[0])):
                continue
            expr = f"{var}.{path}" if path else var
            params = sorted((tuple(p.shape) for p in layers[0].parameters()), key=lambda d: -math.prod(d))
            out.append({"expr": expr, "count": len(layers), "cls": type(layers[0]).__name__, "spans": spans,
                        "largest_param": list(params[0])})
            if len(out) >= limit:
                return out
        seen.add(id(value))
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


def measure(expr: str, layers, input_shape: tuple[int, ...], dtype=torch.float32,
            step_compile_s: float | None = None, optimizer=None) -> WhatIf:
    """Compile ``layers`` (a ModuleList of identical layers) unrolled and scanned on copies, forward,
    backward and the weights' update on an input of ``input_shape``, and compare the compile times.
    The update matters: scanned, each layer's gradient is a slice of one stacked gradient, and the
    optimizer's work on those slices compiles into kernels of their own (on a decoder of 8 blocks the
    scanned step's extra compile was 0.6 s without the update in the what-if and 1.5 s with it, 2.0 s
    in the real step). ``optimizer``: the user's, whose class and settings the copy's update uses
    (AdamW's defaults without one)."""
    import torch_xla
    from torch_xla.experimental.scan_layers import scan_layers

    layers = list(layers) if isinstance(layers, (torch.nn.ModuleList, torch.nn.Sequential, list, tuple)) else []
    if not _identical(layers):
        raise ValueError(f"{expr} is not a stack of {MIN_LAYERS} or more layers of one class with the same "
                         "parameter shapes: scan_layers runs one layer's code with each layer's weights")
    device = next(layers[0].parameters()).device
    if device.type != "xla":
        raise ValueError(f"{expr} is on {device}, not on the XLA device: move the model there first")
    rng = RngState.save()
    notes = []
    try:
        def run(scanned: bool) -> None:
            copy = shadow_copy(torch.nn.ModuleList(layers))
            x = torch.zeros(input_shape, dtype=dtype, device=device, requires_grad=True)
            if scanned:
                out = scan_layers(copy, x)
            else:
                out = x
                for layer in copy:
                    out = layer(out)
            update = _same_optimizer(optimizer, copy.parameters(), notes)
            out.float().sum().backward()
            update.step()
            state = [t for st in update.state.values() for t in st.values() if torch.is_tensor(t)]
            tensors = [x.grad] + list(copy.parameters()) + state
            torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True)  # only the copy's tensors

        start = time.time()
        unrolled = _compile_s(lambda: run(False))
        scanned = _compile_s(lambda: run(True))
        if unrolled == 0.0 or scanned == 0.0:
            notes.append("a variant hit XLA's compile cache (it was measured before in this process): "
                         "its compile time reads 0; restart the kernel to measure again")
        notes.append(f"measured in {time.time() - start:.1f} s")
    finally:
        rng.restore()
    name = type(optimizer).__name__ if optimizer is not None else "AdamW (no optimizer of these layers found)"
    return WhatIf(expr, len(layers), tuple(input_shape), unrolled, scanned, step_compile_s=step_compile_s,
                  optimizer=name, notes=notes)
