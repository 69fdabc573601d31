"""What carries encoded envelopes between a controller and an agent, in order, each way.

In one process (``trainguard run`` on one host) a pair of queues; across hosts gRPC streams
carry the same bytes. Both ends see only :class:`Channel`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Channel", "ChannelClosedError", "in_process_pair"]


class ChannelClosedError(ConnectionError):
    """The other end is gone: nothing more will arrive, nothing sent will be read."""


class Channel(Protocol):
    def send(self, data: bytes) -> None:
        """Queue ``data`` for the other end; never blocks.

        Raises:
            ChannelClosedError: the channel is closed.
        """
        ...

    async def receive(self) -> bytes:
        """The next message from the other end.

        Raises:
            ChannelClosedError: the other end closed the channel, and everything it sent was read.
        """
        ...

    def close(self) -> None:
        """No more sends from this end; the other end reads what was sent, then closed."""
        ...


class _QueueEnd:
    _CLOSED = None

    def __init__(self, inbox: asyncio.Queue[bytes | None],
                 outbox: asyncio.Queue[bytes | None]) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self._closed = False
        self._peer_closed = False

    def send(self, data: bytes) -> None:
        if self._closed:
            raise ChannelClosedError("this end of the channel is closed")
        self._outbox.put_nowait(data)

    async def receive(self) -> bytes:
        if self._peer_closed:
            raise ChannelClosedError("the other end closed the channel")
        data = await self._inbox.get()
        if data is None:
            self._peer_closed = True
            raise ChannelClosedError("the other end closed the channel")
        return data

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(self._CLOSED)


def in_process_pair() -> tuple[Channel, Channel]:
    """Two connected ends: what one sends, the other receives."""
    one: asyncio.Queue[bytes | None] = asyncio.Queue()
    other: asyncio.Queue[bytes | None] = asyncio.Queue()
    return _QueueEnd(one, other), _QueueEnd(other, one)
