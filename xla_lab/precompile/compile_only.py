"""Compile a step traced on a shadow without running it: how ``%xla fit`` reads the peak memory of
sizes that may not fit the device (running one would be the out-of-memory error it exists to avoid).

``torch_xla._XLAC._xla_warm_up_cache(tensors, devices)`` compiles the graph of ``tensors`` and runs
nothing (XLA's dump, and with it the buffer assignment, is written as for any compile). Its graph is
the one a sync of those tensors would build, with one difference that matters for memory: a step
barrier (``torch_xla.sync()``) lets the step's in-place updates (weights, optimizer state) reuse their
old buffers (buffer donation), and a warm-up compile does not. So the shadow's state tensors are
marked as buffer donors before the trace, the marks are taken off the ones the step did not update,
and the compile runs with torch_xla's buffer-donor switch on (off again afterwards). The peak then
counts each updated tensor once, as a step barrier aims to. (torch_xla's own step barrier can donate
fewer: on the CPU client an AdamW step's graph kept one group of optimizer state twice, 8% more than
this; the result says so.)

Inputs of the new size can be placeholders (``shadow.fresh_input``): nothing runs, so nothing needs
their memory.
"""

from __future__ import annotations

from typing import Any

import torch

from .shadow import Shadow, is_xla_tensor, reachable_tensors


def _xlac():
    import torch_xla

    return torch_xla._XLAC


def mark_donors(shadow: Shadow, replaced: set[str]) -> list[torch.Tensor]:
    """Mark the shadow's state tensors (not its new inputs, ``replaced``) as buffer donors; returns
    those marked. Call before the trace: a mark is on the tensor's device data."""
    X = _xlac()
    setter = getattr(X, "_set_buffer_donation", None)
    if setter is None:
        return []
    keep = [v for name, v in shadow.named.items() if name not in replaced]
    marked = []
    for t in reachable_tensors(keep):
        try:
            setter(t, True)
            marked.append(t)
        except Exception:  # no device data (a pending value): not a donor
            pass
    return marked


def _pending(tensors: list[torch.Tensor]) -> list[bool]:
    if not tensors:
        return []
    return list(_xlac()._check_tensor_need_materialization(tensors))


def outputs(shadow: Shadow, result: Any) -> list[torch.Tensor]:
    """The tensors a sync after the step would compute: everything the shadow and the result reach
    that has pending work, gradients included."""
    values = list(shadow.named.values()) + [result]
    tensors = reachable_tensors(values)
    seen = {id(t) for t in tensors}
    for t in list(tensors):
        grad = t.grad if t.is_leaf and t.requires_grad else None
        if grad is not None and is_xla_tensor(grad) and id(grad) not in seen:
            seen.add(id(grad))
            tensors.append(grad)
    return [t for t, pending in zip(tensors, _pending(tensors)) if pending]


def compile_without_running(shadow: Shadow, result: Any, donors: list[torch.Tensor]) -> int:
    """Compile the graph the step left pending on ``shadow`` (and ``result``), running nothing.
    Returns how many tensors it computes."""
    X = _xlac()
    if donors:
        setter = X._set_buffer_donation
        for t, updated in zip(donors, _pending(donors)):
            if not updated:  # read, not updated: its buffer lives on
                setter(t, False)
    tensors = outputs(shadow, result)
    if not tensors:
        return 0
    get = getattr(X, "_xla_get_enable_alias_with_buffer_donor_config", None)
    before = get() if get is not None else None
    if get is not None:
        X._xla_set_enable_alias_with_buffer_donor_config(True)
    try:
        X._xla_warm_up_cache(tensors, [])
    finally:
        if get is not None:
            X._xla_set_enable_alias_with_buffer_donor_config(before)
    return len(tensors)
