"""The rendezvous store of each generation, hosted for the agent on the address asked for.

Under torch's ``env://`` rendezvous rank 0 hosts the store (a ``TCPStore``), and the store's
server listens on every interface (``::``) whatever ``MASTER_ADDR`` says; it has no option for
the address. Given a socket that is already listening (``master_listen_fd``), it serves on that
one instead. So this process binds ``MASTER_ADDR:MASTER_PORT`` itself and hosts each
generation's store there, and every worker connects as a client
(``TORCHELASTIC_USE_AGENT_STORE=True``, as under torchrun's own agent). It is a process of its own
because the agent does not import torch, and not the standby process, which forks workers and
must stay free of threads.

Runs as ``python -m trainguard.train.rendezvous_host``; reads ``StoreRequest`` messages on stdin
and answers each with a ``StoreReply`` on stdout (helpers.proto, length-framed); exits when stdin
closes (the agent is gone):

- ``ready`` -> ``ready`` once torch is imported.
- ``host{address, port}`` -> ``hosted`` or ``host_failed`` (why).
- ``release{port}`` -> ``released``: the store is closed.
"""

from __future__ import annotations

import datetime
import socket
import sys

import torch.distributed as dist

from trainguard.proto import helpers_pb2 as pb
from trainguard.proto import versioned

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


def _answer(request: pb.StoreRequest, stores: dict[int, dist.Store]) -> pb.StoreReply:
    kind = request.WhichOneof("kind")
    if kind == "host":
        try:
            stores[request.host.port] = host(request.host.address, request.host.port)
        except (OSError, RuntimeError) as error:
            return pb.StoreReply(host_failed=str(error))
        return pb.StoreReply(hosted=request.host)
    if kind == "release":
        stores.pop(request.release.port, None)  # the last reference: its server stops
        return pb.StoreReply(released=request.release)
    return pb.StoreReply(ready=pb.AwaitReady())


def main() -> None:
    stores: dict[int, dist.Store] = {}
    while (data := versioned.read_frame(sys.stdin.buffer)) is not None:
        reply = _answer(versioned.parse(pb.StoreRequest, data), stores)
        sys.stdout.buffer.write(versioned.frame(versioned.serialize(reply)))
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
