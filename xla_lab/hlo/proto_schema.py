"""Protobuf message classes from a few declared fields, for the readers of XLA's and the profiler's
binary formats (``proto_frames.py``, ``hlo_proto.py``, ``profile/xplane.py``): each declares just the
fields it reads, and protobuf's C parser (upb) reads them, skipping the rest. No generated code and no
.proto files of XLA are needed.

A schema maps a message name to its fields, each ``(name, number, type, label, message type or
None)``; ``type`` is one of the names in ``TYPES``, ``label`` ``ONE`` or ``MANY``. Strings are better
declared as ``bytes``: a name that is not UTF-8 then reads with replacement characters instead of
failing the whole message.
"""

from __future__ import annotations

ONE, MANY = "optional", "repeated"
TYPES = ("int64", "uint64", "double", "bool", "bytes", "message")


def message_classes(package: str, schema: dict[str, list[tuple]], names: tuple[str, ...], syntax: str = "proto3",
                    oneofs: dict[str, tuple[str, tuple[str, ...]]] | None = None) -> dict[str, type]:
    """The classes of the messages ``names`` of ``schema``, in a descriptor pool of their own (nothing
    clashes with other users of protobuf). ``oneofs``: message -> (oneof name, its fields)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    kind = descriptor_pb2.FieldDescriptorProto
    types = {"int64": kind.TYPE_INT64, "uint64": kind.TYPE_UINT64, "double": kind.TYPE_DOUBLE,
             "bool": kind.TYPE_BOOL, "bytes": kind.TYPE_BYTES, "message": kind.TYPE_MESSAGE}
    labels = {ONE: kind.LABEL_OPTIONAL, MANY: kind.LABEL_REPEATED}
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax=syntax)
    for name, fields in schema.items():
        msg = file.message_type.add(name=name)
        oneof = (oneofs or {}).get(name)
        if oneof is not None:
            msg.oneof_decl.add(name=oneof[0])
        for field_name, number, type_, label, type_name in fields:
            f = msg.field.add(name=field_name, number=number, type=types[type_], label=labels[label])
            if oneof is not None and field_name in oneof[1]:
                f.oneof_index = 0
            if type_name:
                f.type_name = f".{package}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}")) for n in names}
