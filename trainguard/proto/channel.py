"""What carries encoded envelopes between a controller and an agent, in order, each way.

In one process (``trainguard run`` on one host) a pair of queues; across hosts gRPC streams
carry the same bytes. Both ends see only :class:`Channel`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Channel", "ChannelClosedError", "QueuedEnd", "in_process_pair"]


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


class QueuedEnd:
    """The sending half every channel end shares: sends queue on ``outbox`` and never block;
    a close queues its end mark (None) behind them, so everything sent is still delivered.
    Subclasses receive, and call :meth:`_peer_gone` once the other end is gone."""

    def __init__(self, outbox: asyncio.Queue[bytes | None]) -> None:
        self._outbox = outbox
        self._closed = False
        self._peer_closed = False

    def send(self, data: bytes) -> None:
        if self._closed:
            raise ChannelClosedError("this end of the channel is closed")
        self._outbox.put_nowait(data)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(None)

    def _peer_gone(self, why: str) -> ChannelClosedError:
        self._peer_closed = True
        return ChannelClosedError(why)

    def _check_peer(self) -> None:
        if self._peer_closed:
            raise ChannelClosedError("the other end closed the channel")


class _QueueEnd(QueuedEnd):
    def __init__(self, inbox: asyncio.Queue[bytes | None],
                 outbox: asyncio.Queue[bytes | None]) -> None:
        super().__init__(outbox)
        self._inbox = inbox

    async def receive(self) -> bytes:
        self._check_peer()
        data = await self._inbox.get()
        if data is None:
            raise self._peer_gone("the other end closed the channel")
        return data


def in_process_pair() -> tuple[Channel, Channel]:
    """Two connected ends: what one sends, the other receives."""
    one: asyncio.Queue[bytes | None] = asyncio.Queue()
    other: asyncio.Queue[bytes | None] = asyncio.Queue()
    return _QueueEnd(one, other), _QueueEnd(other, one)
