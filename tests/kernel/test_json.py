"""The capture's JSON: versioned, round-trips, stores each graph's text once, rejects bad input."""

import json
import os

import pytest

import xla_lab
from xla_lab import CaptureFormatError, CellCapture


@pytest.fixture(scope="module")
def train_capture(ip):
    ip.run_cell("""
import torch, torch_xla
torch.manual_seed(1)
jnet = torch.nn.Sequential(torch.nn.Linear(13, 21), torch.nn.ReLU(), torch.nn.Linear(21, 2)).to(torch_xla.device())
jopt = torch.optim.Adam(jnet.parameters())
jx = torch.randn(5, 13).to(torch_xla.device())
""")
    result = ip.run_cell("""%%xla -q --name json_cell --profile
for _ in range(4):
    jopt.zero_grad()
    jl = jnet(jx).pow(2).mean()
    jl.backward()
    jopt.step()
    torch_xla.sync()
print(jl)
""")
    assert result.success
    return xla_lab.last()


def test_round_trip_is_lossless(train_capture):
    c = train_capture
    text = c.to_json()
    back = CellCapture.from_json(text)
    assert back == c
    assert json.loads(back.to_json()) == json.loads(text)  # (a section's keys come back in its type's order)
    assert json.loads(text)["schema"] == xla_lab.SCHEMA == "xla_lab.capture/1"
    # Shared artifacts stay shared after loading.
    assert back.steps[2].artifacts is back.steps[3].artifacts
    assert back.steps[1].hlo_after == c.steps[1].hlo_after
    assert back.steps[0].ir_dot == c.steps[0].ir_dot


def test_step_records_carry_the_public_fields(train_capture):
    step = train_capture.to_dict()["steps"][0]
    for key in ("index", "graph_name", "graph_hash", "cache", "sync_cause", "ir_nodes", "timings",
                "fallback_ops"):
        assert key in step
    assert set(step["timings"]) == {"trace_s", "compile_s", "execute_s", "to_device_s", "from_device_s",
                                    "execution_wait_s"}
    s = train_capture.steps[0]
    for attr in ("ir_text", "ir_dot", "hlo_before", "hlo_after"):
        assert isinstance(getattr(s, attr), str)


def test_unknown_fields_from_newer_writers_are_ignored(train_capture):
    data = train_capture.to_dict()
    data["steps"][0]["added_later"] = 1
    data["added_later"] = {"x": 1}
    assert CellCapture.from_dict(data) == train_capture


def test_a_step_with_a_bad_cache_state_is_left_out_and_said(train_capture):
    data = train_capture.to_dict()
    data["steps"][0]["cache"] = "maybe"
    back = CellCapture.from_dict(data)
    assert len(back.steps) == len(train_capture.steps) - 1
    assert any("left out" in n and "steps[0]" in n and "cache" in n for n in back.notes), back.notes


def _paths(node, prefix=()):
    """Every (container, key) in a JSON tree, to mutate one of them."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield node, k
            yield from _paths(v)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield node, i
            yield from _paths(v)


JUNK = [None, 0, -1, 3.5, True, "", "<img src=x onerror=alert(1)>", [], {}, [1, "x"], {"a": None}, 10**30]


def test_fuzzed_captures_load_or_fail_with_a_clear_error(train_capture):
    """Hostile or broken JSON (a real profiled capture, mutated): loading either gives a capture every
    renderer draws (summary text and HTML, the static panel, the report, the panel model, the profile
    breakdown), or raises CaptureFormatError naming the problem; never another exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from xla_lab.profile import breakdown
    from xla_lab.view.panel_model import panel_model
    from xla_lab.view.static_html import capture_html, report_html
    from xla_lab.view.report import to_html, to_text

    base = json.dumps(train_capture.to_dict())
    count = sum(1 for _ in _paths(json.loads(base)))

    @settings(max_examples=int(os.environ.get("XLA_LAB_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.integers(0, count - 1), st.sampled_from(JUNK + ["<delete>"])), min_size=1, max_size=4))
    def check(mutations):
        data = json.loads(base)
        for index, junk in mutations:
            paths = list(_paths(data))
            if not paths:
                break
            container, key = paths[index % len(paths)]
            if junk == "<delete>":
                del container[key]
            else:
                container[key] = json.loads(json.dumps(junk))  # a fresh copy: no cycles
        try:
            capture = CellCapture.from_dict(data)
        except CaptureFormatError as exc:
            assert str(exc)
            return
        to_text(capture)  # renders without raising
        for page in (to_html(capture), capture_html(capture), report_html([capture])):
            assert "<img src=x" not in page  # user text is escaped wherever it lands
        json.dumps(panel_model(capture, [train_capture]))
        if capture.profile:
            kernels = breakdown.kernel_times(capture)
            breakdown.line_times(capture, model=True, kernels=kernels)
            breakdown.op_times(capture, kernels)

    check()


def test_unreadable_numbers_and_deep_nesting_are_format_errors(train_capture):
    text = train_capture.to_json()
    huge = text.replace('"started_at": ', '"started_at": ' + "9" * 5000 + ", \"x\": ", 1)
    with pytest.raises(CaptureFormatError, match="not readable"):
        CellCapture.from_json(huge)
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(CaptureFormatError):
        CellCapture.from_json(deep)
    nested = json.loads(text)
    nested["notes"] = ["x"]
    value: list = []
    for _ in range(5000):
        value = [value]
    nested["metrics"] = {"deep": value}
    try:
        CellCapture.from_dict(nested)
    except CaptureFormatError:
        pass  # refused with a clear error, or read: never a RecursionError


def test_long_names_and_many_notes_are_clipped_in_every_view(train_capture):
    """An untrusted notebook's capture with a 600,000-character name and 20,000 notes renders pages
    of bounded size, saying what was left out."""
    from xla_lab.view.static_html import capture_html
    from xla_lab.view.report import to_html, to_text

    data = train_capture.to_dict()
    data["graph_name"] = "n" * 600_000
    data["notes"] = [f"note {i} " + "x" * 50 for i in range(20_000)]
    capture = CellCapture.from_dict(data)
    for page in (to_text(capture), to_html(capture), capture_html(capture)):
        assert len(page) < 400_000, len(page)
        assert "more (xla_lab.last().notes has them all)" in page
    assert "more characters" in to_text(capture)
