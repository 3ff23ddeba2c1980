"""The capture's JSON, without a capture: malformed or foreign text gets a clear error (round trips
and the fuzzing of a real capture are in tests/kernel/test_json.py)."""

import pytest

from xla_lab import CaptureFormatError, CellCapture


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
