"""A lost rank's share written again by its ring successor, from live state (CompleteShares)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.train.fake_agent import FakeAgent
from trainguard.agent import snapshot_slots
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.train import agent_link, agent_memory, replica_shares, snapshot


class Job:
    """Rank 1 of a group of 3 replicas (ring predecessor: rank 0), writing shares."""

    def __init__(self, agent: FakeAgent, orders: list[messages.Message]) -> None:
        self.link = agent_link.AgentLink(agent.address, on_order=orders.append)
        shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(3, 3),
                                              enabled=True)
        shares._checked = True  # one process: no replicas to compare
        self.backend = agent_memory.AgentMemoryBackend(
            self.link, rank=1, world_size=3, request_timeout=5.0, shares=shares, behind=False)
        torch.manual_seed(0)
        # with buffers the optimizer does not own (batch-norm statistics): taken from the
        # slot, not from the live module, whose forward passes may have moved them
        self.model = torch.nn.Sequential(torch.nn.BatchNorm1d(16),
                                         *(torch.nn.Linear(16, 16) for _ in range(6)))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.1)

    def step_and_save(self, step: int) -> None:
        self.model(torch.randn(4, 16)).square().sum().backward()
        self.optimizer.step()
        tree = {"step": step, "state": {"model": self.model.state_dict(),
                                        "optimizer": self.optimizer.state_dict()}, "rng": {}}
        self.backend.save(tree, step=step, generation=0, started=0.0,
                          optimizers=[self.optimizer])

    def live(self) -> list[torch.Tensor]:
        """The tree's tensors as a snapshot finds them, in its order."""
        tree = {"step": 0, "state": {"model": self.model.state_dict(),
                                     "optimizer": self.optimizer.state_dict()}, "rng": {}}
        return snapshot.flatten(tree)[1]


@pytest.fixture
def job(agent: FakeAgent) -> Iterator[Job]:
    made = Job(agent, [])
    yield made
    made.backend.close()
    made.link.close()


def slot_holders(path: Path) -> tuple[int, list[snapshot.Absent], object]:
    absent: list[snapshot.Absent] = []
    header, tree = snapshot.read_snapshot(str(path), absent=absent)
    return header.step, absent, tree


def test_the_successor_writes_its_predecessors_share_from_its_live_state(
        job: Job, agent: FakeAgent, tmp_path: Path) -> None:
    job.step_and_save(1)  # slot 0
    job.step_and_save(2)  # slot 1
    step, absent, _ = slot_holders(tmp_path / "slot-1")
    assert step == 2
    assert {item.holder for item in absent} == {0, 2}  # rank 1 writes its own share only

    assert job.backend.complete(0) == ""

    step, absent, tree = slot_holders(tmp_path / "slot-0")
    assert step == 2
    assert {item.holder for item in absent} == {2}, "rank 0's share is in the completed one"
    saved = snapshot.flatten(tree)[1]
    held_elsewhere = {item.index for item in absent}
    assert all(torch.equal(mine, live) for index, (mine, live) in
               enumerate(zip(saved, job.live(), strict=True)) if index not in held_elsewhere)
    committed = agent.wait_for(lambda received: any(
        isinstance(m, messages.SnapshotCommitted) and m.slot == 0 and m.step == 2
        for m in received))
    assert committed


def test_no_completion_once_an_optimizer_step_began_or_for_another_rank(job: Job) -> None:
    job.step_and_save(1)
    job.step_and_save(2)
    assert job.backend.complete(2) == "rank 2 is not this rank's ring predecessor"
    job.model(torch.randn(4, 16)).square().sum().backward()
    job.optimizer.step()  # the live tensors are step 3's now, and no snapshot of it follows
    began = time.monotonic()
    assert job.backend.complete(0) == "an optimizer step began since this rank's newest snapshot"
    assert time.monotonic() - began >= messages.COMPLETE_SHARES_WAIT * 0.9


def test_after_an_optimizer_step_the_snapshot_that_follows_is_completed(
        job: Job, tmp_path: Path) -> None:
    job.step_and_save(1)
    job.model(torch.randn(4, 16)).square().sum().backward()
    job.optimizer.step()  # the order comes between this rank's optimizer step and snapshot
    answer: list[str] = []
    reader = threading.Thread(target=lambda: answer.append(job.backend.complete(0)))
    reader.start()
    time.sleep(0.1)
    tree = {"step": 2, "state": {"model": job.model.state_dict(),
                                 "optimizer": job.optimizer.state_dict()}, "rng": {}}
    job.backend.save(tree, step=2, generation=0, started=0.0, optimizers=[job.optimizer])
    reader.join(10)
    assert answer == [""]
    step, absent, _ = slot_holders(tmp_path / "slot-0")  # the completed snapshot of step 2
    assert step == 2
    assert {item.holder for item in absent} == {2}


def test_a_completed_snapshot_is_chosen_over_the_one_of_the_same_step(
        job: Job, tmp_path: Path) -> None:
    for step in (1, 2, 3):  # slots 0, 1, 0
        job.step_and_save(step)
    assert job.backend.complete(0) == ""  # step 3, into slot 1
    slots = snapshot_slots.SnapshotSlots()
    try:
        for slot in (0, 1):
            path, _ = slots.grant(1, slot, (tmp_path / f"slot-{slot}").stat().st_size)
            Path(path).write_bytes((tmp_path / f"slot-{slot}").read_bytes())
        states = slots.committed(1)
        assert [(state.header.step, state.slot) for state in states] == [(3, 1), (3, 0)]
        assert slots.holders(states[0]) == {2}
    finally:
        slots.close()


def test_an_order_with_an_id_reaches_the_session_not_the_requests(agent: FakeAgent) -> None:
    orders: list[messages.Message] = []
    job = Job(agent, orders)
    try:
        agent.order(messages.CompleteShares(7, 0))
        agent.wait_for(0)  # the link is up
        deadline = time.monotonic() + 10
        while not orders and time.monotonic() < deadline:
            time.sleep(0.01)
        assert orders == [messages.CompleteShares(7, 0)]
    finally:
        job.backend.close()
        job.link.close()


def test_a_completion_after_the_session_closed_touches_no_slot(agent: FakeAgent) -> None:
    job = Job(agent, [])
    try:
        job.step_and_save(1)
        job.step_and_save(2)
        job.backend.close()
        assert job.backend.complete(0) == "the session is closed"
    finally:
        job.link.close()


def test_a_snapshot_is_completed_once(job: Job) -> None:
    job.step_and_save(1)
    job.step_and_save(2)
    assert job.backend.complete(wait=False) == ""  # the predecessor, by default
    completed = Path(job.backend._mapped[0].path).read_bytes()
    assert job.backend.complete(0) == ""
    assert Path(job.backend._mapped[0].path).read_bytes() == completed, "written twice"


def test_after_a_restore_there_is_nothing_to_complete(job: Job) -> None:
    job.step_and_save(1)
    job.step_and_save(2)
    job.backend.load()  # the fake agent plans a fresh start: the live state is not step 2's
    assert job.backend.complete(0, wait=False) == "no snapshot since this rank restored"
