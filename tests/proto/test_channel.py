"""The in-process channel: in order each way, and a close that lets the other end read what
was sent first."""

from __future__ import annotations

import asyncio

import pytest

from trainguard.proto import channel


def test_messages_arrive_in_order_each_way_and_a_close_ends_the_reading() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        one, other = channel.in_process_pair()
        for data in (b"a", b"b", b"c"):
            one.send(data)
        other.send(b"x")
        one.close()
        received = [await asyncio.wait_for(other.receive(), 5) for _ in range(3)]
        with pytest.raises(channel.ChannelClosedError):
            await other.receive()  # everything sent was read: then the close
        with pytest.raises(channel.ChannelClosedError):
            await other.receive()  # stays closed
        with pytest.raises(channel.ChannelClosedError):
            one.send(b"late")
        return received, [await asyncio.wait_for(one.receive(), 5)]

    assert asyncio.run(scenario()) == ([b"a", b"b", b"c"], [b"x"])
