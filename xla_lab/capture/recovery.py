"""Keep the kernel usable after XLA rejects a graph.

When a sync fails (XLA cannot compile the graph, e.g. a custom call it has no implementation for),
torch_xla 2.9 has already taken the IR out of every tensor that was pending in that graph and given
them no data. Each such tensor is lost: reading it, even its ``.shape``, raises
``Check failed: data()->tensor_data``, and because a sync takes every live tensor of the device,
*every later sync of the kernel* fails the same way while one of them is alive (in the notebook's
variables, a module, an optimizer, a traceback). Without help the user must restart the kernel and
lose all their state.

``repair_lost_tensors`` finds those tensors and swaps each one's contents for an empty tensor of its
dtype (a ``Parameter`` stays a ``Parameter``), so later syncs work again; the values were gone
anyway. It says which of the user's names were hit, so they know what to recompute or reload.
"""

from __future__ import annotations

import gc
import warnings

_LOST = "without XLAData and IR"


def lost_tensors_exist() -> bool:
    """True while a tensor of a failed graph is alive (a cheap check: no scan of the heap)."""
    import torch_xla

    try:
        torch_xla._XLAC._check_device_tensor_need_materialization("")
    except RuntimeError as exc:
        return _LOST in str(exc)
    return False


def _is_lost(tensor, check) -> bool:
    try:
        check([tensor])
    except RuntimeError as exc:
        return _LOST in str(exc)
    return False


def repair_lost_tensors(namespace: dict | None = None) -> str | None:
    """Swap every lost tensor for an empty one; return a note naming the user's variables hit
    (``None`` if there was nothing to repair)."""
    import torch
    import torch_xla

    if not lost_tensors_exist():
        return None
    check = torch_xla._XLAC._check_tensor_need_materialization
    names: list[str] | None = None
    count = failed = 0
    # A tensor still referenced from C++ (saved for backward by another lost tensor's autograd graph)
    # cannot be swapped until that graph is freed by swapping its owner: a few passes.
    for _ in range(4):
        lost = _find_lost(torch, check)
        if not lost:
            break
        if names is None:
            names = _names(namespace or {}, {id(t) for t in lost})
            count = len(lost)
        failed = 0
        for tensor in lost:
            # (made on the host and moved: device data, not a pending op that would join the next graph)
            empty = torch.empty(0, dtype=tensor.dtype).to(tensor.device)
            if isinstance(tensor, torch.nn.Parameter):
                empty = torch.nn.Parameter(empty, requires_grad=tensor.requires_grad)
            try:
                torch.utils.swap_tensors(tensor, empty)
            except Exception:
                failed += 1
            del empty
        del lost, tensor
        gc.collect()
        if not failed:
            break
    if not count:
        return ("XLA could not compile or run a graph, and torch_xla lost tensors that were pending in it, "
                "held where xla_lab cannot reach them (an autograd graph): later syncs fail with 'Check "
                "failed: tensor_data' until they are freed (delete what the failed cell computed).")
    names = names or []
    unnamed = max(0, count - len(names))
    shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
    parts = [f"XLA could not compile or run the graph, and torch_xla lost the values of the "
             f"{count} tensor(s) that were pending in it"]
    if shown:
        parts.append(f" ({shown}" + (f" and {unnamed} without a name in the notebook)" if unnamed else ")"))
    parts.append(". xla_lab replaced them with empty tensors so the kernel keeps working (while one of them "
                 "was alive every later sync would fail): recompute or reload them.")
    if failed or lost_tensors_exist():
        parts.append(f" {failed} could not be replaced; if later syncs fail with 'Check failed: tensor_data', "
                     "delete the variables above or restart the kernel.")
    return "".join(parts)


def _find_lost(torch, check) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on some module objects warns of deprecations
        return [obj for obj in gc.get_objects()
                if isinstance(obj, torch.Tensor) and obj.device.type == "xla" and _is_lost(obj, check)]


def _names(namespace: dict, lost_ids: set[int]) -> list[str]:
    import torch

    named: list[str] = []
    for name, value in list(namespace.items()):
        if name.startswith("_"):
            continue
        if isinstance(value, torch.Tensor) and id(value) in lost_ids:
            named.append(name)
        elif isinstance(value, torch.nn.Module):
            try:
                items = list(value.named_parameters()) + list(value.named_buffers())
            except Exception:
                continue
            named.extend(f"{name}.{p}" for p, t in items if id(t) in lost_ids)
    return list(dict.fromkeys(named))
