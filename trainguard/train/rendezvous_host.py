"""The rendezvous store of each generation, hosted for the agent on the address asked for.

Under torch's ``env://`` rendezvous rank 0 hosts the store (a ``TCPStore``), and the store's
server listens on every interface (``::``) whatever ``MASTER_ADDR`` says; it has no option for
the address. Given a socket that is already listening (``master_listen_fd``), it serves on that
one instead. So this process binds ``MASTER_ADDR:MASTER_PORT`` itself and hosts each
generation's store there, and every worker connects as a client
(``TORCHELASTIC_USE_AGENT_STORE=True``, as under torchrun's own agent). It is a process of its own
because the agent does not import torch, and not the standby process, which forks workers and
must stay free of threads.

Runs as ``python -m trainguard.train.rendezvous_host``; reads one JSON command per line on stdin
and answers one JSON line per command on stdout; exits when stdin closes (the agent is gone):

- ``{"op": "ready", "id"}`` -> ``{"op": "ready", "id"}`` once torch is imported.
- ``{"op": "host", "id", "address", "port"}`` -> ``{"op": "hosted", "id"}`` or
  ``{"op": "host-failed", "id", "error"}``.
- ``{"op": "release", "id", "port"}`` -> ``{"op": "released", "id"}``: the store is closed.
"""

from __future__ import annotations

import datetime
import json
import socket
import sys
from typing import Any

import torch.distributed as dist

__all__ = ["host", "main"]

_BACKLOG = 2048  # every rank of a large job connects at once


def host(address: str, port: int) -> dist.Store:
    """A store served only on ``address:port``.

    Raises:
        OSError: the address is not this host's, or the port is taken.
    """
    family, kind, protocol, _, where = socket.getaddrinfo(
        address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    listener = socket.socket(family, kind, protocol)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen(_BACKLOG)
    except OSError:
        listener.close()
        raise
    return dist.TCPStore(address, port, None, True, datetime.timedelta(minutes=30),
                         wait_for_workers=False, master_listen_fd=listener.detach())


def _answer(command: dict[str, Any], stores: dict[int, dist.Store]) -> dict[str, Any]:
    reply: dict[str, Any] = {"id": command["id"]}
    if command["op"] == "host":
        try:
            stores[int(command["port"])] = host(str(command["address"]), int(command["port"]))
        except (OSError, RuntimeError) as error:
            return dict(reply, op="host-failed", error=str(error))
        return dict(reply, op="hosted")
    if command["op"] == "release":
        stores.pop(int(command["port"]), None)  # the last reference: its server stops
        return dict(reply, op="released")
    return dict(reply, op="ready")


def main() -> None:
    stores: dict[int, dist.Store] = {}
    for line in sys.stdin:
        sys.stdout.write(json.dumps(_answer(json.loads(line), stores)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
