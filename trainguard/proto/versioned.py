"""What every message of our protocols shares: the protocol version it was written in, and
the framing of a message on a byte stream.

Each top-level message (control.proto's and worker.proto's Envelope, helpers.proto's requests
and replies) has a ``version`` field; a reader refuses another version rather than guess at it.
Kept apart from the codecs so that a helper process (the standby process must start fast)
imports only this and its own generated messages.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from google.protobuf.message import Message

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "LENGTH_SIZE",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "frame",
    "frame_length",
    "parse",
    "read_frame",
    "read_frame_async",
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


def read_frame(stream: BinaryIO, *, limit: int | None = None) -> bytes | None:
    """The next framed message from a blocking stream; None at its end.

    Raises:
        ProtocolError: the stream ended inside a message, or the message is longer than
            ``limit`` bytes (then it is not read).
    """
    prefix = stream.read(LENGTH_SIZE)
    if not prefix:
        return None
    if len(prefix) < LENGTH_SIZE:
        raise ProtocolError("the stream ended inside a message's length")
    length = _checked_length(prefix, limit)
    data = stream.read(length)
    if len(data) < length:
        raise ProtocolError(f"the stream ended {length - len(data)} bytes before its message's end")
    return data


async def read_frame_async(reader: asyncio.StreamReader, *, limit: int | None = None
                           ) -> bytes | None:
    """:func:`read_frame` on an asyncio stream.

    Raises:
        ProtocolError: as :func:`read_frame`.
    """
    # Imported here: whoever awaits this runs a loop and has asyncio loaded already, and at
    # the top it would slow down the start of the standby process, which imports this module.
    import asyncio  # noqa: PLC0415

    try:
        prefix = await reader.readexactly(LENGTH_SIZE)
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            return None
        raise ProtocolError("the stream ended inside a message's length") from error
    length = _checked_length(prefix, limit)
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as error:
        raise ProtocolError(f"the stream ended {length - len(error.partial)} bytes before its "
                            "message's end") from error


def _checked_length(prefix: bytes, limit: int | None) -> int:
    length = frame_length(prefix)
    if limit is not None and length > limit:
        raise ProtocolError(f"a message of {length} bytes, over the limit of {limit}")
    return length
