"""Call stacks read from XLA's binary HLO proto (hlo/proto_frames.py), on real torch_xla graphs."""

import inspect

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xla_lab.hlo.proto_frames import ProtoError, instruction_stacks


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _graph_proto(ip) -> tuple[bytes, int]:
    """A bare HloModuleProto of a small pending graph, and the line of this file that made its op."""
    import torch
    import torch_xla

    x = torch.ones(3, 5, device=torch_xla.device())
    y = torch.tanh(x * 2.0); line = inspect.currentframe().f_lineno  # noqa: E702
    proto = torch_xla._XLAC._get_xla_tensors_hlo_proto([y])
    torch_xla.sync()
    return proto, line


def test_stacks_of_a_real_graph_point_at_the_line_that_made_each_op(ip):
    proto, line = _graph_proto(ip)
    stacks = instruction_stacks(proto)
    assert stacks, "no instruction carried a stack (XLA_IR_DEBUG is on once xla_lab is loaded)"
    ours = [frames for frames in stacks.values()
            if any(f.file == __file__ and f.line == line and f.function == "_graph_proto" for f in frames)]
    assert ours, stacks
    # innermost frame first: the test function that called _graph_proto comes after it
    names = [f.function for f in ours[0]]
    assert names.index("_graph_proto") < names.index(
        "test_stacks_of_a_real_graph_point_at_the_line_that_made_each_op")


def test_a_dumped_hlo_proto_and_a_bare_module_give_the_same_stacks(ip):
    proto, _ = _graph_proto(ip)
    wrapped = b"\x0a" + _varint(len(proto)) + proto  # HloProto { hlo_module = 1 }, as --xla_dump_hlo_as_proto
    assert instruction_stacks(wrapped) == instruction_stacks(proto)


_GRAPH: dict = {}  # one real proto for all the examples


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_damaged_real_protos_give_stacks_or_a_proto_error(ip, data):
    if "proto" not in _GRAPH:
        _GRAPH["proto"], _ = _graph_proto(ip)
    proto = _GRAPH["proto"]
    damaged = bytearray(proto[:data.draw(st.integers(0, len(proto)), label="cut")])
    for _ in range(data.draw(st.integers(0, 4), label="flips")):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] ^= data.draw(st.integers(1, 255))
    try:
        stacks = instruction_stacks(bytes(damaged))
    except ProtoError:
        return
    assert all(isinstance(frames, list) for frames in stacks.values())
