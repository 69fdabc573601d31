"""The agent's side of the rendezvous host (:mod:`trainguard.train.rendezvous_host`): one store
per generation, on ``MASTER_ADDR`` only, and the previous generation's closed."""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.agent import helper_process
from trainguard.proto import helpers_pb2 as pb

__all__ = ["RendezvousError", "RendezvousStores"]


class RendezvousError(RuntimeError):
    """The generation's store cannot be hosted (the message says why)."""


class RendezvousStores:
    def __init__(self, *, address: str, env: Mapping[str, str]) -> None:
        self.address = address
        self._host = helper_process.HelperProcess(
            args=["-m", "trainguard.train.rendezvous_host"], env=env, role="rendezvous host",
            reply=pb.StoreReply)
        self._hosted: list[int] = []

    async def start(self) -> None:
        """Start the host process and wait until it can serve (it imports torch).

        Raises:
            RendezvousError: it exited first.
        """
        try:
            await self._host.call(pb.StoreRequest(ready=pb.AwaitReady()))
        except helper_process.HelperLostError as error:
            raise RendezvousError(f"the rendezvous host did not start: {error}") from error

    async def host(self, port: int) -> None:
        """Serve a new store on ``port``; the older ones stay until :meth:`keep_only`.

        Raises:
            RendezvousError: the address is not this host's, the port is taken, or the host
                process is gone.
        """
        try:
            reply = await self._host.call(pb.StoreRequest(
                host=pb.HostStore(address=self.address, port=port)))
        except helper_process.HelperLostError as error:
            raise RendezvousError(f"the rendezvous host is gone: {error}") from error
        if reply.WhichOneof("kind") != "hosted":
            raise RendezvousError(f"cannot host the rendezvous store on {self.address}:"
                                  f"{port}: {reply.host_failed}")
        self._hosted.append(port)

    async def keep_only(self, port: int) -> None:
        """Close every store but the one on ``port`` (if this host serves it): their
        generations ended, and no process of theirs may reach a store again.

        Raises:
            RendezvousError: the host process is gone.
        """
        try:
            for older in [p for p in self._hosted if p != port]:
                await self._host.call(pb.StoreRequest(release=pb.ReleaseStore(port=older)))
                self._hosted.remove(older)
        except helper_process.HelperLostError as error:
            raise RendezvousError(f"the rendezvous host is gone: {error}") from error

    async def close(self) -> None:
        await self._host.close()
