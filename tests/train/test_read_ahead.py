"""A restore read ahead (while the script builds its model and its process group), and what a
rank that stayed does not read back."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.fake_agent import FakeAgent
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.train import (
    agent_link,
    agent_memory,
    replica_shares,
    session,
    snapshot,
    state_backend,
)


def saved_tree() -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    return {"step": 7, "state": {"model": model.state_dict()}, "rng": {}}


def write(path: Path, tree: dict[str, object], *,
          elsewhere: dict[int, int] | None = None) -> None:
    """A snapshot of step 7 (of a share of ``tree`` with ``elsewhere``: see snapshot.prepare)."""
    prepared = snapshot.prepare(tree, elsewhere=elsewhere)
    path.write_bytes(b"\0" * prepared.nbytes)
    slot = snapshot.MappedSlot(str(path))
    slot.write(prepared, step=7, generation=1, rank=2, world_size=4)
    slot.close()


def plan_replica(agent: FakeAgent, directory: Path) -> None:
    """Rank 1 has no snapshot of step 7: it reads replica 2's whole one."""
    replica = directory / "replica"
    write(replica, saved_tree())
    agent.plan = messages.RestorePlan(0, messages.RestoreSource.REPLICA, 7, str(replica), 0,
                                      ["", ""], "", peer=2)


@pytest.fixture
def backend(agent: FakeAgent) -> Iterator[agent_memory.AgentMemoryBackend]:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=False)
    made = agent_memory.AgentMemoryBackend(link, rank=1, world_size=4, request_timeout=10.0,
                                           shares=shares, behind=False)
    yield made
    made.close()
    link.close()


def requests(agent: FakeAgent, kind: type[messages.Message]) -> list[messages.Message]:
    return [message for message in agent.received if isinstance(message, kind)]


def test_a_state_read_ahead_is_what_load_returns_and_its_whole_slot_is_reserved(
        agent: FakeAgent, backend: agent_memory.AgentMemoryBackend, tmp_path: Path) -> None:
    plan_replica(agent, tmp_path)
    backend.read_ahead()
    # Before load(): the plan asked for, and the slot of the whole snapshot that follows.
    reserved = agent.wait_for(lambda got: any(isinstance(m, messages.ReserveSlot) for m in got))
    whole = snapshot.prepare(saved_tree()).nbytes
    assert [m.nbytes for m in reserved if isinstance(m, messages.ReserveSlot)] == [whole]

    loaded = backend.load()
    assert (loaded.source, loaded.step) == ("replica", 7)
    expected = saved_tree()["state"]["model"]  # type: ignore[index]
    assert all(torch.equal(loaded.tree["state"]["model"][key], value)
               for key, value in expected.items())
    assert len(requests(agent, messages.RestorePlanRequest)) == 1

    # The whole snapshot goes into the slot reserved ahead: no second reservation.
    backend.save(loaded.tree, step=7, generation=1, started=0.0, whole=True)
    assert len(requests(agent, messages.ReserveSlot)) == 1


def test_a_state_that_comes_over_the_process_group_is_left_to_load(
        agent: FakeAgent, backend: agent_memory.AgentMemoryBackend) -> None:
    agent.plan = messages.RestorePlan(0, messages.RestoreSource.PEER, 7, "", 0, ["", ""], "",
                                      peer=2)
    backend.read_ahead()  # no process group exists yet: it plans, and reads nothing
    with pytest.raises(state_backend.StateError, match="call restore\\(\\) after "
                                                       "init_process_group"):
        backend.load()
    assert len(requests(agent, messages.RestorePlanRequest)) == 1


def test_a_read_that_fails_ahead_fails_in_load(
        agent: FakeAgent, backend: agent_memory.AgentMemoryBackend, tmp_path: Path) -> None:
    # A share of the state, whose holder's snapshot the plan does not name.
    tree = saved_tree()
    weight = tree["state"]["model"]["weight"]  # type: ignore[index]
    share = tmp_path / "share"
    write(share, tree, elsewhere={id(weight): 3})
    assert snapshot.on_host(str(share))
    agent.plan = messages.RestorePlan(0, messages.RestoreSource.MEMORY, 7, str(share), 0,
                                      ["", ""], "")
    backend.read_ahead()
    ahead = backend._finish_reading_ahead()
    assert ahead is not None
    assert ahead.error is not None, "it failed on the read-ahead thread"
    with pytest.raises(state_backend.StateError,
                       match="cannot restore from memory: no snapshot of rank 3 is at hand"):
        backend.load()


def test_a_save_before_the_restore_drops_what_was_read_ahead(
        agent: FakeAgent, backend: agent_memory.AgentMemoryBackend, tmp_path: Path) -> None:
    plan_replica(agent, tmp_path)
    backend.read_ahead()
    backend.save(saved_tree(), step=7, generation=1, started=0.0)
    assert backend.load().step == 7  # planned and read again
    assert len(requests(agent, messages.RestorePlanRequest)) == 2


class Survivor:
    """A rank that stays in its process (session.run) with 50 MB of optimizer tensors, copied
    behind, and a batch-norm buffer that the optimizer does not own."""

    def __init__(self, agent: FakeAgent) -> None:
        self.link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
        shares = replica_shares.ReplicaShares(rank=0, layout=replicas.ReplicaLayout(1, 1),
                                              enabled=False)
        self.backend = agent_memory.AgentMemoryBackend(
            self.link, rank=0, world_size=1, request_timeout=10.0, shares=shares,
            behind=True)
        torch.manual_seed(0)
        self.norm, self.linear = torch.nn.BatchNorm1d(1024), torch.nn.Linear(1024, 4096)
        self.model = torch.nn.Sequential(self.norm, self.linear)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.1)

    def step(self) -> None:
        self.model(torch.randn(8, 1024)).square().mean().backward()
        self.optimizer.step()

    def tree(self, step: int) -> dict[str, Any]:
        return {"step": step, "state": {"model": self.model.state_dict(),
                                        "optimizer": self.optimizer.state_dict()}, "rng": {}}

    def save(self, step: int) -> None:
        self.backend.save(self.tree(step), step=step, generation=0, started=0.0,
                          optimizers=[self.optimizer])
        self.backend.flush()

    def close(self) -> None:
        self.backend.close()
        self.link.close()


def plan_own_slot(agent: FakeAgent, directory: Path, *, step: int, slot: int) -> None:
    paths = [str(path) if (path := directory / f"slot-{index}").exists() else ""
             for index in range(2)]
    agent.plan = messages.RestorePlan(0, messages.RestoreSource.MEMORY, step, paths[slot],
                                      1 - slot, paths, "")


def test_a_rank_that_stayed_keeps_the_optimizers_tensors_it_still_holds(
        agent: FakeAgent, tmp_path: Path) -> None:
    survivor = Survivor(agent)
    try:
        survivor.step()
        survivor.save(1)  # slot 0
        saved = copy.deepcopy(survivor.tree(1)["state"])
        weight = survivor.linear.weight
        moment = survivor.optimizer.state[weight]["exp_avg"]
        survivor.model(torch.randn(8, 1024))  # the failed step's forward moved the statistics
        plan_own_slot(agent, tmp_path, step=1, slot=0)

        survivor.backend.read_ahead()
        state: Any = survivor.backend.load().tree["state"]
        # Parameters and moments: the live tensors themselves, not read back.
        assert state["optimizer"]["state"][2]["exp_avg"] is moment
        assert state["model"]["1.weight"].data_ptr() == weight.data_ptr()
        # The statistics, which the optimizer does not own: the snapshot's, from the slot.
        assert torch.equal(state["model"]["0.running_mean"], saved["model"]["0.running_mean"])
        live_mean = survivor.norm.running_mean
        assert live_mean is not None
        assert not torch.equal(state["model"]["0.running_mean"], live_mean)
        for key, value in saved["model"].items():
            assert torch.equal(state["model"][key], value), key

        # After an optimizer step the live tensors are another step's: all read from the slot.
        survivor.save(1)  # slot 1: the newest is again step 1
        survivor.step()
        plan_own_slot(agent, tmp_path, step=1, slot=1)
        state = survivor.backend.load().tree["state"]
        assert state["optimizer"]["state"][2]["exp_avg"] is not survivor.optimizer.state[
            weight]["exp_avg"]
        assert torch.equal(state["model"]["1.weight"], saved["model"]["1.weight"])
        assert not torch.equal(state["model"]["1.weight"], weight)
    finally:
        survivor.close()


def test_reading_ahead_is_on_with_a_core_to_spare_unless_the_environment_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.delenv(messages.STARTING_VARIABLE, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert not session._read_ahead_setting(None), "4 ranks on 2 cores: the read would compete"
    assert session._read_ahead_setting(True)
    monkeypatch.setenv(messages.STARTING_VARIABLE, "1")
    assert session._read_ahead_setting(None), "the only process started: the others wait"
    monkeypatch.setenv(messages.STARTING_VARIABLE, "4")
    assert not session._read_ahead_setting(None), "a job-level restart: all 4 start at once"
    monkeypatch.delenv(messages.STARTING_VARIABLE)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert session._read_ahead_setting(None)
    monkeypatch.setenv("TRAINGUARD_READ_AHEAD", "0")
    assert not session._read_ahead_setting(True), "the variable wins over the argument"
    monkeypatch.setenv("TRAINGUARD_READ_AHEAD", "yes")
    with pytest.raises(session.SessionError, match="TRAINGUARD_READ_AHEAD must be 0 or 1, "
                                                    "got 'yes'"):
        session._read_ahead_setting(None)
