"""An agent for sessions under test: grants slots as files, plans restores (fresh starts unless
told otherwise), sends orders, and collects what arrives."""

from __future__ import annotations

import dataclasses
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

__all__ = ["FakeAgent"]


class FakeAgent:
    """Grants slots as files, plans restores, sends orders, and collects what arrives."""

    def __init__(self, directory: Path) -> None:
        self.address = f"@trainguard-test-{uuid.uuid4().hex}"
        self._directory = directory
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind("\0" + self.address[1:])
        self._listener.listen(1)
        self.received: list[messages.Message] = []
        # Orders sent in answer to the hello, before any other answer (as the agent does).
        self.greeting: list[messages.Message] = []
        # The plan each RestorePlanRequest gets, under its request id: a fresh start.
        self.plan = messages.RestorePlan(0, messages.RestoreSource.NONE, 0, "", 0, ["", ""], "")
        self.arrived = threading.Condition()
        self.connection: socket.socket | None = None
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.connection, _ = self._listener.accept()
        self._connected.set()
        incoming = self.connection.makefile("rb")
        while (data := versioned.read_frame(incoming)) is not None:
            message = worker_codec.decode(data)
            with self.arrived:
                self.received.append(message)
                self.arrived.notify_all()
            if isinstance(message, messages.Hello):
                for order in self.greeting:
                    self._send(order)
            elif isinstance(message, messages.ReserveSlot):
                path = self._directory / f"slot-{message.slot}"
                with path.open("wb") as stream:
                    stream.truncate(message.nbytes)
                self._send(messages.SlotGranted(message.request_id, message.slot, str(path),
                                                message.nbytes))
            elif isinstance(message, messages.RestorePlanRequest):
                self._send(dataclasses.replace(self.plan, request_id=message.request_id))

    def order(self, message: messages.Message) -> None:
        assert self._connected.wait(10)
        assert self.connection is not None
        self._send(message)

    def _send(self, message: messages.Message) -> None:
        assert self.connection is not None
        self.connection.sendall(versioned.frame(worker_codec.encode(message)))

    def wait_for(self, done: int | Callable[[list[messages.Message]], object]
                 ) -> list[messages.Message]:
        """Until ``done`` (a count of messages, or a test of them) holds; what arrived."""
        test = done if callable(done) else lambda received: len(received) >= done
        with self.arrived:
            assert self.arrived.wait_for(lambda: test(self.received), 10), self.received
            return list(self.received)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self._listener.close()
