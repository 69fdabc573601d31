"""A real link to a gateway for tests and benchmarks of the network-plane detector: a veth pair
from this namespace to a namespace of its own that holds the gateway's address, with a route
through it (so the detector finds the gateway in ``/proc/net/route``). Needs root; everything
is removed on the way out, even after a failure."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from collections.abc import Iterator

__all__ = ["GatewayLink", "gateway_link"]


@dataclasses.dataclass(frozen=True)
class GatewayLink:
    namespace: str  # the gateway's
    ours: str  # this namespace's end of the link
    theirs: str  # the gateway's end
    gateway: str  # its address


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=10)


@contextlib.contextmanager
def gateway_link(tag: str, *, subnet: int) -> Iterator[GatewayLink]:
    """``tag``: a few letters naming the user (names carry it and the pid, so parallel users
    do not clash); ``subnet``: the second byte of 10.x addresses to use (the link's /30 in
    10.subnet.n, its route to 10.subnet+1.n.0/24)."""
    pid = os.getpid()
    link = GatewayLink(f"tg-{tag}-{pid}", f"tg{tag[0]}{pid % 100000}a",
                       f"tg{tag[0]}{pid % 100000}b", f"10.{subnet}.{pid % 250}.1")
    local = f"10.{subnet}.{pid % 250}.2"
    try:
        _ip("netns", "add", link.namespace)
        _ip("link", "add", link.ours, "type", "veth", "peer", "name", link.theirs)
        _ip("link", "set", link.theirs, "netns", link.namespace)
        _ip("addr", "add", f"{local}/30", "dev", link.ours)
        _ip("link", "set", link.ours, "up")
        _ip("-n", link.namespace, "addr", "add", f"{link.gateway}/30", "dev", link.theirs)
        _ip("-n", link.namespace, "link", "set", link.theirs, "up")
        _ip("route", "add", f"10.{subnet + 1}.{pid % 250}.0/24", "via", link.gateway, "dev",
            link.ours)
        yield link
    finally:
        _ip("netns", "del", link.namespace, check=False)
        _ip("link", "del", link.ours, check=False)
