"""A job's spare hosts: registered, holding no ranks, each ready to take a lost host's node."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from trainguard.controller import agent_proxy
from trainguard.faults import process

__all__ = ["SparePool"]

logger = logging.getLogger(__name__)


class SparePool:
    """A job's spare hosts: agents ready (standby process started, torch imported) that hold
    no ranks until one takes a lost host's."""

    def __init__(self) -> None:
        self._hosts: list[agent_proxy.AgentProxy] = []
        self._arrived = asyncio.Event()

    def add(self, proxy: agent_proxy.AgentProxy) -> None:
        self._hosts.append(proxy)
        self._arrived.set()

    def __len__(self) -> int:
        return len(self.waiting())

    def waiting(self) -> list[agent_proxy.AgentProxy]:
        """The spares still connected."""
        return [proxy for proxy in self._hosts if proxy.gone is None]

    async def take(self, timeout: float) -> agent_proxy.AgentProxy | None:
        """The longest-waiting spare still connected; None if none came within ``timeout``
        seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._hosts = [proxy for proxy in self._hosts if proxy.gone is None]
            if self._hosts:
                return self._hosts.pop(0)
            self._arrived.clear()
            left = deadline - loop.time()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    async def place(self, node: int, *, wait: float) -> agent_proxy.AgentProxy | None:
        """The longest-waiting spare, within ``wait`` seconds, that takes node ``node``'s
        ranks; None if none did. One that refuses (it cannot write the node's checkpoints) is
        passed over and stays a spare, to be told how the job ends; one gone is dropped."""
        refused = []
        try:
            while (spare := await self.take(wait)) is not None:
                try:
                    await spare.take_ranks(node)
                except process.RecoveryError as error:
                    logger.warning("spare host %s cannot take node %d: %s", spare.host, node,
                                   error)
                    refused.append(spare)
                    continue
                except agent_proxy.AgentCommandError as error:
                    logger.warning("spare host %s is gone: %s", spare.host, error)
                    continue
                return spare
            return None
        finally:
            self._hosts.extend(refused)
