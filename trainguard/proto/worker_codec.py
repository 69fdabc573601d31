"""The worker protocol (``worker.proto``): the messages of :mod:`trainguard.ipc.messages` to
their envelope's bytes and back.

One conversion for every message, field by field by name: each message class has a proto
message of the same name and the same fields, carried in the envelope's ``body`` field named
``cls.TYPE``. A list is a repeated field; a field the Python side allows to be None is a proto3
``optional`` one, unset for None. An enum travels as its value (our enums are string enums,
whose members protobuf takes as the strings they are) and comes back as its member, or is
refused naming the field.

The bytes of one envelope are not framed: the transport puts each in a frame
(:func:`trainguard.proto.versioned.frame`) and reads frames of at most :data:`FRAME_LIMIT`
bytes (``versioned.read_frame``, ``read_frame_async``).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

from trainguard.ipc import messages
from trainguard.proto import versioned
from trainguard.proto import worker_pb2 as pb

__all__ = ["FRAME_LIMIT", "decode", "encode"]

FRAME_LIMIT = 1 << 20
"""The longest message either end reads, in bytes: a longer one ends the connection. The
longest sent, a restore plan, holds a path or two per rank of its host: some kilobytes."""


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    members: type[enum.Enum] | None  # the field's enum, whose values travel
    optional: bool  # None in Python, unset in the proto (proto3 optional)
    repeated: bool


def _fields(cls: type[messages.Message]) -> tuple[_Field, ...]:
    """How each field of ``cls`` converts, from its type and from the proto message's field of
    the same name."""
    proto = getattr(pb, cls.__name__).DESCRIPTOR.fields_by_name
    hints = typing.get_type_hints(cls)
    fields = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        kind = hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None
        wire = proto[field.name]
        fields.append(_Field(field.name, kind, wire.has_presence, wire.is_repeated))
    return tuple(fields)


def _bodies() -> dict[str, tuple[type[messages.Message], tuple[_Field, ...]]]:
    """By the envelope's body field: its message class (named as its proto message) and how
    its fields convert."""
    bodies = {}
    for body in pb.Envelope.DESCRIPTOR.oneofs_by_name["body"].fields:
        assert body.message_type is not None  # every field of the body is a message
        cls = getattr(messages, body.message_type.name)
        bodies[body.name] = (cls, _fields(cls))
    return bodies


# Worked out once: resolving the annotations costs far more than converting a message, and the
# agent decodes several per rank and step.
_BY_NAME = _bodies()
_BY_CLASS = {cls: (name, fields) for name, (cls, fields) in _BY_NAME.items()}


def encode(message: messages.Message) -> bytes:
    """The message's envelope, stamped with this end's protocol version (not framed).

    Raises:
        MessageError: a value that its proto field cannot hold (an int out of its range, a
            value of another type); the error names the field.
    """
    name, fields = _BY_CLASS[type(message)]
    envelope = pb.Envelope()
    body = getattr(envelope, name)
    body.SetInParent()  # the body is there even when all its fields are defaults
    for field in fields:
        value = getattr(message, field.name)
        try:
            if field.repeated:
                getattr(body, field.name).extend(value)
            elif value is not None or not field.optional:
                setattr(body, field.name, value)
        except (TypeError, ValueError) as error:
            raise messages.MessageError(f"{name}: field {field.name!r} is {value!r}: {error}",
                                        field=field.name) from error
    return versioned.serialize(envelope)


def decode(data: bytes) -> messages.Message:
    """The message in an envelope's bytes (unframed).

    Raises:
        MessageError: not an envelope, one of another protocol version, one without a body
            this end knows, or a value its message refuses (an enum's unknown value); the
            error names the field, if one.
    """
    try:
        envelope = versioned.parse(pb.Envelope, data)
    except versioned.ProtocolError as error:
        raise messages.MessageError(str(error)) from error
    name = envelope.WhichOneof("body")
    if name is None:
        raise messages.MessageError("a message without a body this end knows (a newer peer's?)",
                                    field="body")
    cls, fields = _BY_NAME[name]
    body = getattr(envelope, name)
    values: dict[str, Any] = {}
    for field in fields:
        if field.optional and not body.HasField(field.name):
            values[field.name] = None
        elif field.repeated:
            values[field.name] = list(getattr(body, field.name))
        elif field.members is not None:
            values[field.name] = _member(name, field.name, field.members,
                                         getattr(body, field.name))
        else:
            values[field.name] = getattr(body, field.name)
    return cls(**values)


def _member(message: str, field: str, kind: type[enum.Enum], value: object) -> enum.Enum:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(member.value) for member in kind)
        raise messages.MessageError(
            f"{message}: field {field!r} is {value!r}, expected one of {allowed}", field=field
        ) from None
