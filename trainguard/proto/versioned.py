"""What every message of our protocols shares: the protocol version it was written in.

Each top-level message (control.proto's Envelope, helpers.proto's requests and replies) has a
``version`` field; a reader refuses another version rather than guess at it. Kept apart from
the codecs so that a helper process (the standby process must start fast) imports only this
and its own generated messages.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, TypeVar

from google.protobuf.message import Message

__all__ = [
    "LENGTH_SIZE",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "frame",
    "frame_length",
    "parse",
    "read_frame",
    "serialize",
]

M = TypeVar("M", bound=Message)

PROTOCOL_VERSION = 1
"""Raised when a message changes meaning; a peer of another version is refused, not guessed at."""


class ProtocolError(ValueError):
    """Bytes that are not a message this end can read."""


def serialize(message: Message) -> bytes:
    """The message's bytes, stamped with this end's protocol version (every top-level
    message of our protocols has a ``version`` field)."""
    message.version = PROTOCOL_VERSION  # type: ignore[attr-defined]
    return message.SerializeToString()


def parse(kind: type[M], data: bytes) -> M:
    """Raises:
        ProtocolError: not a ``kind``, or one of another protocol version.
    """
    message = kind()
    name = kind.DESCRIPTOR.name
    try:
        message.ParseFromString(data)
    except Exception as error:  # protobuf raises its DecodeError, or a RuntimeWarning's kin
        raise ProtocolError(f"unreadable {name}: {error}") from error
    version = message.version  # type: ignore[attr-defined]
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"{name} of protocol version {version}; this end speaks "
                            f"version {PROTOCOL_VERSION}")
    return message




_LENGTH = struct.Struct("<I")
LENGTH_SIZE = _LENGTH.size


def frame(data: bytes) -> bytes:
    """``data`` preceded by its length, for a byte stream (a pipe) that keeps no boundaries."""
    return _LENGTH.pack(len(data)) + data


def frame_length(prefix: bytes) -> int:
    return int(_LENGTH.unpack(prefix)[0])


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next framed message from a blocking stream; None at its end.

    Raises:
        ProtocolError: the stream ended inside a message.
    """
    prefix = stream.read(LENGTH_SIZE)
    if not prefix:
        return None
    if len(prefix) < LENGTH_SIZE:
        raise ProtocolError("the stream ended inside a message's length")
    length = frame_length(prefix)
    data = stream.read(length)
    if len(data) < length:
        raise ProtocolError(f"the stream ended {length - len(data)} bytes before its message's end")
    return data
