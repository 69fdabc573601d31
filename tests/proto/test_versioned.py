"""Framing on a byte stream and the version every helper message carries."""

from __future__ import annotations

import asyncio
import io

import pytest

from trainguard.proto import helpers_pb2 as pb
from trainguard.proto import versioned


def test_frames_come_back_one_by_one_until_the_end() -> None:
    messages = [versioned.serialize(pb.StoreRequest(host=pb.HostStore(address="::1", port=p)))
                for p in (1, 65535)]
    stream = io.BytesIO(b"".join(versioned.frame(m) for m in [*messages, b""]))
    read = [versioned.read_frame(stream) for _ in range(4)]
    assert read == [*messages, b"", None]
    assert versioned.parse(pb.StoreRequest, messages[1]).host.port == 65535


@pytest.mark.parametrize(("data", "why"), [
    (b"\x05\x00", "inside a message's length"),
    (b"\x05\x00\x00\x00abc", "ended 2 bytes before its message's end"),
])
def test_a_stream_cut_inside_a_message_is_named(data: bytes, why: str) -> None:
    with pytest.raises(versioned.ProtocolError, match=why):
        versioned.read_frame(io.BytesIO(data))


def test_a_helper_message_of_another_version_is_refused() -> None:
    data = pb.PersisterReply(version=versioned.PROTOCOL_VERSION + 1,
                             hashed=pb.Hashed()).SerializeToString()
    with pytest.raises(versioned.ProtocolError, match="PersisterReply of protocol version 2"):
        versioned.parse(pb.PersisterReply, data)


def test_a_frame_longer_than_the_limit_is_refused_unread() -> None:
    stream = io.BytesIO(versioned.frame(b"12345") + versioned.frame(b"1234"))
    with pytest.raises(versioned.ProtocolError,
                       match=r"^a message of 5 bytes, over the limit of 4$"):
        versioned.read_frame(stream, limit=4)
    assert stream.tell() == versioned.LENGTH_SIZE  # only its length was read
    assert versioned.read_frame(io.BytesIO(versioned.frame(b"1234")), limit=4) == b"1234"


def _read_async(data: bytes, *, count: int, limit: int | None = None) -> list[bytes | None]:
    async def read() -> list[bytes | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await versioned.read_frame_async(reader, limit=limit) for _ in range(count)]
    return asyncio.run(read())


def test_frames_come_back_one_by_one_from_an_asyncio_stream_until_the_end() -> None:
    frames = [b"first", b"", b"x" * 70000]
    assert _read_async(b"".join(versioned.frame(f) for f in frames), count=4) == [*frames, None]


@pytest.mark.parametrize(("data", "limit", "why"), [
    (b"\x05\x00", None, r"^the stream ended inside a message's length$"),
    (b"\x05\x00\x00\x00abc", None, r"^the stream ended 2 bytes before its message's end$"),
    (versioned.frame(b"12345"), 4, r"^a message of 5 bytes, over the limit of 4$"),
])
def test_an_asyncio_stream_cut_inside_a_message_or_too_long_a_one_is_named(
        data: bytes, limit: int | None, why: str) -> None:
    with pytest.raises(versioned.ProtocolError, match=why):
        _read_async(data, count=1, limit=limit)
