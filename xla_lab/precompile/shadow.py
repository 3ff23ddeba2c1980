"""Shadow copies of a step's state, so a precompile job never touches the user's objects.

XLA's compile cache is keyed by the graph's hash, and the hash of a live sync covers the pending
tensors in tensor-id order and the order of the graph's parameters. A shadow therefore clones every
device tensor the step can reach (module parameters and buffers, optimizer state, tensor arguments)
in ascending ``_xla_get_tensor_id`` order, which keeps their relative order, and hands those clones
to ``copy.deepcopy`` as its memo so modules and optimizers are rebuilt around them. Inputs whose
shape the variant changes are new zero tensors made last, as a fresh batch is in the user's loop.

Clones go through the host (``.cpu()`` then ``.to(device)``): that makes device data directly,
where a device-side ``clone()`` would be a pending graph of its own.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from xla_lab.capture.recovery import is_xla_tensor  # (the queue never copies a lost value)


def reachable_tensors(values: list[Any]) -> list[torch.Tensor]:
    """Every XLA tensor a step can reach through its arguments: module parameters and buffers,
    optimizer state, tensors in lists/tuples/dicts. Distinct objects, in no particular order.
    (A loop over a stack, not a recursive closure: a closure that calls itself is a reference cycle,
    which held every tensor it saw until Python's cyclic collector ran. A step's results outlived the
    user's last reference that way, and so became outputs of the step's graph.)"""
    seen: dict[int, torch.Tensor] = {}
    stack = [(v, 0) for v in values]
    while stack:
        v, depth = stack.pop()
        if depth > 6:
            continue
        if is_xla_tensor(v):
            seen.setdefault(id(v), v)
        elif isinstance(v, torch.nn.Module):
            stack += [(t, depth + 1) for t in list(v.parameters()) + list(v.buffers())]
        elif isinstance(v, torch.optim.Optimizer):
            stack += [(p, depth + 1) for group in v.param_groups for p in group["params"]]
            stack += [(state, depth + 1) for state in v.state.values()]
        elif isinstance(v, dict):
            stack += [(x, depth + 1) for x in v.values()]
        elif isinstance(v, (list, tuple)):
            stack += [(x, depth + 1) for x in v]
    return list(seen.values())


def tensor_id(t: torch.Tensor) -> int:
    import torch_xla

    return torch_xla._XLAC._xla_get_tensor_id(t)


def _clone(t: torch.Tensor) -> torch.Tensor:
    """Device data with the same values (through the host, so no graph runs).

    ``.to(device)`` keeps the host copy until a graph uses it, and then bakes a 0-dim tensor holding
    0 or 1 into the graph as a constant: a BatchNorm's ``num_batches_tracked`` after one step, or a
    step counter, would be a constant in the job's graph and a parameter in the real one (whose state
    comes out of an executed graph), and the real step would miss the job's cache entry. So 0-dim
    tensors are uploaded at once (``_xla_tensors_from_aten``). Other tensors keep ``.to(device)``:
    uploaded at once, an MLP's job graph had the same inputs, constants and ops as the real step's
    but another hash (the module's buffer donation is the difference the HLO allows), and the real
    step missed it."""
    import torch_xla

    host = t.detach().cpu()
    if host.dim() == 0:
        data = torch_xla._XLAC._xla_tensors_from_aten([host], [str(t.device)])[0]
    else:
        data = host.to(t.device)
    copy_sharding(t, data)
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(data, requires_grad=t.requires_grad)
    if t.requires_grad:
        data.requires_grad_(True)
    return data


def sharding_of(t: torch.Tensor):
    """The SPMD sharding annotation of a device tensor (an ``OpSharding``), or None."""
    import torch_xla

    get = getattr(torch_xla._XLAC, "_get_xla_op_sharding", None)
    if get is None:
        return None
    try:
        return get(t)
    except Exception:  # not a device tensor with data, or no SPMD
        return None


def copy_sharding(source: torch.Tensor, target: torch.Tensor) -> None:
    """Give ``target`` the sharding of ``source`` (under SPMD a copy through the host is replicated,
    and the shadow's graph, partitioned otherwise, would not be the user's)."""
    op = sharding_of(source)
    if op is not None:
        import torch_xla

        torch_xla._XLAC._xla_mark_sharding(target, op)


def fresh_input(original: torch.Tensor, shape: tuple[int, ...], placeholder: bool = False) -> torch.Tensor:
    """A new batch of ``shape`` in place of ``original``: zeros moved to the device (device data, as a
    real batch is), sharded as ``original`` is. ``placeholder``: device data with no buffer
    (``create_placeholder_tensor``: the same graph, no memory) for a compile that never runs, unless
    the input is sharded (a placeholder cannot be)."""
    if placeholder and sharding_of(original) is None:
        from torch_xla.core.xla_builder import create_placeholder_tensor

        return create_placeholder_tensor(tuple(shape), original.dtype)
    out = torch.zeros(shape, dtype=original.dtype).to(original.device)
    copy_sharding(original, out)
    return out


@dataclass
class Shadow:
    """A deep copy of a call's arguments, ready to run the step on."""

    args: tuple
    kwargs: dict
    bytes: int
    tensors: int
    notes: list[str] = field(default_factory=list)
    # what later calls of a group map their arguments through: the copies by the user's object id,
    # and the first call's copied arguments by name
    memo: dict = field(default_factory=dict, repr=False)
    named: dict = field(default_factory=dict, repr=False)

    def release(self) -> None:
        self.args, self.kwargs, self.memo, self.named = (), {}, {}, {}


def build_shadow(args: tuple, kwargs: dict, shapes: dict[str, tuple[int, ...]], names: list[str],
                 training: bool | None = None, placeholders: bool = False) -> Shadow:
    """Copy ``args``/``kwargs`` of a step call. ``names`` are the parameter names of the positional
    ``args``; ``shapes`` maps an argument name to the shape a variant gives it (a zero tensor of that
    shape replaces the argument). ``training`` sets the shadow modules' mode (None keeps it).
    ``placeholders``: the new inputs hold no memory (``fresh_input``); only for a compile that never
    runs (``compile_only``)."""
    bound = dict(zip(names, args))
    bound.update(kwargs)
    replaced = {name for name in shapes if name in bound and is_xla_tensor(bound[name])}
    keep = [v for name, v in bound.items() if name not in replaced]
    state = sorted(reachable_tensors(keep), key=tensor_id)
    memo: dict[int, Any] = {}
    total = 0
    for t in state:
        memo[id(t)] = _clone(t)
        total += t.numel() * t.element_size()
    fresh: dict[str, torch.Tensor] = {}
    for name in names + list(kwargs):  # new batches are the newest tensors, in argument order
        if name in replaced and name not in fresh:
            original = bound[name]
            fresh[name] = fresh_input(original, shapes[name], placeholders)
            if not placeholders or sharding_of(original) is not None:  # (a placeholder holds no memory)
                total += fresh[name].numel() * fresh[name].element_size()
    copied = {}
    for name, value in bound.items():
        copied[name] = fresh[name] if name in fresh else copy.deepcopy(value, memo)
    if training is not None:
        for value in copied.values():
            if isinstance(value, torch.nn.Module):
                value.train(training)
    positional = tuple(copied[n] for n in names[:len(args)])
    keywords = {k: copied[k] for k in kwargs}
    return Shadow(positional, keywords, total, len(state) + len(fresh), memo=memo, named=copied)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument of a later call of a group, kept as what a replay needs to make a fresh one."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str


@dataclass(frozen=True)
class SameAs:
    """A tensor argument of a later call of a group that is the group's first call's argument ``name``
    (a mask or an accumulator passed to every call)."""

    name: str


def shadow_call(shadow: Shadow, call, shapes: dict[str, tuple[int, ...]]) -> tuple[tuple, dict]:
    """The arguments of a later call of a group (``MarkedCall.light``), on the shadow the first call's
    arguments made: its batches are fresh zero tensors of ``shapes`` (made now, as the user's loop
    makes each batch before its call), a tensor the first call had too is that call's copy, and
    modules and optimizers are the shadow's own (the same copy for the same object)."""
    def value(name: str | None, v):
        if isinstance(v, SameAs):
            return shadow.named[v.name]
        if isinstance(v, TensorSpec):
            shape = shapes.get(name, v.shape) if name is not None else v.shape
            host = torch.zeros(shape, dtype=v.dtype)
            if host.dim() == 0:  # device data, not a constant baked into the graph (see _clone)
                import torch_xla

                return torch_xla._XLAC._xla_tensors_from_aten([host], [v.device])[0]
            return host.to(v.device)
        return copy.deepcopy(v, shadow.memo)

    args = tuple(value(call.names[i] if i < len(call.names) else None, v) for i, v in enumerate(call.args))
    kwargs = {k: value(k, v) for k, v in call.kwargs.items()}
    return args, kwargs


@dataclass
class RngState:
    """Every random-number state a step can advance: Python's, torch's CPU generator and the XLA
    device's seed (each ``torch_xla.sync()`` advances it, whether or not the graph draws numbers)."""

    python: Any
    torch_cpu: torch.Tensor
    xla_seeds: dict[str, int]
    numpy: Any = None

    @classmethod
    def save(cls) -> "RngState":
        import torch_xla

        import torch_xla.core.xla_model as xm

        seeds = {d: torch_xla._XLAC._xla_get_rng_seed(d) for d in xm.get_xla_supported_devices()}
        try:
            import numpy as np

            np_state = np.random.get_state()
        except ImportError:  # pragma: no cover
            np_state = None
        return cls(random.getstate(), torch.get_rng_state(), seeds, np_state)

    def restore(self) -> None:
        import torch_xla

        random.setstate(self.python)
        torch.set_rng_state(self.torch_cpu)
        for device, seed in self.xla_seeds.items():
            torch_xla._XLAC._xla_set_rng_seed(seed, device)
        if self.numpy is not None:
            import numpy as np

            np.random.set_state(self.numpy)


def shadow_copy(obj: Any) -> Any:
    """A deep copy of ``obj`` (a module, an optimizer, a list of them) whose device tensors are new
    device data with the same values (``_clone``), cloned in tensor-id order as a job's shadow is."""
    tensors = sorted(reachable_tensors([obj]), key=tensor_id)
    memo = {id(t): _clone(t) for t in tensors}
    return copy.deepcopy(obj, memo)
