"""The capture's JSON: versioned, round-trips, stores each graph's text once, rejects bad input."""

import json

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
    result = ip.run_cell("""%%xla -q --name json_cell
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
    assert back.to_json() == text
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
    assert set(step["timings"]) == {"trace_s", "compile_s", "execute_s", "to_device_s", "from_device_s"}
    s = train_capture.steps[0]
    for attr in ("ir_text", "ir_dot", "hlo_before", "hlo_after"):
        assert isinstance(getattr(s, attr), str)


def test_unknown_fields_from_newer_writers_are_ignored(train_capture):
    data = train_capture.to_dict()
    data["steps"][0]["added_later"] = 1
    data["added_later"] = {"x": 1}
    assert CellCapture.from_dict(data) == train_capture


@pytest.mark.parametrize("bad, message", [
    ("not json", "malformed"),
    ("[]", "JSON object"),
    ('{"schema": "something/1"}', "not an xla_lab capture"),
    ('{"schema": "xla_lab.capture/99"}', "not readable"),
    ('{"schema": "xla_lab.capture/1"}', "missing the field"),
])
def test_bad_json_gets_a_clear_error(bad, message):
    with pytest.raises(CaptureFormatError, match=message):
        CellCapture.from_json(bad)


def test_bad_cache_state_is_rejected(train_capture):
    data = train_capture.to_dict()
    data["steps"][0]["cache"] = "maybe"
    with pytest.raises(CaptureFormatError, match="cache state"):
        CellCapture.from_dict(data)
