"""Why a job-level restart redoes completed steps: said from each rank's newest snapshot."""

from __future__ import annotations

from trainguard.agent import checkpoint_memory


def test_nothing_is_said_when_every_rank_holds_the_restored_step() -> None:
    assert checkpoint_memory.redone_steps({0: 7, 1: 7}, 7) == ""
    assert checkpoint_memory.redone_steps({0: None, 1: None}, 0) == ""


def test_the_ranks_ahead_and_behind_are_named_with_the_count() -> None:
    text = checkpoint_memory.redone_steps({0: 10, 1: 9, 2: 10, 3: None}, 9)

    assert text.startswith("1 completed step redone: ranks [0, 2] hold a snapshot of step 10 "
                           "but ranks [1, 3] do not (the fault struck before their snapshot of "
                           "it was complete), and every rank resumes at step 9")
    assert text.endswith("no replica of theirs can stand in for them at step 10 (none left "
                         "keeps their shares, or they have no replicas)")


def test_several_steps_are_counted() -> None:
    assert checkpoint_memory.redone_steps({0: 12, 1: 10}, 10).startswith("2 completed steps redone")
