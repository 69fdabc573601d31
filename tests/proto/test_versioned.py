"""Framing on a byte stream and the version every helper message carries."""

from __future__ import annotations

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
