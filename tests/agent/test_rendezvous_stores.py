"""The rendezvous host as a real process: one store per generation, on the address asked for."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from tests.listening import listening
from trainguard.agent import node_agent, rendezvous_stores

CALL_TIMEOUT = 120.0  # the host imports torch first


def test_each_store_listens_on_the_address_only_and_the_older_one_closes_when_told() -> None:
    async def scenario() -> tuple[set[str], set[str], set[str], set[str]]:
        stores = rendezvous_stores.RendezvousStores(address="127.0.0.1", env=os.environ)
        try:
            await asyncio.wait_for(stores.start(), CALL_TIMEOUT)
            first, second = node_agent.free_port("127.0.0.1"), node_agent.free_port("127.0.0.1")
            await asyncio.wait_for(stores.host(first), CALL_TIMEOUT)
            while_first = listening(first)
            await asyncio.wait_for(stores.host(second), CALL_TIMEOUT)
            both = listening(first)
            await asyncio.wait_for(stores.keep_only(second), CALL_TIMEOUT)
            return while_first, both, listening(first), listening(second)
        finally:
            await stores.close()

    while_first, both, first_after, second = asyncio.run(scenario())
    assert while_first == both == second == {"127.0.0.1"}, (
        "a new store must not close the older one before the generation is entered")
    assert first_after == set(), "the previous generation's store must close"


def test_a_taken_port_is_an_error_naming_address_and_port() -> None:
    async def scenario(port: int) -> None:
        stores = rendezvous_stores.RendezvousStores(address="127.0.0.1", env=os.environ)
        try:
            await asyncio.wait_for(stores.host(port), CALL_TIMEOUT)
        finally:
            await stores.close()

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(rendezvous_stores.RendezvousError,
                           match=f"cannot host the rendezvous store on 127.0.0.1:{port}: "
                                 ".*Address already in use"):
            asyncio.run(scenario(port))
