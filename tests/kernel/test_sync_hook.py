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


def test_a_cached_runs_hash_is_written_as_torch_xlas_logs_write_it(lean_hook, fresh_dim):
    """torch.compile runs its graphs with ``_run_cached_graph(hash bytes, inputs)``; the hook names the
    step by that hash, and lean capture finds the graph's compile by the text torch_xla's debug log
    gave it. The logs write the high half unpadded, so a hash whose first hex digit is 0 (one in 16)
    must not get a leading zero here. A graph with such a hash is searched for, compiled as dynamo
    compiles (``_xla_warm_up_cache``) and run from the cache."""
    import os

    from xla_lab.capture.xla_logs import parse_debug_log

    base = torch.ones(fresh_dim, device=torch_xla.device()) * 2
    torch_xla.sync()
    for depth in range(1, 400):
        out = base
        for _ in range(depth):
            out = out.sin()
        raw = bytes(torch_xla._XLAC._get_graph_hash([out]))
        if raw[-1] >> 4 == 0:  # little-endian: the last byte holds the first hex digit
            break
    else:
        pytest.fail("no graph hash starting with a 0 digit in 400 tries")
    log = os.environ["PT_XLA_DEBUG_FILE"]
    start = os.path.getsize(log)
    torch_xla._XLAC._xla_warm_up_cache([out], [])
    with open(log) as f:
        f.seek(start)
        compiled = [e.graph_hash for e in parse_debug_log(f.read()) if e.kind == "compile"]
    (result,) = torch_xla._XLAC._run_cached_graph(raw, [base])
    assert compiled and lean_hook.records[-1].graph_hash == compiled[-1]
    assert not compiled[-1].startswith("0") and len(compiled[-1]) < 32
    assert torch.allclose(result.cpu(), out.cpu())
