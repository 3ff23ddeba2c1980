"""Keep the kernel usable after XLA fails to compile or to run a graph.

torch_xla 2.9 leaves tensors without a value in two ways, and each can take the whole kernel down:

* **XLA rejects the graph while compiling it** (e.g. a custom call it has no implementation for).
  torch_xla has already taken the IR out of every tensor that was pending in that graph and given
  them no data. Reading one, even its ``.shape``, raises ``Check failed: data()->tensor_data``, and
  because a sync takes every live tensor of the device, *every later sync of the kernel* fails the
  same way while one of them is alive (in the notebook's variables, a module, an optimizer, a
  traceback).
* **XLA fails while running the graph** (e.g. out of device memory). The sync returns before the
  graph runs, so its outputs are placeholders that XLA never fills. Reading one raises "an async
  operation is in flight", and once the failure has been reported (by a wait, such as the one at the
  end of every ``%%xla`` cell) a later graph that takes one as input **crashes the process**
  (segmentation fault).

``repair_lost_tensors`` finds both kinds and swaps each one for a ``LostTensor``: its contents an
empty device tensor (so syncs work and nothing can crash), its type one whose every use raises an
error that says how the value was lost. The values were gone anyway. It returns a note naming the
user's variables hit, so they know what to recompute or reload.
"""

from __future__ import annotations

import gc
import warnings

import torch
from torch.utils._pytree import tree_leaves

_LOST = "without XLAData and IR"


class LostTensor(torch.Tensor):
    """Stands in for a tensor whose value XLA never produced. Any use raises ``LostTensorError``
    naming the failure; ``repr`` says what it is."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        __tracebackhide__ = True  # noqa: F841  (IPython shows the user's line, not this one)
        lost = next((t for t in tree_leaves((args, kwargs or {})) if isinstance(t, LostTensor)), None)
        raise LostTensorError(_message(lost.__dict__.get("xla_lab_lost") if lost is not None else None))

    def __repr__(self) -> str:
        return f"<LostTensor: {self.__dict__.get('xla_lab_lost', 'value lost')}>"

    __str__ = __repr__


class LostTensorError(RuntimeError):
    """A ``LostTensor`` was used."""


def is_xla_tensor(value) -> bool:
    """An XLA tensor with a value (a ``LostTensor`` stand-in for a value XLA lost has none)."""
    return isinstance(value, torch.Tensor) and not isinstance(value, LostTensor) and value.device.type == "xla"


def _message(reason: str | None) -> str:
    return (f"this tensor has no value: {reason or 'XLA failed to compile or run the graph that computed it'}; "
            "xla_lab put this stand-in in its place so that the kernel keeps working; recompute or reload it.")


def replace_with_stand_in(tensor: torch.Tensor, reason: str) -> None:
    """Turn ``tensor`` (the same Python object, wherever it is referenced) into a ``LostTensor``
    whose uses raise ``reason``. Raises if torch cannot swap it (a weak reference to it exists)."""
    # (made on the host and moved: device data, not a pending op that would join the next graph)
    stand_in = torch.empty(0, dtype=tensor.dtype).to(tensor.device).as_subclass(LostTensor)
    stand_in.__dict__["xla_lab_lost"] = reason
    torch.utils.swap_tensors(tensor, stand_in)


def pending_lazy_work() -> bool:
    """Is any live device tensor waiting for a graph to run (what a sync of the device would run)?
    Raises what torch_xla raises, e.g. while a lost tensor is alive (``lost_tensors_exist``)."""
    import torch_xla

    return any(torch_xla._XLAC._check_device_tensor_need_materialization(""))


def lost_tensors_exist() -> bool:
    """True while a tensor of a graph XLA could not compile is alive (a cheap check: no scan of the heap)."""
    import torch_xla

    try:
        torch_xla._XLAC._check_device_tensor_need_materialization("")
    except RuntimeError as exc:
        return _LOST in str(exc)
    return False


def wait_for_device() -> str | None:
    """Wait for every graph XLA is running; the error of one that failed, else ``None``."""
    import torch_xla

    try:
        torch_xla._XLAC._xla_wait_device_ops([])
    except Exception as exc:  # noqa: BLE001  (XLA's runtime errors arrive as several types)
        return str(exc) or type(exc).__name__
    return None


def repair_lost_tensors(namespace: dict | None = None, failure: str | None = None,
                        run_failed: bool = False) -> str | None:
    """Swap every lost tensor for a ``LostTensor``; return a note naming the user's variables hit
    (``None`` if there was nothing to repair).

    ``failure``: the error that lost them, for the stand-ins' message. ``run_failed``: a graph may
    have failed while running: wait for the device, then also look for placeholders that will never
    be filled (a scan of the heap, so only after an error)."""
    import torch_xla

    from xla_lab.runtime import runtime_started

    if not runtime_started():  # nothing ran on this process's device (a launch's workers did): nothing lost
        return None            # here, and waiting would start the runtime (xmp.spawn refuses after that)
    compile_lost = lost_tensors_exist()
    if not compile_lost and not run_failed:
        return None
    if run_failed:
        failure = wait_for_device() or failure
    detail = f" ({failure.strip().splitlines()[0][:300]})" if failure and failure.strip() else ""
    checks = []  # (is it lost?, how it was lost)
    if compile_lost:
        checks.append((_is_lost_in_compile(torch_xla), "XLA could not compile the graph that computed it" + detail))
    if run_failed:
        checks.append((_is_unfilled_placeholder(torch_xla), "XLA failed while running the graph that computed it"
                       + detail))
    names: list[str] | None = None
    count = failed = 0
    # A tensor still referenced from C++ (saved for backward by another lost tensor's autograd graph)
    # cannot be swapped until that graph is freed by swapping its owner: a few passes.
    for _ in range(4):
        lost = _find(checks)
        if not lost:
            break
        if names is None:
            names = _names(namespace or {}, {id(t) for t, _ in lost})
            count = len(lost)
        failed = 0
        for tensor, reason in lost:
            try:
                replace_with_stand_in(tensor, reason)
            except Exception:
                failed += 1
        del lost, tensor, reason
        gc.collect()
        if not failed:
            break
    if not count:
        if not compile_lost:
            return None
        return ("XLA could not compile or run a graph, and torch_xla lost tensors that were pending in it, "
                "held where xla_lab cannot reach them (an autograd graph): later syncs fail with 'Check "
                "failed: tensor_data' until they are freed (delete what the failed cell computed).")
    names = names or []
    unnamed = max(0, count - len(names))
    shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
    parts = [f"XLA could not compile or run the graph, and torch_xla lost the values of the "
             f"{count} tensor(s) it was computing"]
    if shown:
        parts.append(f" ({shown}" + (f" and {unnamed} without a name in the notebook)" if unnamed else ")"))
    parts.append(". xla_lab replaced them with stand-ins that say so when used, so the kernel keeps working "
                 "(left as they were, every later sync would fail, or the kernel would crash): recompute "
                 "or reload them.")
    if failed or lost_tensors_exist():
        parts.append(f" {failed} could not be replaced; if later syncs fail with 'Check failed: tensor_data', "
                     "delete the variables above or restart the kernel.")
    return "".join(parts)


def _is_lost_in_compile(torch_xla):
    check = torch_xla._XLAC._check_tensor_need_materialization

    def lost(tensor) -> bool:
        try:
            check([tensor])
        except RuntimeError as exc:
            return _LOST in str(exc)
        return False

    return lost


def _is_unfilled_placeholder(torch_xla):
    """After a wait for the device, a tensor whose data still has no buffer belongs to a graph that
    failed while running."""
    from xla_lab.compat import placeholder_check

    check = placeholder_check(torch_xla._XLAC)

    def unfilled(tensor) -> bool:
        try:
            return bool(check(tensor))
        except RuntimeError:
            return False

    return unfilled


def _find(checks) -> list[tuple[torch.Tensor, str]]:
    """Every live XLA tensor some check calls lost, with that check's reason."""
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on some module objects warns of deprecations
        for obj in gc.get_objects():
            if is_xla_tensor(obj):
                reason = next((why for check, why in checks if check(obj)), None)
                if reason is not None:
                    found.append((obj, reason))
    return found


def _names(namespace: dict, lost_ids: set[int]) -> list[str]:
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
