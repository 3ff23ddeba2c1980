"""The model zoo (``zoo.py``): every promise of ``%%xla`` checked on models people actually train,
with the training idioms they are run with, on real torch_xla graphs.

Per entry: every sync is captured with a specific cause; every kernel of every compiled graph
(backward and optimizer included) is credited to a cell line and to the model's own line (the
innermost frame outside torch / torch_xla: a cell, a local module, or a library such as
transformers); the panel's annotated source shows the model's files; and the losses are bitwise
equal to the same loop run without ``%%xla``.
"""

import pytest
import torch

import zoo
from xla_lab.view.panel_model import panel_model
from xla_lab.view.static_html import capture_html
from xla_lab.capture.frames import is_internal

GENERIC = "data-dependent code or a CPU fallback)"  # the cause when nothing better is known


def _run(ip, entry, magic: bool):
    assert ip.run_cell(entry.setup).success, f"{entry.name}: setup failed"
    if magic:
        result = ip.run_cell(f"%%xla -q --name zoo_{entry.name}\n{entry.loop}")
    else:
        result = ip.run_cell(entry.loop)
    assert result.success, f"{entry.name}: {result.error_in_exec!r}"
    return [t.detach().cpu() for t in ip.user_ns["zoo_losses"]]


@pytest.fixture(scope="module")
def zoo_runs(ip):
    """Each entry run once under %%xla and once plain (the graphs are then in XLA's cache)."""
    import xla_lab

    out = {}
    for entry in zoo.ZOO:
        captured = _run(ip, entry, magic=True)
        capture = xla_lab.last()
        plain = _run(ip, entry, magic=False)
        out[entry.name] = (capture, captured, plain)
    return out


@pytest.mark.parametrize("entry", zoo.ZOO, ids=lambda e: e.name)
def test_losses_bitwise_equal_with_and_without_xla_magic(zoo_runs, entry):
    _, captured, plain = zoo_runs[entry.name]
    assert len(captured) == len(plain) > 0
    for a, b in zip(captured, plain):
        assert torch.equal(a, b), f"{entry.name}: {a} != {b}"


@pytest.mark.parametrize("entry", [e for e in zoo.ZOO if e.name != "mlp_eager"], ids=lambda e: e.name)
def test_every_sync_is_captured_with_a_specific_cause(zoo_runs, entry):
    capture, _, _ = zoo_runs[entry.name]
    assert not capture.notes, capture.notes
    assert capture.steps and capture.compiles >= 1
    for step in capture.steps:
        assert step.sync_cause and not step.sync_cause.startswith("unknown"), step
        assert not step.sync_cause.endswith(GENERIC), step.sync_cause
        if step.cache == "miss":
            assert step.recompile_reason, step


@pytest.mark.parametrize("entry", [e for e in zoo.ZOO if e.name != "mlp_eager"], ids=lambda e: e.name)
def test_every_kernel_has_a_cell_line_and_a_model_line(zoo_runs, entry):
    capture, _, _ = zoo_runs[entry.name]
    graphs = [a for a in capture.artifacts().values() if a.fusions]
    assert graphs, "no compiled graph with a fusion map"
    for art in graphs:
        for k in art.fusions:
            assert k["lines"], f"{entry.name}: kernel {k['name']} has no cell line"
            assert k["model_lines"], f"{entry.name}: kernel {k['name']} has no model line"
            for ln in k["model_lines"]:
                assert ln.get("cell") is not None or not is_internal(ln["file"]), ln


@pytest.mark.parametrize("entry", [e for e in zoo.ZOO if e.model_file != "<cell>"], ids=lambda e: e.name)
def test_kernels_are_credited_to_the_model_file_and_the_panel_shows_it(zoo_runs, entry):
    capture, _, _ = zoo_runs[entry.name]
    kernels = [k for art in capture.artifacts().values() for k in art.fusions or []]
    in_file = [k for k in kernels if any(ln.get("file") == entry.model_file for ln in k["model_lines"])]
    # the forward (and, inferred, the backward) of the model: a good part of the kernels, not a few
    assert len(in_file) >= 0.25 * len(kernels), (entry.name, len(in_file), len(kernels))
    if entry.name == "mixer_dynamo":
        return  # the panel's main graph is the last step's: here the optimizer's, outside dynamo's graphs
    files = {f["file"]: f for f in panel_model(capture)["model_files"]}
    assert entry.model_file in files, sorted(files)
    lines = files[entry.model_file]["lines"]
    assert lines and all(ln["code"] and ln["kernels"] for ln in lines)
    assert f"lines of <code>{entry.model_file}</code> and the kernels they feed" in capture_html(capture)


def test_library_sync_names_the_library_line(zoo_runs):
    """transformers checks the attention mask with a Python `if` on a tensor: the cause says where."""
    capture, _, _ = zoo_runs["bert"]
    causes = {s.sync_cause for s in capture.steps}
    assert any("modeling_attn_mask_utils.py:" in c and "Python number/bool" in c for c in causes), causes
    assert "implicit: .item() reads the value" in causes


def test_execution_modes_have_their_own_causes(zoo_runs):
    decoder, _, _ = zoo_runs["decoder_only"]
    assert {s.graph_name for s in decoder.steps} == {"decoder_step"}
    assert all(s.sync_cause.startswith("torch_xla.compile()") for s in decoder.steps)
    dynamo, _, _ = zoo_runs["mixer_dynamo"]
    causes = {s.sync_cause for s in dynamo.steps}
    assert any(c.startswith('torch.compile(backend="openxla") ran its compiled forward graph') for c in causes)
    assert any(c.startswith('torch.compile(backend="openxla") ran its compiled backward graph') for c in causes)
    lstm, _, _ = zoo_runs["lstm"]
    assert all(s.sync_cause == "torch_xla.sync() by the device loader (MpDeviceLoader)" for s in lstm.steps)


def test_eager_mode_says_ops_compiled_one_by_one(zoo_runs):
    capture, _, _ = zoo_runs["mlp_eager"]
    assert not capture.steps
    note = next(n for n in capture.notes if n.startswith("eager mode:"))
    assert "ops ran one by one" in note and "compiled on their own" in note


@pytest.mark.parametrize("entry", [e for e in zoo.ZOO if e.name != "mlp_eager"], ids=lambda e: e.name)
def test_profile_measures_every_step_and_kernel(ip, zoo_runs, entry):
    """%%xla --profile on each model of the zoo (its graphs cached by the runs above): every step
    has device time, within its dispatch-to-ready time, every kernel that ran is one the analysis
    knows, and line times add up."""
    import xla_lab
    from xla_lab.profile import breakdown

    assert ip.run_cell(entry.setup).success
    result = ip.run_cell(f"%%xla -q --profile --name zoo_{entry.name}\n{entry.loop}")
    assert result.success, f"{entry.name}: {result.error_in_exec!r}"
    capture = xla_lab.last()
    profile = capture.profile
    assert profile is not None, capture.notes
    assert not [n for n in capture.notes if "profile" in n], capture.notes
    assert [r["step"] for r in profile["steps"]] == [s.index for s in capture.steps]
    idle = [r for r in profile["steps"] if not r["busy_ns"] > 0]
    assert not idle, [(r["step"], r["graph_hash"][:12], profile["graphs"].get(r["graph_hash"], {}).get("module"),
                       sorted(profile["graphs"].get(r["graph_hash"], {}).get("other", {}))[:8]) for r in idle]
    # device time that agrees with the step: its kernels' compute time is at most its dispatch-to-ready time
    for row, step in zip(profile["steps"], capture.steps):
        assert row["compute_ns"] + row["left_out_ns"] <= row["busy_ns"], (entry.name, row)
        assert row["wall_ns"] == pytest.approx(step.timings["execute_s"] * 1e9), row
        assert row["busy_ns"] <= row["wall_ns"] + 1, (entry.name, row)
    kernels = breakdown.kernel_times(capture)
    assert kernels and all(k.known for k in kernels), [k.name for k in kernels if not k.known][:5]
    lines = breakdown.line_times(capture, model=True, kernels=kernels)
    assert sum(ln.total_ns for ln in lines) == pytest.approx(sum(k.total_ns for k in kernels))
    assert lines[0].label != breakdown.NO_LINE


@pytest.mark.parametrize("entry", zoo.ZOO, ids=lambda e: e.name)
def test_every_compile_has_a_compile_profile_that_adds_up(zoo_runs, entry):
    """Each graph the entry compiled has a compile profile whose named phases are its CompileTime, whose
    kernels are the fusion map's (each with an emission time or a reason it has none), and whose lines
    add up to its kernels: on the model's own file too."""
    from xla_lab.profile.compile_breakdown import compile_views

    capture = zoo_runs[entry.name][0]
    misses = [s for s in capture.steps if s.cache == "miss" and s.artifacts is not None]
    for step in misses:
        p = step.artifacts.compile_profile
        assert p is not None, (step.index, capture.notes)
        assert abs(sum(ph["ns"] for ph in p["phases"]) - p["compile_ns"]) <= 1e-6 * p["compile_ns"]
        assert p["explained"] >= 0.95, p["phases"]
        assert abs(p["compile_ns"] / 1e9 - step.timings["compile_s"]) <= 0.01 * step.timings["compile_s"] + 1e-3
        assert {k["name"] for k in p["kernels"]} <= {k["name"] for k in step.artifacts.fusions}
    views = compile_views(capture)
    assert len(views) == len({s.graph_hash for s in misses})
    for v in views:
        names = {k["name"] for k in next(s for s in misses if s.graph_hash == v.graph_hash).artifacts.fusions}
        untimed = {n for group in v.untimed.values() for n in group}
        assert {k.name for k in v.kernels} | untimed == names and not {k.name for k in v.kernels} & untimed
        kernels = sum(k.total_ns for k in v.kernels)
        assert abs(sum(ln.total_ns for ln in v.lines) - kernels) <= 1e-6 * max(kernels, 1)
        assert abs(sum(ln.total_ns for ln in v.model_lines) - kernels) <= 1e-6 * max(kernels, 1)
    if entry.model_file != "<cell>" and misses:
        biggest = max(views, key=lambda v: v.compile_ns)
        if not biggest.profile["kernel_events"]:  # torch_xla 2.8's XLA times no kernel: no lines to credit
            assert not biggest.kernels and len(biggest.untimed) == 1
            return
        assert any(ln.file and ln.file.endswith(entry.model_file.split("/")[-1]) for ln in biggest.model_lines)
