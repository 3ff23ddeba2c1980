"""XLA's binary HLO proto (hlo/proto_frames.py) on malformed and hostile bytes (call stacks of real
torch_xla graphs are in tests/kernel/test_proto_frames.py)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_lab.hlo.proto_frames import ProtoError, instruction_stacks


def test_malformed_protos_are_rejected_with_a_clear_error():
    for data, says in [(b"", "no HLO module"), (b"\xff\xff\xff", "not a valid protobuf"),
                       (b"\x0a\x05abc", "not a valid protobuf")]:
        try:
            instruction_stacks(data)
        except ProtoError as exc:
            assert says in str(exc)
        else:
            raise AssertionError(f"{data!r} was accepted")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_hostile_bytes_give_stacks_or_a_proto_error(data):
    try:
        stacks = instruction_stacks(data)
    except ProtoError:
        return
    assert all(isinstance(name, str) and isinstance(frames, list) for name, frames in stacks.items())
