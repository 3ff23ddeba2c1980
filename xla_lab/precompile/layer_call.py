"""How a model calls a stack of identical layers, and that stack run through ``scan_layers``.

A layer of the models people train takes more than the hidden state: Hugging Face's BERT layer takes the
attention mask and returns a tuple, GPT-2's block takes a cache, the cache position and a causal mask
positionally, Llama's takes the rotary embeddings as a ``(cos, sin)`` pair by keyword. ``scan_layers``
runs a layer that maps one carry to the next, so the layer is wrapped: the hidden state is the carry,
the tensors that are the same for every layer are the wrapper's buffers (scan hands each layer its
slice), values that are not tensors (flags, ``None``) are constants of the wrapper, and the layer's
hidden output is taken from its tuple.

``CallRecording`` watches the stacks' first two layers during a ``%%xla`` cell (forward pre-hooks,
removed when the cell ends; never under torch.compile's tracing, whose graph would then hold them) and
keeps a description of the last call: shapes and dtypes, never the tensors (a kept lazy tensor would
become an output of the user's step). ``LayerCall.inputs`` rebuilds it as device data for a what-if.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

# constants a layer call may hold (anything else, a cache object included, is described by its type)
_CONSTANT = (type(None), bool, int, float, str, torch.dtype)


class NotScannable(ValueError):
    """One line saying why a stack cannot run through scan_layers."""


@dataclass(frozen=True)
class TensorInput:
    shape: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool = False


@dataclass(frozen=True)
class ObjectInput:
    """An argument that is neither a tensor nor a plain value (a KV cache): a training step's layers take
    ``None`` in its place."""
    type_name: str


@dataclass
class LayerCall:
    """The description of one call of a layer: its arguments' tree (``spec``) and leaves, which leaf is
    the hidden state, what the layer returned, and which arguments differed between the stack's first
    two layers in the same step (a stack whose layers take different inputs cannot be scanned)."""
    spec: pytree.TreeSpec
    leaves: list
    names: list[str]
    hidden: int  # the leaf that is the hidden state
    output: str = "unknown"  # "tensor", "tuple" (the hidden state first), or what else it was
    output_shape: tuple[int, ...] | None = None
    differs: list[str] = field(default_factory=list)

    @property
    def hidden_input(self) -> TensorInput:
        return self.leaves[self.hidden]

    @property
    def dropped(self) -> list[str]:
        """Arguments passed as None in a what-if (their objects are a cache, which a training step does
        not read)."""
        return [f"{n} ({leaf.type_name})" for n, leaf in zip(self.names, self.leaves) if isinstance(leaf, ObjectInput)]

    def problem(self, expr: str) -> str | None:
        """Why this call cannot go through scan_layers, in one line, or None."""
        if self.differs:
            return (f"{expr}'s layers take different inputs beside the hidden state ({', '.join(self.differs)} "
                    "differed between its first two layers): scan_layers gives every layer the same")
        if self.output not in ("tensor", "tuple", "unknown"):
            return (f"{expr}[0] returned {self.output}, not the hidden state the next layer takes: scan_layers "
                    "passes one layer's output to the next")
        if self.output_shape is not None and tuple(self.output_shape) != tuple(self.hidden_input.shape):
            return (f"{expr}[0] takes a hidden state of shape {tuple(self.hidden_input.shape)} and returns "
                    f"{tuple(self.output_shape)}: the next layer does not take its output as it is")
        return None

    def shape_text(self) -> str:
        return "x".join(str(d) for d in self.hidden_input.shape)

    def with_hidden_shape(self, shape: tuple[int, ...]) -> "LayerCall":
        """The same call with another hidden state's shape (``input=`` given for a recorded layer)."""
        leaves = list(self.leaves)
        leaves[self.hidden] = dataclasses.replace(leaves[self.hidden], shape=tuple(shape))
        return dataclasses.replace(self, leaves=leaves, output_shape=None)

    def inputs(self, device, generator: torch.Generator | None = None):
        """(args, kwargs) rebuilt as device data (tensors moved from the host, so the compiled graph takes
        them as parameters as it takes the real ones, never as constants XLA could fold); the hidden
        state requires grad, as in a training step; objects become None."""
        built = []
        for i, leaf in enumerate(self.leaves):
            if isinstance(leaf, TensorInput):
                if leaf.dtype.is_floating_point:
                    t = torch.randn(leaf.shape, generator=generator).to(leaf.dtype)
                else:
                    t = torch.zeros(leaf.shape, dtype=leaf.dtype)
                t = t.to(device)
                if i == self.hidden:
                    t.requires_grad_(True)
                built.append(t)
            elif isinstance(leaf, ObjectInput):
                built.append(None)
            else:
                built.append(leaf)
        return pytree.tree_unflatten(built, self.spec)


def _leaf_name(path) -> str:
    """'attention_mask', 'args[1]', 'position_embeddings[0]' from a pytree key path of (args, kwargs)."""
    keys = list(path)
    if not keys:
        return "?"
    head, rest = keys[0], keys[1:]
    if getattr(head, "idx", None) == 1 and rest:  # kwargs
        name, rest = str(getattr(rest[0], "key", rest[0])), rest[1:]
    else:
        name, rest = (f"args[{getattr(rest[0], 'idx', '?')}]", rest[1:]) if rest else ("args", [])
    return name + "".join(f"[{getattr(k, 'idx', getattr(k, 'key', '?'))}]" for k in rest)


def _flatten(args, kwargs):
    pairs, spec = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    return [leaf for _, leaf in pairs], [_leaf_name(path) for path, _ in pairs], spec


def leaves(args, kwargs) -> list:
    """The leaves of a call's arguments, in the order ``LayerCall`` numbers them."""
    return _flatten(args, kwargs)[0]


def with_hidden(args, kwargs, hidden: int, value):
    """(args, kwargs) with leaf ``hidden`` (the hidden state) replaced by ``value``."""
    values, _, spec = _flatten(args, kwargs)
    values[hidden] = value
    return pytree.tree_unflatten(values, spec)


def _describe_leaf(value):
    if isinstance(value, torch.Tensor):
        return TensorInput(tuple(value.shape), value.dtype, value.requires_grad)
    if isinstance(value, _CONSTANT):
        return value
    return ObjectInput(type(value).__name__)


def describe(args, kwargs) -> LayerCall:
    """The description of a layer call; its hidden state is the first tensor argument (``hidden_states``
    by keyword when it is passed so)."""
    values, names, spec = _flatten(args, kwargs)
    tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if not tensors:
        raise NotScannable("the layer was called with no tensor: there is no hidden state to carry")
    hidden = next((i for i in tensors if names[i] == "hidden_states"), tensors[0])
    if names[hidden].startswith("args") and hidden != tensors[0]:
        hidden = tensors[0]
    return LayerCall(spec, [_describe_leaf(v) for v in values], names, hidden)


def hidden_of(output):
    """The hidden state in a layer's output: the output itself, or the first element of its tuple (a
    ModelOutput is a tuple too); None when it is neither."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


class CallRecording:
    """Forward pre-hooks on the first two layers of each stack (``stacks``: expr -> module list) for the
    length of one cell: the last call of each stack's first layer, described, with the arguments that
    differed at its second layer."""

    def __init__(self, stacks: dict[str, torch.nn.Module]):
        self.calls: dict[str, LayerCall] = {}
        self._handles = []
        self._first_values: dict[str, list] = {}  # (held only between the two layers' calls of one step)
        for expr, layers in stacks.items():
            first, second = layers[0], layers[1]
            self._handles.append(first.register_forward_pre_hook(self._before(expr, 0), with_kwargs=True))
            self._handles.append(first.register_forward_hook(self._after(expr)))
            self._handles.append(second.register_forward_pre_hook(self._before(expr, 1), with_kwargs=True))

    def _before(self, expr: str, position: int):
        def hook(module, args, kwargs):
            if torch.compiler.is_compiling():
                return None
            try:
                values, names, spec = _flatten(args, kwargs)
                if position == 0:
                    self.calls[expr] = describe(args, kwargs)
                    self._first_values[expr] = values
                    return None
                first, call = self._first_values.pop(expr, None), self.calls.get(expr)
                if first is None or call is None:
                    return None
                if spec != call.spec:
                    call.differs = ["the arguments' structure"]
                    return None
                call.differs = [names[i] for i, (a, b) in enumerate(zip(first, values))
                                if i != call.hidden and not _same(a, b)]
            except Exception:  # a recording is never worth the user's forward
                self._first_values.pop(expr, None)
            return None
        return hook

    def _after(self, expr: str):
        def hook(module, args, output):
            if torch.compiler.is_compiling():
                return None
            call = self.calls.get(expr)
            if call is not None:
                hidden = hidden_of(output)
                call.output = ("tensor" if isinstance(output, torch.Tensor) else "tuple" if hidden is not None
                               else f"a {type(output).__name__}")
                call.output_shape = tuple(hidden.shape) if hidden is not None else None
            return None
        return hook

    def finish(self) -> dict[str, LayerCall]:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._first_values.clear()
        return self.calls


def _same(a, b) -> bool:
    """The same input for two layers: the same tensor object, or equal constants (None for both)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    if isinstance(a, _CONSTANT) and isinstance(b, _CONSTANT):
        return type(a) is type(b) and a == b
    return type(a) is type(b)


class _Carried(torch.nn.Module):
    """One layer of a scanned stack, hidden -> hidden: its other tensor inputs are buffers of this
    wrapper (scan_layers stacks a layer's buffers and hands each iteration its slice, the same tensor
    for every layer; in the carry they would be made to require grad, and an integer one cannot),
    its constants are the call's."""

    def __init__(self, layer: torch.nn.Module, call: "_CallShape", tensors: list[torch.Tensor]):
        super().__init__()
        self.layer = layer
        self.call = call
        for k, t in enumerate(tensors):
            self.register_buffer(f"input_{k}", t, persistent=False)

    def forward(self, hidden):
        carried = [getattr(self, f"input_{k}") for k in range(len(self.call.tensor_slots))]
        args, kwargs = self.call.assemble(hidden, carried)
        with _FloatMaskDropout():
            output = self.layer(*args, **kwargs)
        new = hidden_of(output)
        if new is None:
            raise NotScannable(f"the layer returned a {type(output).__name__}, not the hidden state the next "
                               "layer takes")
        self.call.output_tuple = not isinstance(output, torch.Tensor)
        return new


class _FloatMaskDropout(torch.overrides.TorchFunctionMode):
    """Dropout with a float mask inside a scanned layer. torch_xla 2.9's scan cannot hold the mask of
    ``native_dropout`` between forward and backward (its IR lowers the mask as f32 while the tensor says
    bool, and scan's buffer for it is made bool: "Dynamic update slice update element type does not
    match ... PRED vs F32", on any layer with dropout in training). The same dropout written as
    ``x * (rand >= p) / (1 - p)`` saves a float mask; scaled_dot_product_attention with dropout is written
    out the same way."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        F = torch.nn.functional
        if func is F.dropout:
            return _dropout(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return _attention(*args, **kwargs)
        return func(*args, **kwargs)


def _dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return input
    keep = (torch.rand_like(input) >= p).to(input.dtype)
    return input * keep / (1.0 - p)


def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p == 0.0:
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, dim=-3), value.repeat_interleave(repeat, dim=-3)
    scores = query @ key.transpose(-2, -1) * (scale if scale is not None else query.shape[-1] ** -0.5)
    if is_causal:
        n, m = query.shape[-2], key.shape[-2]
        causal = torch.ones(n, m, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return _dropout(scores.softmax(dim=-1), dropout_p) @ value


class _CallShape:
    """The constants of a call and where its tensors go; shared by a stack's wrappers (scan_layers
    deep-copies its first layer: this is not copied)."""

    def __init__(self, values: list, spec, hidden: int):
        self.spec = spec
        self.hidden = hidden
        self.tensor_slots = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and i != hidden]
        self.constants = [None if isinstance(v, torch.Tensor) or not isinstance(v, _CONSTANT) else v for v in values]
        self.output_tuple = True

    def __deepcopy__(self, memo):
        return self

    def assemble(self, hidden, carried):
        values = list(self.constants)
        values[self.hidden] = hidden
        for slot, t in zip(self.tensor_slots, carried):
            values[slot] = t
        return pytree.tree_unflatten(values, self.spec)


def scanned(layers, args, kwargs):
    """``layers`` (identical) run through ``torch_xla.experimental.scan_layers`` on the call
    ``layers[0](*args, **kwargs)``: the hidden state in the carry, the other tensor inputs the same for
    every layer, objects (a cache) passed as None. Returns the last layer's output as a layer returns
    it (``(hidden,)`` for a layer that returns a tuple)."""
    from torch_xla.experimental.scan_layers import scan_layers

    values, names, spec = _flatten(args, kwargs)
    call = describe(args, kwargs)
    shape = _CallShape(values, spec, call.hidden)
    tensors = [values[i] for i in shape.tensor_slots]
    wrappers = [_Carried(layer, shape, tensors) for layer in layers]
    out = scan_layers(wrappers, values[call.hidden])
    return (out,) if shape.output_tuple else out


class ScannedStack(torch.nn.Module):
    """A drop-in for a stack of identical layers that a model loops over (``for layer in self.layers``):
    one module that runs them all through ``scan_layers``. ``model.bert.encoder.layer =
    ScannedStack(model.bert.encoder.layer)`` gives the model a scanned stack with the same weights (the
    same parameter objects); its state dict keys gain ``.layers``."""

    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def __iter__(self):
        return iter([self])

    def __len__(self):
        return 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self][index]
        return [self][index]

    def forward(self, *args, **kwargs):
        return scanned(self.layers, args, kwargs)
