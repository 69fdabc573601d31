"""Cutting a generation's communicator: its connected TCP sockets, and nothing else."""

from __future__ import annotations

import gc
import socket

from trainguard.train import communicator


def _pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname(), timeout=5)
    server, _ = listener.accept()
    server.settimeout(5)
    return client, server


def test_cut_shuts_the_generations_connections_and_spares_the_rest() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        old_client, old_server = _pair(listener)  # opened before the generation
        generation = communicator.Communicator()
        new_listener = socket.create_server(("127.0.0.1", 0))
        new_client, new_server = _pair(new_listener)
        try:
            # the accepted socket and the client of the new pair: the listener is left alone
            assert generation.cut() == 2
            assert new_server.recv(1) == b""  # the peer sees the connection end
            old_client.sendall(b"x")
            assert old_server.recv(1) == b"x"
            late_client, late_server = _pair(new_listener)  # still accepting
            late_client.close()
            late_server.close()
        finally:
            for sock in (old_client, old_server, new_client, new_server, new_listener):
                sock.close()


def test_an_abandoned_object_is_never_destroyed() -> None:
    destroyed: list[str] = []

    class Group:
        def __del__(self) -> None:
            destroyed.append("group")

    group = Group()
    communicator.abandon(group)
    del group
    gc.collect()
    assert destroyed == []
