"""Loops as first-class graphs, on real torch_xla compiles: ``scan_layers`` over a stack of identical
layers kept in a module (``zoo/zoo_models/stacked.py``) and in a cell, ``scan`` of a function, and
``torch._higher_order_ops.while_loop``. Each lowers to one HLO ``while``; its body's kernels must name
the lines of the code that was scanned (the layer's ``forward``), forward and backward, not the
``scan_layers(...)`` call; they run trip-count times, which their flops, the loop record, the summary
and the measured time (``--profile``) account for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xla_lab.view.report import Report

ZOO = Path(__file__).resolve().parent / "zoo"
STACKED = ZOO / "zoo_models" / "stacked.py"
DEPTH = 4


def line_of(text: str, path: Path = STACKED) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


FC, RELU = line_of("h = self.fc(x)"), line_of("return torch.relu(h)")
COND, BODY = line_of("return i > 0"), line_of("h = torch.cos(v) * v")


def _file_lines(kernel: dict) -> set[tuple[str, int]]:
    return {(os.path.basename(ln["file"]), ln["line"]) for ln in kernel["model_lines"] if ln.get("file")}


def _main(capture):
    step = next(s for s in capture.steps if s.artifacts is not None and s.artifacts.fusions)
    return step, step.artifacts


@pytest.fixture(scope="module")
def setup(ip):
    assert ip.run_cell(f"""
import sys, torch, torch_xla
if {str(ZOO)!r} not in sys.path:
    sys.path.insert(0, {str(ZOO)!r})
import torch_xla.experimental.fori_loop  # while_loop's XLA lowering
from torch._higher_order_ops.while_loop import while_loop
from torch_xla.experimental.scan import scan
from torch_xla.experimental.scan_layers import scan_layers
from zoo_models.stacked import stack, count_down, step_down
loop_dev = torch_xla.device()
""").success
    return ip


def _stack_cell(ip, width: int) -> int:
    """Layers of ``width`` and an input, in a cell of their own; its execution count."""
    result = ip.run_cell(f"""
loop_layers = stack({width}, {DEPTH}).to(loop_dev)
loop_x = torch.randn(3, {width}).to(loop_dev).requires_grad_()
""", store_history=True)
    assert result.success
    return result.execution_count


@pytest.fixture(scope="module")
def scanned(setup, xla_cell_module):
    """A forward and backward pass through 4 layers with scan_layers, and the same layers unrolled."""
    width = 24
    _stack_cell(setup, width)
    scan_capture = xla_cell_module("y = scan_layers(loop_layers, loop_x)\ny.sum().backward()", "-q")
    _stack_cell(setup, width)
    unrolled = xla_cell_module("h = loop_x\nfor layer in loop_layers:\n    h = layer(h)\nh.sum().backward()", "-q")
    return scan_capture, unrolled


@pytest.fixture(scope="module")
def xla_cell_module(setup):
    from xla_cells import run_xla

    def run(body: str, options: str = ""):
        result, capture = run_xla(setup, body, options)
        assert result.success, result.error_in_exec
        return capture

    return run


def test_the_forward_and_backward_loops_are_recorded(scanned):
    capture, _ = scanned
    _, art = _main(capture)
    loops = art.loops
    assert len(loops) == 2, loops  # scan's forward, and its backward (autograd runs it)
    assert sorted(lp["backward"] for lp in loops) == [False, True]
    call = {"cell": capture.execution_count, "line": 1, "code": "y = scan_layers(loop_layers, loop_x)"}
    for lp in loops:
        assert (lp["trip_count"], lp["runs"], lp["op"], lp["parent"]) == (DEPTH, DEPTH, "xla__scan", None)
        assert lp["trip_count_from"] == "backend_config"  # XLA's while-loop-trip-count-annotator
        assert lp["lines"] == [call]  # the backward's call too: read from the stacks its body was traced with
        assert lp["kernels"] and set(lp["kernels"]) <= {k["name"] for k in art.fusions}
        inside = [k for k in art.fusions if k["name"] in lp["kernels"]]
        assert all(k["loop"] == lp["instruction"] for k in inside)


def test_body_kernels_name_the_layers_forward_not_the_call(scanned):
    capture, _ = scanned
    _, art = _main(capture)
    call = {(capture.execution_count, 1)}
    forward = {("stacked.py", FC), ("stacked.py", RELU)}
    for lp in art.loops:
        inside = [k for k in art.fusions if k["loop"] == lp["instruction"]]
        dots = [k for k in inside if k["kind"] == "dot"]
        assert dots, [k["name"] for k in inside]
        for k in inside:
            # the cell line of a model kept in a file is the line that called it, as for any model
            assert {(ln["cell"], ln["line"]) for ln in k["lines"]} == call, (k["name"], k["lines"])
            named = _file_lines(k)
            assert named <= forward, (lp["backward"], k["name"], k["model_lines"])
            if named:
                assert not k.get("lines_inferred")  # backward ops carry the forward op's stack
            if {"aten::relu", "aten::threshold_backward"} & set(k["aten_ops"]):
                assert ("stacked.py", RELU) in named, (k["name"], k["model_lines"])
            if not named:  # the loop's own work (its counter, slicing, scan's ``x * 1``): the call's
                assert [(ln.get("cell"), ln["line"]) for ln in k["model_lines"]] == list(call), k
    dots = [k for k in art.fusions if k["loop"] and k["kind"] == "dot"]
    assert {frozenset(_file_lines(k)) for k in dots} == {frozenset({("stacked.py", FC)})}
    assert len(dots) == 3  # forward x @ W^T; backward dx = dy @ W and dW = dy^T @ x


def test_body_flops_count_every_iteration(scanned):
    """The scanned stack does the unrolled stack's work: its body kernels count trip-count times."""
    capture, unrolled = scanned
    _, art = _main(capture)
    _, flat = _main(unrolled)
    assert not flat.loops and all(k["runs"] == 1 and k["loop"] is None for k in flat.fusions)

    def dot_flops(kernels):
        return sum(k["flops"] for k in kernels if k["kind"] == "dot")

    assert dot_flops(art.fusions) == dot_flops(flat.fusions) > 0
    for k in art.fusions:
        if k["loop"]:
            assert k["runs"] in (DEPTH, DEPTH + 1)  # (a condition's kernel runs once more)
            assert k["flops"] % k["runs"] == 0 and k["bytes"] % k["runs"] == 0
    total, total_flat = sum(k["flops"] for k in art.fusions), sum(k["flops"] for k in flat.fusions)
    assert 0.9 < total / total_flat < 1.2, (total, total_flat)
    one_run = sum(k["flops"] // k["runs"] for k in art.fusions if k["loop"] and k["kind"] == "dot")
    assert one_run * DEPTH == dot_flops(art.fusions)


def test_the_summary_names_the_loops_and_their_trip_counts(scanned):
    capture, _ = scanned
    text = Report(capture).text()
    loops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("loop while.")]
    assert len(loops) == 2, text
    at = f"at [{capture.execution_count}]:1"
    assert any(ln.split(": ", 1)[1].startswith(f"scan {at}") for ln in loops), loops
    assert any(ln.split(": ", 1)[1].startswith(f"the backward of scan {at}") for ln in loops), loops
    assert all(f"{DEPTH} iterations: its " in ln and f"run {DEPTH}x per execution" in ln for ln in loops), loops
    html = Report(capture).html()
    assert "loop while." in html and f"{DEPTH} iterations" in html


def test_loops_survive_the_captures_json(scanned):
    from xla_lab import CellCapture

    capture, _ = scanned
    back = CellCapture.from_json(capture.to_json())
    _, art = _main(capture)
    _, art_back = _main(back)
    assert art_back.loops == art.loops and art_back.fusions == art.fusions


CELL = """class CellBlock(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
    def forward(self, x):
        return torch.tanh(self.fc(x))
def cell_step(carry, x):
    carry = carry * 0.5 + x.sin()
    return carry, carry.sum()
cell_layers = [CellBlock(20).to(loop_dev) for _ in range(3)]
cell_x = torch.randn(2, 20).to(loop_dev)
cell_xs = torch.randn(5, 2, 20).to(loop_dev)
"""


def test_a_layer_and_a_scanned_function_written_in_cells(setup, xla_cell_module):
    """Code written in the notebook: the body's kernels name the cell lines of the layer's forward
    and of the scanned function."""
    defined = setup.run_cell(CELL, store_history=True)
    assert defined.success
    lines = CELL.splitlines()
    forward, step = lines.index("        return torch.tanh(self.fc(x))") + 1, lines.index("    carry = carry * 0.5 + x.sin()") + 1
    capture = xla_cell_module("y = scan_layers(cell_layers, cell_x)\nc, ys = scan(cell_step, cell_x, cell_xs)", "-q")
    _, art = _main(capture)
    assert {lp["trip_count"]: lp["lines"][0]["line"] for lp in art.loops} == {3: 1, 5: 2}, art.loops
    n = defined.execution_count
    calls = {(capture.execution_count, 1), (capture.execution_count, 2)}
    for lp in art.loops:
        expected = {(n, forward)} if lp["trip_count"] == 3 else {(n, step), (n, step + 1)}
        inside = [k for k in art.fusions if k["loop"] == lp["instruction"]]
        math = [k for k in inside if k["kind"] == "dot" or {"aten::tanh", "aten::sin"} & set(k["aten_ops"])]
        assert math, [k["name"] for k in inside]
        for k in inside:
            cells = {(ln["cell"], ln["line"]) for ln in k["lines"]}
            assert cells and cells <= expected | calls, (k["name"], k["lines"])
            if k in math:  # the layer's and the function's own lines, not the call's
                assert cells <= expected and {(ln["cell"], ln["line"]) for ln in k["model_lines"]} == cells, k


def test_a_while_loop(setup, xla_cell_module):
    """``while_loop`` (dynamo traces the body, torch_xla lowers it without frames of its own): the
    body's kernels name the body's lines; the counter is an input of the graph, so the trip count
    is not known before the loop runs, and the summary says so."""
    assert setup.run_cell("loop_counter = torch.tensor(3, dtype=torch.int32).to(loop_dev)\n"
                          "loop_v = torch.randn(6).to(loop_dev)").success
    capture = xla_cell_module("i, v = while_loop(count_down, step_down, (loop_counter, loop_v))", "-q")
    _, art = _main(capture)
    (lp,) = art.loops
    assert (lp["op"], lp["trip_count"], lp["runs"], lp["backward"]) == ("xla___op_test_while", None, None, False)
    assert lp["lines"] == [{"cell": capture.execution_count, "line": 1,
                            "code": "i, v = while_loop(count_down, step_down, (loop_counter, loop_v))"}]
    inside = [k for k in art.fusions if k["loop"] == lp["instruction"]]
    assert inside and all(k["runs"] is None for k in inside)
    named = set().union(*(_file_lines(k) for k in inside))
    assert ("stacked.py", BODY) in named and named <= {("stacked.py", BODY), ("stacked.py", BODY + 1),
                                                       ("stacked.py", COND)}, named
    assert all({(ln["cell"], ln["line"]) for ln in k["lines"]} == {(capture.execution_count, 1)} for k in inside)
    text = Report(capture).text()
    assert f"while_loop at [{capture.execution_count}]:1" in text and "trip count not known before it runs" in text


def test_measured_time_counts_each_iteration(setup, xla_cell_module):
    """``--profile``: a body kernel ran once per iteration in each execution; its flops in the
    measured breakdown are one run's, as its mean time is."""
    from xla_lab.profile.breakdown import kernel_times

    _stack_cell(setup, 28)
    capture = xla_cell_module("for _ in range(2):\n    y = scan_layers(loop_layers, loop_x)\n    torch_xla.sync()",
                              "-q --profile")
    graphs = capture.profile["graphs"]
    by_graph = {s.graph_hash: s.artifacts for s in capture.steps}
    checked = 0
    for graph_hash, graph in graphs.items():
        kernels = {k["name"]: k for k in by_graph[graph_hash].fusions}
        for name, (count, _total, _longest) in graph["kernels"].items():
            runs = kernels[name]["runs"]
            assert count == graph["executions"] * runs, (name, count, graph["executions"], runs)
            checked += runs > 1
    assert checked
    for row in kernel_times(capture):
        k = {k["name"]: k for k in by_graph[row.graph_hash].fusions}[row.name]
        assert row.flops * k["runs"] == k["flops"]
