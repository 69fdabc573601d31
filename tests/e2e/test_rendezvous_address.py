"""End to end: the rendezvous store listens only on ``--master-addr``, in every generation."""

from __future__ import annotations

import contextlib
import socket

import psutil
import pytest

from tests.e2e.jobs import SCRIPTS, Start
from tests.listening import listening

pytestmark = pytest.mark.e2e


def other_addresses() -> list[str]:
    """This host's addresses that are not loopback, where another host would connect."""
    return [address.address for addresses in psutil.net_if_addrs().values()
            for address in addresses
            if address.family in (socket.AF_INET, socket.AF_INET6)
            and not address.address.startswith(("127.", "::1", "fe80"))]


def reachable(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=5):
        return True
    return False


def test_the_store_listens_only_on_the_master_address_in_every_generation(
        run_job: Start) -> None:
    job = run_job("--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--max-restarts", "1",
                  "--inject", "crash:1:10", str(SCRIPTS / "session_job.py"), "--steps", "200",
                  "--step-sleep", "0.05", run_id="bound")
    for generation in (1, 2):
        started = job.wait_for_event("generation-started", generation)[-1]
        port = started["master_port"]
        addresses = job.wait_for(f"generation {generation}'s store listening", lambda: listening(
            port))  # noqa: B023 - called before the next iteration
        assert addresses == {"127.0.0.1"}
        assert reachable("127.0.0.1", port)
        for other in other_addresses():
            assert not reachable(other, port), f"the store answers on {other}:{port}"
    assert job.wait() == 0, job.output()
