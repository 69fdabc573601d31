"""The training side of --snapshot-every: which checkpoint() calls save, and the final state."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.train.fake_agent import FakeAgent
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.train import agent_memory, replica_shares, session


def _backend() -> agent_memory.AgentMemoryBackend:
    """due() and pace() never touch the link."""
    link: Any = None
    shares = replica_shares.ReplicaShares(rank=0, layout=replicas.ReplicaLayout(1, 1),
                                          enabled=False)
    return agent_memory.AgentMemoryBackend(link, rank=0, world_size=1, request_timeout=1.0,
                                           shares=shares)


def test_every_step_is_due_until_the_agent_says_otherwise() -> None:
    assert all(_backend().due(step) for step in range(50))


def test_the_interval_counts_from_its_step_and_the_rule_before_it_stays() -> None:
    backend = _backend()
    backend.pace(messages.SnapshotInterval(every=3, from_step=10))
    assert [s for s in range(5, 20) if backend.due(s)] == [5, 6, 7, 8, 9, 10, 13, 16, 19]
    backend.pace(messages.SnapshotInterval(every=2, from_step=20))
    assert [s for s in range(10, 25) if backend.due(s)] == [10, 13, 16, 19, 20, 22, 24]


def test_a_restore_anchors_the_interval_at_the_restored_step() -> None:
    backend = _backend()
    backend.pace(messages.SnapshotInterval(every=4, from_step=40))
    backend.pace(messages.SnapshotInterval(every=4, from_step=37))  # rolled back to 37
    assert [s for s in range(37, 50) if backend.due(s)] == [37, 41, 45, 49]


def _committed(received: list[messages.Message]) -> list[int]:
    return [m.step for m in received if isinstance(m, messages.SnapshotCommitted)]


def _train(trainer: session.Session, state: dict[str, Any], steps: range) -> None:
    model = state["model"]
    for step in steps:
        with trainer.step(step):
            model.weight.data += 1.0
        trainer.checkpoint(state, step=step + 1)


def _start(agent: FakeAgent, every: int, *orders: messages.Message
           ) -> tuple[session.Session, dict[str, Any]]:
    """A session that has the interval (and ``orders``): they answer its hello, before the
    restore plan, and the reader thread hands orders over in the order they arrive."""
    agent.greeting = [messages.SnapshotInterval(every=every, from_step=0), *orders]
    trainer = session.Session(handle_sigterm=False)
    state = {"model": torch.nn.Linear(2, 2)}
    assert trainer.restore(state) == 0
    return trainer, state


def _finished(agent: FakeAgent) -> list[messages.Message]:
    return agent.wait_for(lambda r: any(isinstance(m, messages.Finished) for m in r))


def test_only_due_steps_are_saved_and_the_last_state_when_no_step_follows(
        agent: FakeAgent) -> None:
    trainer, state = _start(agent, 3)
    _train(trainer, state, range(7))
    assert _committed(agent.wait_for(lambda r: len(_committed(r)) >= 2)) == [3, 6]
    trainer.close()
    received = _finished(agent)
    assert _committed(received) == [3, 6, 7], "the final state (step 7) was not saved"
    assert isinstance(received[-1], messages.Finished)  # after the final snapshot


def test_a_skipped_checkpoint_followed_by_a_step_is_not_saved_at_close(
        agent: FakeAgent) -> None:
    trainer, state = _start(agent, 5)
    _train(trainer, state, range(6))  # saves 5; 6 is skipped
    with trainer.step(6):  # a step began after it: the state is no longer that of step 6
        pass
    trainer.close()
    assert _committed(_finished(agent)) == [5]


def test_the_dying_checkpoint_is_saved_though_not_due(agent: FakeAgent) -> None:
    trainer, state = _start(agent, 5, messages.StopAt(step=6))
    with pytest.raises(SystemExit):
        _train(trainer, state, range(10))
    assert _committed(_finished(agent)) == [5, 7], "the agreed stop (after step 6) was not saved"


def _declared(received: list[messages.Message]) -> list[bool]:
    return [m.active for m in received if isinstance(m, messages.Activity)
            and m.kind is messages.ActivityKind.CHECKPOINT]


def test_only_snapshots_that_map_memory_or_run_long_are_declared_busy(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first snapshot into each slot maps its memory and is declared busy work; a short one
    after it is not (its time counts in the step), and its commit rides with the next mark."""
    trainer, state = _start(agent, 1)
    _train(trainer, state, range(4))
    received = agent.wait_for(lambda r: len(_committed(r)) >= 3)
    assert _declared(received) == [True, False, True, False], "slots 0 and 1 once each"
    commit = next(i for i, m in enumerate(received) if isinstance(m, messages.SnapshotCommitted)
                  and m.step == 3)
    after = received[commit + 1]
    assert isinstance(after, messages.StepMark), "a short snapshot's commit waits for the next mark"
    assert (after.step, after.phase) == (3, messages.StepPhase.BEGIN)
    monkeypatch.setattr(agent_memory, "DECLARED_SNAPSHOT_SECONDS", 0.0)  # every one is long
    _train(trainer, state, range(4, 6))
    trainer.close()
    assert _declared(_finished(agent)) == [True, False] * 4
