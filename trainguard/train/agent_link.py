"""The training process's connection to its node agent.

The training thread never waits for the agent: :meth:`AgentLink.send` only queues, and a sender
thread writes queued messages in batches. Only the two requests made outside the training step
(slot reservation, restore plan) wait for an answer. A reader thread hands the agent's orders
(fault injection, stop) to the session.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import socket
import threading
from collections.abc import Callable

from trainguard.ipc import messages

__all__ = ["AgentLink", "AgentLinkError"]

logger = logging.getLogger(__name__)


class AgentLinkError(RuntimeError):
    """The agent cannot be reached, or did not answer a request in time."""


class AgentLink:
    def __init__(self, address: str, *, on_order: Callable[[messages.Message], None]) -> None:
        """Connect to the agent at ``address`` (``@name`` for an abstract socket).

        Raises:
            AgentLinkError: nothing listens there.
        """
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = "\0" + address[1:] if address.startswith("@") else address
        try:
            self._socket.connect(target)
        except OSError as error:
            self._socket.close()
            raise AgentLinkError(f"cannot reach the trainguard agent at {address}: {error}") \
                from error
        self._on_order = on_order
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._write_lock = threading.Lock()
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

    def send(self, message: messages.Message) -> None:
        """Queue a message; never blocks (safe in a signal handler)."""
        self._outbox.put(messages.encode(message))

    def send_now(self, message: messages.Message) -> None:
        """Write a message before returning: for the moment before an injected fault."""
        self._write(messages.encode(message))

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

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self._socket.sendall(data)
            except OSError as error:
                logger.debug("agent link write failed: %s", error)

    def _send_loop(self) -> None:
        while True:
            item = self._outbox.get()
            batch = []
            while item is not None:
                batch.append(item)
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(b"".join(batch))
            if item is None:
                return

    def _read_loop(self) -> None:
        stream = self._socket.makefile("rb")
        try:
            for line in stream:
                message = messages.decode(line)
                request_id = getattr(message, "request_id", None)
                if request_id is not None:
                    with self._reply_ready:
                        self._replies[request_id] = message
                        self._reply_ready.notify_all()
                else:
                    self._on_order(message)
        except (OSError, messages.MessageError) as error:
            logger.debug("agent link read stopped: %s", error)
        finally:
            with self._reply_ready:
                self._closed = True
                self._reply_ready.notify_all()

    def close(self, *, timeout: float = 5.0) -> None:
        """Send what is queued, then disconnect."""
        self._outbox.put(None)
        self._sender.join(timeout)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
