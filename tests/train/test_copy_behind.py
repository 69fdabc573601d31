"""Snapshots whose optimizer tensors are copied while the next step computes."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.fake_agent import FakeAgent
from tests.train.fake_comparison import compare_as
from trainguard.ipc import messages
from trainguard.train import (
    agent_memory,
    copy_behind,
    device_copy,
    session,
    snapshot,
)

_COPY_THREAD = "trainguard-snapshot-copy"


def _slow_background_copies(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[int]:
    """Copies made on the copy thread start ``seconds`` late; returns how many bytes each
    background copy moved, so a test can tell that one happened. The test's small model is
    copied behind whatever its size, and on although the test's one rank has no replica."""
    monkeypatch.setattr(agent_memory, "COPY_BEHIND_BYTES", 0)
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND", "1")
    moved: list[int] = []
    original = device_copy.copy_to_host

    def slow(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], **kwargs: Any) -> None:
        if threading.current_thread().name == _COPY_THREAD:
            time.sleep(seconds)
            moved.append(sum(t.numel() * t.element_size() for t, _ in pairs))
        original(pairs, **kwargs)

    monkeypatch.setattr(device_copy, "copy_to_host", slow)
    return moved


def _job() -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    torch.manual_seed(0)
    # Batch norm's running statistics change in every forward pass: they must be copied at
    # once, not behind.
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    return model, optimizer, {"model": model, "optimizer": optimizer}


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
    optimizer.zero_grad()
    model(inputs).pow(2).sum().backward()
    optimizer.step()


def _train(trainer: session.Session, state: dict[str, Any], steps: range
           ) -> dict[int, dict[str, Any]]:
    """Train with a snapshot after every step; returns the state each snapshot should hold."""
    model, optimizer = state["model"], state["optimizer"]
    expected = {}
    for step in steps:
        with trainer.step(step):
            _step(model, optimizer, step)
        expected[step + 1] = copy.deepcopy({"model": model.state_dict(),
                                            "optimizer": optimizer.state_dict()})
        trainer.checkpoint(state, step=step + 1)
    return expected


def _in_slots(directory: Path) -> dict[int, dict[str, Any]]:
    found = {}
    for path in directory.glob("slot-*"):
        header, tree = snapshot.read_snapshot(str(path))
        found[header.step] = tree["state"]
    return found


def _assert_same(left: Any, right: Any) -> None:
    if isinstance(left, torch.Tensor):
        assert torch.equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            _assert_same(left[key], right[key])
    elif isinstance(left, list | tuple):
        for a, b in zip(left, right, strict=True):
            _assert_same(a, b)
    else:
        assert left == right


def _start(agent: FakeAgent) -> session.Session:
    trainer = session.Session(handle_sigterm=False)
    agent.order(messages.SnapshotInterval(every=1, from_step=0))
    return trainer


def test_the_next_optimizer_step_waits_and_each_snapshot_holds_its_own_step(
        agent: FakeAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimizer's tensors are copied late (while the next step's forward and backward
    run), yet every snapshot holds the state of its step, not of a later one: the next
    optimizer step waited for the copy."""
    moved = _slow_background_copies(monkeypatch, 0.2)
    *_, state = _job()
    trainer = _start(agent)
    assert trainer.restore(state) == 0
    expected = _train(trainer, state, range(5))
    trainer.close()
    assert moved, "no tensor was copied behind"
    # What the agent hears counts the copy made behind, not only the moment checkpoint() took.
    # (The fake agent reads on a thread of its own: the last commit may still be on its way.)
    received = agent.wait_for(
        lambda arrived: sum(isinstance(m, messages.SnapshotCommitted) for m in arrived) >= 5)
    costs = [m.copy_seconds for m in received if isinstance(m, messages.SnapshotCommitted)]
    assert len(costs) == 5
    assert all(cost >= 0.2 for cost in costs[2:]), costs
    in_slots = _in_slots(tmp_path)
    assert sorted(in_slots) == [4, 5]
    for step, saved in in_slots.items():
        _assert_same(saved, expected[step])


def test_a_snapshot_returns_before_the_optimizer_tensors_are_copied(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_background_copies(monkeypatch, 1.0)
    model, optimizer, state = _job()
    trainer = _start(agent)
    trainer.restore(state)
    _train(trainer, state, range(2))  # the first snapshot into each slot maps its memory
    with trainer.step(2):
        _step(model, optimizer, 2)  # waits for the copy of step 2's snapshot
    began = time.perf_counter()
    trainer.checkpoint(state, step=3)
    assert time.perf_counter() - began < 0.9, "the snapshot waited for its background copy"
    trainer.close()


def test_without_the_copy_behind_every_copy_is_made_before_checkpoint_returns(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = _slow_background_copies(monkeypatch, 0.0)
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND", "0")
    *_, state = _job()
    trainer = _start(agent)
    trainer.restore(state)
    _train(trainer, state, range(3))
    trainer.close()
    assert moved == []


@pytest.mark.parametrize(("world_size", "dp_size", "behind"),
                         [(1, None, False), (2, None, True), (2, 1, False), (4, 2, True)])
def test_by_default_only_a_rank_with_a_replica_copies_behind(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, world_size: int,
        dp_size: int | None, behind: bool) -> None:
    """Without a replica, no snapshot can stand in for one that a kill leaves unfinished: the
    copy behind would cost a step in most kills, so such a rank copies at once."""
    moved = _slow_background_copies(monkeypatch, 0.0)
    monkeypatch.delenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND")
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    *_, state = _job()
    trainer = session.Session(handle_sigterm=False, dp_size=dp_size, share_replicas=False)
    agent.order(messages.SnapshotInterval(every=1, from_step=0))
    trainer.restore(state)
    _train(trainer, state, range(3))
    trainer.close()
    assert bool(moved) is behind


@pytest.mark.parametrize(("setting", "behind"), [(None, False), ("1", True)],
                         ids=["by default", "turned on"])
def test_replicas_found_to_differ_stop_a_copy_behind_that_relied_on_them(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, setting: str | None,
        behind: bool) -> None:
    """Two ranks whose comparison finds them different (every rank's digest its own): the
    agent is told at the first snapshot, and a copy behind that was on only for the replica
    stops, since no replica's snapshot may stand in for one a kill leaves unfinished."""
    moved = _slow_background_copies(monkeypatch, 0.0)
    if setting is None:
        monkeypatch.delenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND")
    monkeypatch.setenv("WORLD_SIZE", "2")
    compare_as(monkeypatch, identical=False)
    *_, state = _job()
    trainer = session.Session(handle_sigterm=False)  # two replicas: compared, no shares
    agent.order(messages.SnapshotInterval(every=1, from_step=0))
    trainer.restore(state)
    _train(trainer, state, range(3))
    trainer.close()
    assert bool(moved) is behind
    (told,) = [m for m in agent.received if isinstance(m, messages.ReplicasDiffer)]
    assert told.detail == "replica groups [[0, 1]] at dp-size 2"


def test_a_state_below_the_threshold_is_copied_at_once(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = _slow_background_copies(monkeypatch, 0.0)
    monkeypatch.setattr(agent_memory, "COPY_BEHIND_BYTES", 10**9)
    *_, state = _job()
    trainer = _start(agent)
    trainer.restore(state)
    _train(trainer, state, range(3))
    trainer.close()
    assert moved == []


def test_a_malformed_setting_names_the_variable(agent: FakeAgent,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND", "yes")
    with pytest.raises(session.SessionError,
                       match="TRAINGUARD_SNAPSHOT_COPY_BEHIND must be 0 or 1, got 'yes'"):
        session.Session(handle_sigterm=False)


def test_a_failed_background_copy_is_raised_at_the_next_snapshot(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    original = device_copy.copy_to_host

    def failing(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], **kwargs: Any) -> None:
        if threading.current_thread().name == _COPY_THREAD and pairs:
            raise RuntimeError("device lost")
        original(pairs, **kwargs)

    monkeypatch.setattr(device_copy, "copy_to_host", failing)
    monkeypatch.setattr(agent_memory, "COPY_BEHIND_BYTES", 0)
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_COPY_BEHIND", "1")
    model, optimizer, state = _job()
    trainer = _start(agent)
    trainer.restore(state)
    with trainer.step(0):
        _step(model, optimizer, 0)
    trainer.checkpoint(state, step=1)
    with pytest.raises(session.SessionError, match="the snapshot's copy failed: device lost"):
        trainer.checkpoint(state, step=1)
    trainer.close()


def test_optimizer_tensors_are_its_parameters_and_its_state() -> None:
    model, optimizer, _ = _job()
    _step(model, optimizer, 0)
    owned = copy_behind.optimizer_tensors([optimizer])
    parameters = {p.data_ptr() for p in model.parameters()}
    moments = {t.data_ptr() for s in optimizer.state.values() for t in s.values()
               if isinstance(t, torch.Tensor) and t.numel()}
    assert owned == parameters | moments
    buffers = {b.data_ptr() for b in model.buffers() if b.numel()}
    assert not owned & buffers


def test_a_job_waits_for_the_one_before_it() -> None:
    behind = copy_behind.CopyBehind()
    order: list[str] = []
    release = threading.Event()

    def first() -> None:
        release.wait(5)
        order.append("first")

    behind.submit(first)
    def wait() -> None:
        behind.wait()
        order.append("waited")

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    assert order == []
    release.set()
    waiter.join(5)
    behind.submit(lambda: order.append("second"))
    behind.wait()
    assert order == ["first", "waited", "second"]

