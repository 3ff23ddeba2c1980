"""The sync hook's records on real torch_xla calls (``capture/instrument.py``): what lean capture pairs
executions with (``steps._owners``), so each record must say truly whether its call ran a graph."""

import pytest
import torch
import torch_xla

from xla_lab.capture.instrument import LineTracking, SyncHook


@pytest.fixture
def lean_hook():
    hook = SyncHook("/nonexistent/sync.log", LineTracking("on"), frames=True, cell_file=__file__)
    originals = (torch_xla._XLAC._xla_step_marker, torch_xla._XLAC._xla_sync_multi, torch_xla._XLAC._run_cached_graph)
    hook.install()
    yield hook
    hook.uninstall()
    assert (torch_xla._XLAC._xla_step_marker, torch_xla._XLAC._xla_sync_multi,
            torch_xla._XLAC._run_cached_graph) == originals


def test_a_sync_of_some_tensors_is_a_record_that_ran_a_graph_only_when_work_was_pending(lean_hook, fresh_dim):
    """torch.compile syncs a graph's pending inputs with ``_xla_sync_multi`` before running the graph; so
    may user code. Each call is a record (``tensors``) with its caller's frames; a call with nothing
    pending ran nothing, and one that raised ran nothing and still raises the user's error."""
    x = torch.ones(fresh_dim, device=torch_xla.device()) * 3
    y = x + 1
    torch_xla._XLAC._xla_sync_multi([y], devices=[], wait=True)
    torch_xla._XLAC._xla_sync_multi([y], devices=[], wait=True)  # (nothing pending any more)
    with pytest.raises(TypeError):
        torch_xla._XLAC._xla_sync_multi("not a list of tensors")
    assert [(r.tensors, r.executed, r.graph_hash) for r in lean_hook.records] == [
        (True, True, None), (True, False, None), (True, False, None)]
    first = lean_hook.records[0]
    assert first.enter <= first.exit
    assert first.frames and first.frames[0].function == \
        "test_a_sync_of_some_tensors_is_a_record_that_ran_a_graph_only_when_work_was_pending"
    assert y.cpu().tolist() == [4.0] * fresh_dim


def test_a_step_marker_is_a_sync_record(lean_hook, fresh_dim):
    x = torch.ones(fresh_dim, device=torch_xla.device()) * 5
    torch_xla.sync()
    assert [(r.tensors, r.executed, r.graph_hash) for r in lean_hook.records] == [(False, True, None)]
    assert x.cpu().tolist() == [5.0] * fresh_dim
