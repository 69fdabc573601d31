"""The pacer: measures from the agent's statistics, tells the ranks, records when noteworthy."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.agent import snapshot_pacing, step_statistics, workers
from trainguard.agent.settings import AgentSettings
from trainguard.faults import process
from trainguard.job import events


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now


class FakeAgent:
    def __init__(self, every: int) -> None:
        self.statistics = step_statistics.StepStatistics()
        self.snapshot_every = every
        self.paced: list[int] = []

    def pace_snapshots(self, every: int) -> None:
        self.paced.append(every)
        self.snapshot_every = every


def _settings(every: str, **extra: float) -> AgentSettings:
    return AgentSettings(nproc_per_node=4, program=workers.ProgramSpec("path", "train.py", ()),
                         run_id="job", run_dir=Path("/nonexistent"), snapshot_every=every,
                         **extra)  # type: ignore[arg-type]


def _pacer(every: str, clock: FakeClock, *, cores: int = 4, **extra: float
           ) -> tuple[snapshot_pacing.SnapshotPacer, FakeAgent, list[events.Event]]:
    """A pacer of 4 ranks on ``cores`` cores (by default one each)."""
    settings = _settings(every, **extra)
    agent = FakeAgent(settings.snapshot_interval or 1)
    recorded: list[events.Event] = []
    pacer = snapshot_pacing.SnapshotPacer(settings, agent=agent, record=recorded.append,
                                          clock=clock, cores=cores)
    return pacer, agent, recorded


def _steps(agent: FakeAgent, clock: FakeClock, *, count: int, step: float, stall: float,
           every: int) -> None:
    """``count`` steps of rank 0, a snapshot after every ``every``-th."""
    for index in range(count):
        agent.statistics.began(0, clock.now)
        clock.now += step
        if index % every == 0:
            agent.statistics.snapshot(0, step=index + 1, nbytes=75 << 20, seconds=stall,
                                      at=clock.now)
            clock.now += stall


def test_auto_starts_every_step_then_moves_once_the_stall_is_measured() -> None:
    clock = FakeClock()
    pacer, agent, recorded = _pacer("auto", clock)
    pacer.start()
    assert [(e.interval, e.recommended) for e in recorded
            if isinstance(e, events.SnapshotIntervalChosen)] == [(1, None)]
    assert "auto: every step until the stall is measured" in recorded[0].summary()
    assert pacer.review() is None  # nothing measured yet
    _steps(agent, clock, count=20, step=0.155, stall=0.031, every=1)
    choice = pacer.review()
    assert choice is not None
    assert choice.interval == 4
    assert agent.paced == [4]
    chosen = recorded[-1]
    assert isinstance(chosen, events.SnapshotIntervalChosen)
    assert (chosen.interval, chosen.requested, chosen.optimum_steps) == (4, "auto",
                                                                         choice.optimum)
    assert chosen.stall_seconds == pytest.approx(0.031)
    assert chosen.step_seconds == pytest.approx(0.155)
    pacer.review()  # nothing changed: nothing recorded
    assert len(recorded) == 2


def test_ranks_outnumbering_the_cores_count_the_stall_that_many_times() -> None:
    # The demo's job on 2 cores (benchmarks/snapshot_overhead.py): a 0.6 ms stall is 4.8% of a
    # 12.5 ms step, within the share; but with 2 ranks to a core each snapshot also takes the
    # cores the others step on (it cost the step 1.45 ms), so every 2 steps.
    clock = FakeClock()
    pacer, agent, recorded = _pacer("auto", clock, cores=2)
    _steps(agent, clock, count=20, step=0.0125, stall=0.0006, every=1)
    measured = pacer.measured()
    assert measured is not None
    assert measured.crowding == 2.0
    assert measured.cost_seconds == pytest.approx(0.0012)
    choice = pacer.review()
    assert choice is not None
    assert (choice.interval, choice.budget) == (2, 2)
    chosen = recorded[-1]
    assert isinstance(chosen, events.SnapshotIntervalChosen)
    assert ("a snapshot stalls 0.6 ms, 1.2 ms with 2 ranks to a core, 9.6% of a 12.5 ms step"
            in chosen.summary())
    assert chosen.stall_seconds == pytest.approx(0.0006)  # the stall as measured
    assert chosen.ranks_per_core == 2.0
    # One core to each rank or more: the stall alone.
    for cores in (4, 16):
        pacer, agent, _ = _pacer("auto", clock, cores=cores)
        _steps(agent, clock, count=20, step=0.0125, stall=0.0006, every=1)
        choice = pacer.review()
        assert choice is not None
        assert choice.interval == 1
        assert "ranks to a core" not in choice.reason


def test_a_fixed_interval_is_kept_and_recommended_against_once() -> None:
    clock = FakeClock()
    pacer, agent, recorded = _pacer("1", clock)
    _steps(agent, clock, count=20, step=0.155, stall=0.031, every=1)
    pacer.review()
    pacer.review()
    assert agent.snapshot_every == 1
    assert len(recorded) == 1
    assert "recommended: every 4 steps (--snapshot-every 4)" in recorded[0].summary()


def test_observed_faults_replace_the_prior() -> None:
    clock = FakeClock()
    pacer, agent, recorded = _pacer("auto", clock)
    _steps(agent, clock, count=20, step=1.0, stall=2.0, every=1)
    assert pacer.review() is not None
    assert agent.snapshot_every == 40  # the budget: the prior's optimum is far longer
    fault = process.ProcessFault(rank=1, pid=7, kind=process.ProcessFaultKind.EXITED,
                                 detected_at=clock.now, returncode=-9)
    for _ in range(3):
        pacer.event(events.FaultDetected.of(job="job", generation=0, fault=fault))
    choice = pacer.review()
    assert choice is not None
    assert choice.mtbf_observed
    assert choice.interval == choice.optimum < 40
    assert isinstance(recorded[-1], events.SnapshotIntervalChosen)
    assert recorded[-1].mtbf_observed


def test_nothing_is_recorded_before_the_first_snapshot_then_the_start_and_the_choice(
        ) -> None:
    clock = FakeClock()
    pacer, agent, recorded = _pacer("auto", clock)
    for _ in range(10):  # steps, but no snapshot: a script that never calls checkpoint()
        agent.statistics.began(0, clock.now)
        clock.now += 0.155
    pacer.tick()
    assert recorded == []
    _steps(agent, clock, count=20, step=0.155, stall=0.031, every=1)
    pacer.tick()
    chosen = [e for e in recorded if isinstance(e, events.SnapshotIntervalChosen)]
    assert [e.recommended is None for e in chosen] == [True, False]
    assert chosen[0].interval == 1
    assert chosen[1].interval > 1


def test_the_stall_is_the_slowest_ranks() -> None:
    """With one rank copying for its replicas, the others' near-zero stalls must not hide it."""
    clock = FakeClock()
    pacer, agent, _ = _pacer("auto", clock)
    for index in range(20):
        agent.statistics.began(0, clock.now)
        clock.now += 0.155
        for rank in range(4):
            agent.statistics.snapshot(rank, step=index + 1, nbytes=1,
                                      seconds=0.031 if rank == 0 else 0.0001, at=clock.now)
        clock.now += 0.031
    measured = pacer.measured()
    assert measured is not None
    assert measured.stall_seconds == pytest.approx(0.031)
    choice = pacer.review()
    assert choice is not None
    assert choice.interval == 4


def _fixed_every_step_under(stalls: tuple[float, ...], *, count: int, step: float
                            ) -> tuple[list[int], list[events.SnapshotIntervalChosen], FakeAgent]:
    """``--snapshot-every 1`` reviewed after ``count`` steps at each stall in turn: each review's
    recommendation, what was recorded, and the agent."""
    clock = FakeClock()
    pacer, agent, recorded = _pacer("1", clock)
    pacer.start()
    recommended = []
    for stall in stalls:
        _steps(agent, clock, count=count, step=step, stall=stall, every=1)
        choice = pacer.review()
        assert choice is not None
        recommended.append(choice.recommended)
    return (recommended, [e for e in recorded if isinstance(e, events.SnapshotIntervalChosen)],
            agent)


def test_a_fixed_interval_is_told_of_another_once_not_at_every_wobble_of_the_stall() -> None:
    """make run printed a new recommendation every few seconds as the stall moved between 11
    and 17 ms (every 3, 4, 3, 5 steps...): only the switch from 'keep it' to 'change it' is news."""
    recommended, chosen, agent = _fixed_every_step_under(
        (0.012, 0.017, 0.011, 0.016, 0.012), count=40, step=0.085)
    assert len(set(recommended)) > 1, "the stalls must move the recommendation for this test"
    assert len(chosen) == 2  # the start, and the first recommendation
    assert agent.paced == [1] * 5


def test_a_fixed_interval_is_not_told_again_when_the_stall_wobbles_across_the_share() -> None:
    """make run printed a line every few seconds as the stall moved between 3% and 7% of the
    step around the 5% share: advice given, taken back, given again. It is said once."""
    recommended, chosen, agent = _fixed_every_step_under(
        (0.0065, 0.0029, 0.0064, 0.0027, 0.0066), count=100, step=0.09)
    assert 1 in recommended, "the stalls must cross the share"
    assert len(set(recommended)) > 1, "the stalls must cross the share"
    assert [e.recommended for e in chosen] == [None, recommended[0]]
    assert agent.paced == [1] * 5


def test_each_generations_first_two_snapshots_are_left_out_of_the_stall() -> None:
    # Measured on the demo's job: a rank's first write into each of its two slots (the first
    # also comparing the replicas) stalled 4-18 ms, the rest 0.4 ms; the choice stood on them.
    clock = FakeClock()
    pacer, agent, _ = _pacer("auto", clock)
    statistics = agent.statistics
    for generation in range(2):
        statistics.new_generation()
        for index, stall in enumerate((0.018, 0.009, *[0.0004] * 6)):
            statistics.began(0, clock.now)
            clock.now += 0.0125
            for rank in range(4):
                statistics.snapshot(rank, step=100 * generation + index + 1, nbytes=1,
                                    seconds=stall, at=clock.now)
        assert [step for step in statistics.slowest_stalls if step > 100 * generation] == [
            100 * generation + step for step in range(3, 9)]
        measured = pacer.measured()
        assert measured is not None
        assert measured.stall_seconds == pytest.approx(0.0004)
    # What a rank shows as its newest snapshot is still each one, the first ones too.
    assert statistics.activity(0, pid=1, device=0, step=108).snapshot_seconds == 0.0004
    statistics.new_generation()
    statistics.snapshot(0, step=201, nbytes=1, seconds=0.018, at=clock.now)
    assert statistics.activity(0, pid=1, device=0, step=201).snapshot_seconds == 0.018
    assert 201 not in statistics.slowest_stalls
