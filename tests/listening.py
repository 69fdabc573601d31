"""Where this host listens: for tests of what a job exposes to the network."""

from __future__ import annotations

import psutil

__all__ = ["listening"]


def listening(port: int) -> set[str]:
    """The local addresses on which any process of this host listens on TCP ``port``."""
    found = set()
    for connection in psutil.net_connections(kind="tcp"):
        local = connection.laddr
        if connection.status == psutil.CONN_LISTEN and local and local.port == port:
            found.add(local.ip)
    return found
