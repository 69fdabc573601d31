"""The training process's connection to its node agent.

The training thread never waits for the agent. :meth:`AgentLink.send` writes at once without
blocking when nothing is waiting before it, so a step mark leaves before the script moves on
(into a call that may hold the GIL for seconds, like the teardown of a process group); when the
socket is full it queues, and a sender thread writes the queue in order. Signal handlers use
:meth:`AgentLink.send_from_signal`, which only touches a reentrant queue. Only the two requests
made outside the training step (slot reservation, restore plan) wait for an answer. A reader
thread hands the agent's orders (fault injection, stop) to the session.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable

from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

__all__ = ["AgentLink", "AgentLinkError", "DetachedLink"]

logger = logging.getLogger(__name__)

_SIGNAL_POLL_SECONDS = 0.05  # how soon the sender notices a message queued by a signal handler


_ANSWERS = (messages.SlotGranted, messages.RestorePlan, messages.RequestFailed)
"""The agent's answers to this process's requests; every other message is an order (some
orders carry an id too, for the answer they want)."""


def _framed(message: messages.Message) -> bytes:
    return versioned.frame(worker_codec.encode(message))


class AgentLinkError(RuntimeError):
    """The agent cannot be reached, or did not answer a request in time."""


class AgentLink:
    def __init__(self, address: str, *, on_order: Callable[[messages.Message], None]) -> None:
        """Connect to the agent at ``address`` (``@name`` for an abstract socket).

        Raises:
            AgentLinkError: nothing listens there.
        """
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.connect(messages.socket_name(address))
        except OSError as error:
            self._socket.close()
            raise AgentLinkError(f"cannot reach the trainguard agent at {address}: {error}") \
                from error
        self._on_order = on_order
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending: collections.deque[bytes] = collections.deque()  # under _lock
        self._held = b""  # under _lock: messages sent with hold=True, not yet written
        self._in_flight = False  # the sender is writing what it took from _pending
        self._closing = False
        self._from_signals: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._replies: dict[int, messages.Message] = {}
        self._reply_ready = threading.Condition()
        self._closed = False
        self._sender = threading.Thread(target=self._send_loop, name="trainguard-sender",
                                        daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="trainguard-reader",
                                        daemon=True)
        self._sender.start()
        self._reader.start()

    def hello(self, *, rank: int, local_rank: int, generation: int) -> None:
        """Say who this process is, with the secret its agent gave it in the environment."""
        self.send(messages.Hello(rank, local_rank, os.getpid(), generation,
                                 os.environ.get(messages.WORKER_SECRET_VARIABLE, "")))

    def send(self, message: messages.Message, *, hold: bool = False) -> None:
        """Send a message without blocking; queue it if it cannot leave at once, in order.

        ``hold``: keep it until the next message (or the close) and send both at once: each
        send wakes the agent, and on a host with fewer cores than processes that wake-up
        preempts training, so a message that may wait a moment (a snapshot's commit, before
        the next step's begin mark) rides with the next one.
        """
        data = _framed(message)
        with self._lock:
            if hold:
                self._held += data
                return
            data, self._held = self._held + data, b""
            if not self._pending and not self._in_flight:
                try:
                    data = data[self._socket.send(data, socket.MSG_DONTWAIT):]
                except BlockingIOError:
                    pass
                except OSError:
                    return  # the agent is gone: there is nobody to tell
                if not data:
                    return
            self._pending.append(data)
            self._changed.notify_all()

    def send_from_signal(self, message: messages.Message) -> None:
        """Queue a message from a signal handler, which may have interrupted :meth:`send`."""
        self._from_signals.put(_framed(message))

    def send_now(self, message: messages.Message, *, timeout: float = 2.0) -> None:
        """Send a message and everything before it, waiting up to ``timeout`` seconds: for the
        moment before the process dies (an injected fault, an uncaught exception)."""
        self.send(message)
        with self._lock:
            self._changed.wait_for(lambda: not self._pending and not self._in_flight, timeout)

    @property
    def closed(self) -> bool:
        """The agent closed the connection (it is gone, or it ended this worker's session)."""
        return self._closed

    def next_request_id(self) -> int:
        return next(self._ids)

    def request(self, message: messages.Message, *, request_id: int, timeout: float
                ) -> messages.Message:
        """Send a request and wait for the answer with the same id.

        Raises:
            AgentLinkError: no answer within ``timeout`` seconds, or the agent went away.
        """
        self.send(message)
        with self._reply_ready:
            answered = self._reply_ready.wait_for(
                lambda: request_id in self._replies or self._closed, timeout)
            if not answered or request_id not in self._replies:
                raise AgentLinkError(f"the agent did not answer {message.TYPE} within {timeout} s")
            return self._replies.pop(request_id)

    def _send_loop(self) -> None:
        while True:
            with self._lock:
                self._changed.wait_for(
                    lambda: self._pending or self._closing or not self._from_signals.empty(),
                    _SIGNAL_POLL_SECONDS)
                batch = list(self._pending)
                self._pending.clear()
                while not self._from_signals.empty():
                    batch.append(self._from_signals.get_nowait())
                if not batch and self._closing:
                    return
                self._in_flight = bool(batch)
            try:
                if batch:
                    self._socket.sendall(b"".join(batch))
            except OSError as error:
                logger.debug("agent link write failed: %s", error)
            finally:
                with self._lock:
                    self._in_flight = False
                    self._changed.notify_all()

    def _read_loop(self) -> None:
        stream = self._socket.makefile("rb")
        limit = worker_codec.FRAME_LIMIT
        try:
            while (data := versioned.read_frame(stream, limit=limit)) is not None:
                message = worker_codec.decode(data)
                if isinstance(message, _ANSWERS):
                    with self._reply_ready:
                        self._replies[message.request_id] = message
                        self._reply_ready.notify_all()
                else:
                    self._on_order(message)
        except (OSError, messages.MessageError, versioned.ProtocolError) as error:
            logger.debug("agent link read stopped: %s", error)
        finally:
            with self._reply_ready:
                self._closed = True
                self._reply_ready.notify_all()

    def close(self, *, timeout: float = 5.0) -> None:
        """Send what is queued, then disconnect."""
        with self._lock:
            if self._held:
                self._pending.append(self._held)
                self._held = b""
            self._closing = True
            self._changed.notify_all()
        self._sender.join(timeout)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()


class DetachedLink:
    """Stands in for :class:`AgentLink` outside ``trainguard run``: there is no agent, so every
    message is dropped and no order ever comes."""

    closed = False

    def send(self, message: messages.Message, *, hold: bool = False) -> None:
        """Dropped: nobody listens."""

    def send_from_signal(self, message: messages.Message) -> None:
        """Dropped: nobody listens."""

    def send_now(self, message: messages.Message, *, timeout: float = 2.0) -> None:
        """Dropped: nobody listens."""

    def close(self, *, timeout: float = 5.0) -> None:
        """Nothing to disconnect."""
