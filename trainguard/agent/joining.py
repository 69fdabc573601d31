"""How a host's agent joins a job across hosts: reach the controller (retrying, with the wait
shown), register, and learn its node rank.

The stream it opens is the agent's channel to the controller (:mod:`.controller_link` serves
it) until the job ends, or until the controller goes away: then the agent registers again
(:func:`rejoin`) with whichever of the controllers it knows leads next, while it trains on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from collections.abc import Callable

import psutil

from trainguard import names
from trainguard.proto import channel as channels
from trainguard.proto import codec, grpc_channel, grpc_security, versioned
from trainguard.proto import control_pb2 as pb

__all__ = ["ClusterSettings", "JoinRefusedError", "interface_of", "join", "local_address",
           "rejoin", "split_endpoint"]

logger = logging.getLogger(__name__)

_FIRST_RETRY = 1.0  # seconds before the first retry; doubled up to _LONGEST_RETRY
_LONGEST_RETRY = 8.0
_ANSWER_TIMEOUT = 30.0  # seconds the controller has at most to answer a registration
_REJOIN_RETRY = 0.25  # seconds between rounds of the controllers while one takes over


class JoinRefusedError(RuntimeError):
    """The controller refused this host, or could not be reached in time; the message says
    why."""


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """A job across hosts, from torchrun's multi-node flags."""

    endpoint: str
    """The controller, ``HOST:PORT`` (torchrun's --rdzv-endpoint); several, comma-separated,
    for controllers that stand by for one another (the one that leads answers)."""
    nnodes: int
    max_nodes: int | None = None
    """Hosts past ``nnodes`` up to this many are spares (torchrun's --nnodes MIN:MAX);
    None: ``nnodes``."""
    node_rank: int | None = None
    """None: the controller gives the lowest free place; at or past ``nnodes``: a spare."""
    local_addr: str | None = None
    """This host's address for the other hosts (torchrun's --local-addr); None: the one its
    route to the controller leaves from."""
    join_timeout: float = 600.0
    """Seconds to keep trying to reach the controller (torchrun's join_timeout)."""
    controller_wait: float = 60.0
    """Seconds this host trains on once the controller's stream is gone (unless a fault ends
    the generation first: nothing recovers it then); then it stops after a dying
    checkpoint."""
    node_name: str = "localhost"
    """This host's name to the controller, and the ``nodeName`` public faults name it by (a
    DNS-1123 subdomain; the command line's default is the host name, lower-cased)."""
    security: grpc_security.ClientSecurity = dataclasses.field(kw_only=True)
    """How this host proves itself to the controller, and checks it is the controller."""

    def __post_init__(self) -> None:
        for endpoint in self.endpoints:
            split_endpoint(endpoint)
        if self.nnodes < 1:
            raise ValueError(f"nnodes must be >= 1, got {self.nnodes}")
        if self.max_nodes is not None and self.max_nodes < self.nnodes:
            raise ValueError(f"nnodes MIN:MAX needs MIN <= MAX, got {self.nnodes}:"
                             f"{self.max_nodes}")
        if self.node_rank is not None and self.node_rank not in range(self.places):
            raise ValueError(f"node-rank must be 0..{self.places - 1}, got {self.node_rank}")
        if not self.join_timeout > 0:
            raise ValueError(f"join_timeout must be > 0 seconds, got {self.join_timeout}")
        if not self.controller_wait >= 0:
            raise ValueError(f"controller_wait must be >= 0 seconds, got "
                             f"{self.controller_wait}")
        names.node_name(self.node_name, what="node_name")

    @property
    def endpoints(self) -> list[str]:
        return [part.strip() for part in self.endpoint.split(",")]

    @property
    def places(self) -> int:
        """Hosts the job may have: its nodes and its spares."""
        return self.max_nodes if self.max_nodes is not None else self.nnodes


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port).

    Raises:
        ValueError: naming the endpoint.
    """
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rdzv-endpoint {endpoint!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def local_address(endpoint: str) -> str:
    """The address this host's route to ``endpoint`` leaves from (no packet is sent).

    Raises:
        OSError: no route.
    """
    host, port = split_endpoint(endpoint)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        address: str = probe.getsockname()[0]
        return address


def interface_of(address: str) -> str | None:
    """The network interface holding ``address`` on this host, if any."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address.split("%")[0] == address for entry in addresses):
            return name
    return None


async def join(settings: ClusterSettings, register: pb.Register, *,
               on_retry: Callable[[str], None]) -> tuple[grpc_channel.AgentConnection,
                                                         pb.Placement]:
    """Reach the controller and register; returns the open stream and this host's place.

    ``on_retry`` is told each failed attempt and how long until the next.

    Raises:
        JoinRefusedError: refused (the reason names both values), or not reached within
            ``join_timeout``.
    """
    return await _reach(settings, register, within=settings.join_timeout, on_retry=on_retry,
                        first_retry=_FIRST_RETRY)


async def rejoin(settings: ClusterSettings, register: pb.Register, *, within: float
                 ) -> tuple[grpc_channel.AgentConnection, pb.Placement]:
    """Register again, ``register`` saying what this host holds, with whichever controller
    leads within ``within`` seconds (asking every quarter second: a standby takes over in a
    few).

    Raises:
        JoinRefusedError: refused, or no controller answered in time.
    """
    return await _reach(settings, register, within=within, on_retry=logger.debug,
                        first_retry=_REJOIN_RETRY, longest_retry=_REJOIN_RETRY)


async def _reach(settings: ClusterSettings, register: pb.Register, *, within: float,
                 on_retry: Callable[[str], None], first_retry: float,
                 longest_retry: float = _LONGEST_RETRY
                 ) -> tuple[grpc_channel.AgentConnection, pb.Placement]:
    """One controller of ``settings.endpoints`` after another until one registers this host
    (a standby does not listen), retrying the round with a growing pause."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = first_retry
    last: ConnectionError | None = None
    while True:
        for endpoint in settings.endpoints:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                connection = await grpc_channel.connect(endpoint, timeout=min(left, 5.0),
                                                        security=settings.security)
            except ConnectionError as error:
                last = ConnectionError(f"{endpoint}: {error}")
                continue
            try:
                return connection, await _register(
                    connection.channel, register,
                    timeout=min(max(deadline - loop.time(), 1.0), _ANSWER_TIMEOUT))
            except ConnectionError as error:  # it went away as it answered: the next one
                await connection.disconnect()
                last = ConnectionError(f"{endpoint}: {error}")
                continue
            except BaseException:
                await connection.disconnect()
                raise
        left = deadline - loop.time()
        if left <= 0:
            raise JoinRefusedError(
                f"the controller at {settings.endpoint} was not reached within {within:g} s: "
                f"{last or 'no time left'}")
        wait = min(delay, left)
        on_retry(f"{last}; retrying in {wait:.1f} s (giving up in {left:.0f} s)")
        await asyncio.sleep(wait)
        delay = min(delay * 2, longest_retry)


async def _register(channel: channels.Channel, register: pb.Register, *,
                    timeout: float) -> pb.Placement:
    """This host's place, as the controller at the other end of ``channel`` gives it.

    Raises:
        JoinRefusedError: it refused, or answered in another protocol.
        ConnectionError: it went away or fell silent before it answered (a controller dying
            as another takes over): another may answer.
    """
    channel.send(versioned.serialize(pb.Envelope(register=register)))
    try:
        async with asyncio.timeout(timeout):
            envelope = codec.unpack(await channel.receive())
    except TimeoutError:
        raise ConnectionError(
            f"the controller did not answer the registration within {timeout:g} s") from None
    except channels.ChannelClosedError as error:
        raise ConnectionError(f"the controller closed the registration: {error}") from error
    except versioned.ProtocolError as error:
        raise JoinRefusedError(f"the controller answered the registration in another "
                               f"protocol: {error}") from error
    if envelope.WhichOneof("body") != "registered":
        raise JoinRefusedError(f"the controller answered the registration with a "
                               f"{envelope.WhichOneof('body')}")
    answer = envelope.registered
    if answer.WhichOneof("result") == "refused":
        raise JoinRefusedError(f"the controller refused this host: {answer.refused.reason}")
    return answer.placement
