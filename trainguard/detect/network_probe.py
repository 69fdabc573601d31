"""The probes of a training interface: its link state, its gateway, and an ICMP echo to it.

Link state is read from ``/sys/class/net/<interface>/operstate`` and ``carrier``, polled (not
netlink): two small reads per interface, cheap at the detector's 0.2 s, and no socket to keep
subscribed. A link is up when ``operstate`` is ``up`` (or ``unknown``, which drivers without
operstate support report) and ``carrier`` is 1; reading ``carrier`` of an interface that is
administratively down fails with EINVAL, which counts as down.

The gateway is the one of the interface's default route in ``/proc/net/route``, else of its
first route through a gateway.

The echo uses an unprivileged ICMP datagram socket where ``net.ipv4.ping_group_range`` admits
the process's group, else a raw socket (root or CAP_NET_RAW). It is bound to the interface
(SO_BINDTODEVICE) where that is permitted; where not, the route to the gateway decides, which is
the interface itself for its own gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import itertools
import os
import socket
import struct
from pathlib import Path

__all__ = ["IcmpPinger", "ProbeError", "ProbeUnavailableError", "gateway_of", "link_up"]

_ECHO_REQUEST, _ECHO_REPLY = 8, 0
_ROUTE_GATEWAY_FLAG = 0x2


class ProbeError(Exception):
    """The gateway did not answer, or the echo could not be sent: a network fault."""


class ProbeUnavailableError(Exception):
    """This process may not probe at all (no ICMP socket permitted): not a network fault."""


def link_up(interface: str, *, sys_class_net: Path = Path("/sys/class/net")) -> bool:
    """Whether the interface's link is up.

    Raises:
        FileNotFoundError: no interface of that name.
    """
    directory = sys_class_net / interface
    operstate = (directory / "operstate").read_text().strip()
    if operstate not in ("up", "unknown"):
        return False
    try:
        return (directory / "carrier").read_text().strip() == "1"
    except OSError as error:
        if error.errno == errno.EINVAL:  # administratively down
            return False
        raise


def gateway_of(interface: str, route_table: str) -> str | None:
    """The interface's gateway from the text of ``/proc/net/route``; None when it has none.

    Raises:
        ValueError: a line of the table that is not a route (the message names the line).
    """
    default: str | None = None
    first: str | None = None
    for number, line in enumerate(route_table.splitlines()[1:], start=2):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 4:
            raise ValueError(f"/proc/net/route line {number}: {len(fields)} fields, expected "
                             "at least 4 (Iface Destination Gateway Flags)")
        name, destination, gateway, flags = fields[:4]
        if name != interface:
            continue
        try:
            flag_bits = int(flags, 16)
            address = str(ipaddress.IPv4Address(struct.pack("<I", int(gateway, 16))))
            is_default = int(destination, 16) == 0
        except ValueError:
            raise ValueError(f"/proc/net/route line {number}: {line.strip()!r} is not a "
                             "route (hexadecimal destination, gateway and flags)") from None
        if not flag_bits & _ROUTE_GATEWAY_FLAG:
            continue
        if is_default and default is None:
            default = address
        if first is None:
            first = address
    return default or first


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo_request(identifier: int, sequence: int) -> bytes:
    payload = b"trainguard"
    header = struct.pack("!BBHHH", _ECHO_REQUEST, 0, 0, identifier, sequence)
    checksum = _checksum(header + payload)
    return struct.pack("!BBHHH", _ECHO_REQUEST, 0, checksum, identifier, sequence) + payload


class IcmpPinger:
    """Sends one echo request to a gateway through an interface and waits for its reply."""

    def __init__(self) -> None:
        self._raw: bool | None = None  # which socket kind works; None until one was opened
        self._sequence = itertools.count(1)
        self._identifier = os.getpid() & 0xFFFF

    @property
    def kind(self) -> str:
        return {None: "not opened yet", False: "an unprivileged ICMP datagram socket",
                True: "a raw ICMP socket"}[self._raw]

    def _open(self) -> socket.socket:
        kinds = [self._raw] if self._raw is not None else [False, True]
        for raw in kinds:
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW if raw else socket.SOCK_DGRAM,
                                     socket.IPPROTO_ICMP)
            except PermissionError:
                continue
            self._raw = raw
            return sock
        raise ProbeUnavailableError(
            "cannot probe gateways: neither an unprivileged ICMP socket (its group must be in "
            "sysctl net.ipv4.ping_group_range) nor a raw socket (root or CAP_NET_RAW) is "
            "permitted to this process")

    async def __call__(self, interface: str, gateway: str, *, timeout: float) -> None:
        """Return when ``gateway`` answered within ``timeout`` seconds.

        Raises:
            ProbeError: no answer in time, or the request could not be sent.
            ProbeUnavailableError: no ICMP socket is permitted.
        """
        loop = asyncio.get_running_loop()
        with self._open() as sock:
            sock.setblocking(False)
            with contextlib.suppress(PermissionError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
            sequence = next(self._sequence) & 0xFFFF
            try:
                await loop.sock_sendto(sock, _echo_request(self._identifier, sequence),
                                       (gateway, 0))
                await asyncio.wait_for(self._reply(sock, gateway, sequence), timeout)
            except TimeoutError:
                raise ProbeError(f"no echo reply from gateway {gateway} within {timeout:g} s"
                                 ) from None
            except OSError as error:
                raise ProbeError(f"echo request to gateway {gateway} failed: "
                                 f"{error.strerror or error}") from None

    async def _reply(self, sock: socket.socket, gateway: str, sequence: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data, (source, _) = await loop.sock_recvfrom(sock, 2048)
            if self._raw:  # a raw socket sees the IP header, and every ICMP packet
                data = data[(data[0] & 0x0F) * 4:]
            if len(data) < 8 or source != gateway:
                continue
            kind, _, _, identifier, replied = struct.unpack("!BBHHH", data[:8])
            # a datagram socket's identifier is chosen by the kernel, and only its replies come
            if kind == _ECHO_REPLY and replied == sequence and (
                    not self._raw or identifier == self._identifier):
                return
