"""What to do about a fault (SPEC H1, H4, H5, R5, D7, H12): a pure function of what was seen.

The strategies are the original's, finest first (NOTES §4.2-4.3). Events keep the original's
names; people see what each does (:attr:`Strategy.label`: ``retry step``, ``restart failed
ranks``, ``move to spare``, ``dump``, ``restart job``), and ``--recover-strategy`` takes either:

* ``retry``: every process stays; every rank rolls back to the newest state all ranks have and
  redoes the step. For transient faults only: the device memory error 80E01801, or a collective
  that failed while every rank is alive.
* ``recover-in-place``: only the failed processes are restarted, on their devices; the others
  keep their processes and rejoin. For process faults and device faults that allow it
  (RestartRequest, RestartBusiness).
* ``recover``: the failed ranks move to spare devices; their state comes from a data-parallel
  replica (the failed device's memory is not trusted).
* ``dump``: the healthy replicas save the newest state to disk (the failed ranks' from their
  replicas), then ``exit``.
* ``exit``: job-level restart of every process: the floor. Ranks whose device is isolated
  (SeparateNPU, ManuallySeparateNPU) start on spare devices; without enough spares the job
  fails (it does not shrink).

The first strategy that is enabled and fits the fault is tried; when it fails or misses its
deadline, the next that fits after it (the original's fallback chain). Every recovery spends
one restart of the job's budget (``--max-restarts``); a failure with no hardware cause (no device
code, no host lost) also one of the unconditional retries (H12, ``--fault-retry-times``, the
original's ``fault-retry-times``; unset: no separate bound). When
every rank fails within a few seconds of a (re)start, before any step completed, the job has a
problem no restart will fix (a crash loop): it fails at once, with the workers' errors. So it
does when the same failure (rank, kind, exit status, error) comes ``crash_loop_repeats`` times
in a row, each before a step completed (one rank failing at step 0, its peers losing it). A rank
killed with SIGKILL or found hung is never taken for a crash loop (those come from outside the
script); nor is a rank whose error says that a peer went away.
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from collections.abc import Collection, Sequence

from trainguard.faults import levels, process
from trainguard.job import replicas

__all__ = ["CHAIN", "DEFAULT_STRATEGIES", "Decision", "FaultContext", "RecoverySettings",
           "Strategy", "decide", "fit_to_job", "may_be_crash_loop", "parse_strategies"]


class Strategy(enum.StrEnum):
    RETRY = "retry"
    RECOVER_IN_PLACE = "recover-in-place"
    RECOVER = "recover"
    DUMP = "dump"
    EXIT = "exit"  # job-level restart: every worker stops and all start again
    FAIL = "fail"  # nothing more to try: the job ends

    @property
    def label(self) -> str:
        """What the strategy does, in the words the console and the summary use."""
        return _LABELS[self]

    @property
    def shown(self) -> str:
        """The label, with the original's name in brackets where the label does not contain it:
        ``restart job (exit)``, so that the original's documents still lead here."""
        return self.label if self.value in self.label else f"{self.label} ({self.value})"


_LABELS = {
    Strategy.RETRY: "retry step",
    Strategy.RECOVER_IN_PLACE: "restart failed ranks",
    Strategy.RECOVER: "move to spare",
    Strategy.DUMP: "dump",
    Strategy.EXIT: "restart job",
    Strategy.FAIL: "fail",
}
_BY_NAME = {name: strategy for strategy in Strategy
            for name in (strategy.value, strategy.label.replace(" ", "-"))}


CHAIN = (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.RECOVER, Strategy.DUMP,
         Strategy.EXIT)
"""The order the strategies are tried in (the original's sort priority)."""
IN_PROCESS = frozenset({Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.RECOVER})
"""Strategies in which processes survive: the training script must run under Session.run."""
DEFAULT_STRATEGIES = (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.RECOVER,
                      Strategy.EXIT)
"""Dump is left out by default: it writes to disk before the job-level restart, which pays off
only when the restart cannot use the healthy replicas' memory (the original enables it per
job too)."""


def parse_strategies(text: str) -> tuple[Strategy, ...]:
    """``"retry,recover-in-place"`` (or ``"retry-step,restart-failed-ranks"``) -> the strategies
    in chain order, ``exit`` appended.

    Raises:
        ValueError: a name that is not a strategy.
    """
    chosen = set()
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        strategy = _BY_NAME.get(name)
        if strategy is None:
            known = ", ".join(f"{s.label.replace(' ', '-')} ({s})" if s.value not in s.label
                              else str(s) for s in CHAIN)
            raise ValueError(f"recover-strategy: {name!r} is not a strategy (known: {known})")
        if strategy is Strategy.FAIL:
            raise ValueError("recover-strategy: 'fail' is not a strategy one can enable")
        chosen.add(strategy)
    chosen.add(Strategy.EXIT)
    return tuple(s for s in CHAIN if s in chosen)


def fit_to_job(strategies: Sequence[Strategy], *, layout: replicas.ReplicaLayout, spares: int,
               explicit: bool) -> tuple[Strategy, ...]:
    """The strategies that can work for this job. The defaults are trimmed to those; a list
    the user gave that names one that cannot work is refused.

    Raises:
        ValueError: an explicit strategy that cannot work here, and why.
    """
    problems = {}
    if spares < 1:
        problems[Strategy.RECOVER] = f"{Strategy.RECOVER.shown} moves failed ranks to spare " \
            "devices, and the job has none (--spare-devices)"
    elif layout.dp_size < 2:
        problems[Strategy.RECOVER] = f"{Strategy.RECOVER.shown} loads the moved ranks' state " \
            "from a data-parallel replica, and the job has none (--dp-size 1)"
    if layout.dp_size < 2:
        problems[Strategy.DUMP] = "dump saves the failed ranks' state from their data-parallel " \
            "replicas, and the job has none (--dp-size 1)"
    refused = [s for s in strategies if s in problems]
    if explicit and refused:
        raise ValueError("recover-strategy: " + "; ".join(problems[s] for s in refused))
    return tuple(s for s in strategies if s not in problems)


_WHAT = {
    Strategy.RETRY: "redo the step on every rank",
    Strategy.RECOVER_IN_PLACE: "restart the failed processes in place",
    Strategy.RECOVER: "move the failed ranks to spare devices",
    Strategy.DUMP: "save the newest state from the healthy replicas, then restart the job",
    Strategy.EXIT: "restart every process",
}


@dataclasses.dataclass(frozen=True)
class RecoverySettings:
    max_restarts: int = 0
    """Restarts of any cause (torchrun's --max-restarts), >= 0: every recovery spends one."""
    fault_retry_times: int | None = None
    """Unconditional retries (H12, the original's fault-retry-times), >= 0: recoveries of
    failures with no hardware cause (no device fault code, no host lost), each also one of
    --max-restarts. Unset: --max-restarts alone bounds them."""
    crash_loop_window: float = 10.0
    """Seconds after a (re)start within which all ranks failing, before any step completed, is a
    crash loop (>= 0). Covers imports and model setup on a loaded host."""
    crash_loop_repeats: int = 3
    """Identical failures in a row, each before any step completed, after which the job fails
    instead of restarting again (>= 1). One such failure may be chance (a port taken, a file
    system briefly away) and two a coincidence; a third identical one is the script's own
    problem, and every further start costs a full start-up and prints the same error."""
    crash_loop_settle: float = 3.0
    """Seconds to wait, after an early failure, for the other ranks to fail too (>= 0)."""
    snapshot_grace: float = 2.0
    """Seconds healthy ranks get to finish the snapshot a failed rank already committed,
    before they are stopped (>= 0); usually they need milliseconds."""
    recover_strategy: tuple[Strategy, ...] = DEFAULT_STRATEGIES
    """Strategies the job may use, from retry-step (retry), restart-failed-ranks
    (recover-in-place), move-to-spare (recover), dump (restart-job, the original's exit, is
    always added); each fault gets the first that fits, then the next when it fails. Default:
    all but dump that can work for the job."""
    recover_timeout: float = 30.0
    """Seconds a process-level recovery (retry, recover-in-place, recover) may take, from the
    decision to every rank stepping again, before the next strategy is tried (> 0)."""

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max-restarts must be >= 0, got {self.max_restarts}")
        if self.fault_retry_times is not None and self.fault_retry_times < 0:
            raise ValueError(f"fault-retry-times must be >= 0, got {self.fault_retry_times}")
        if self.crash_loop_repeats < 1:
            raise ValueError(f"crash-loop-repeats must be >= 1, got {self.crash_loop_repeats}")
        for name in ("crash_loop_window", "crash_loop_settle", "snapshot_grace"):
            if not getattr(self, name) >= 0:  # NaN fails this too
                flag = name.replace("_", "-")
                raise ValueError(f"{flag} must be >= 0 seconds, got {getattr(self, name)}")
        if not self.recover_timeout > 0:
            raise ValueError(f"recover-timeout must be > 0 seconds, got {self.recover_timeout}")
        object.__setattr__(self, "recover_strategy", parse_strategies(
            ",".join(str(strategy) for strategy in self.recover_strategy)))


@dataclasses.dataclass(frozen=True)
class FaultContext:
    """What the decision looks at, observed by the controller."""

    fault: process.ProcessFault
    age: float  # seconds from the generation's start to the fault
    progressed: bool  # some rank completed a step in this generation
    world_size: int
    failed: Sequence[process.ProcessFault]  # every rank that failed by itself, the fault included
    restarts_left: int
    in_process: bool = False  # every live worker runs under Session.run
    alive: Collection[int] = ()  # ranks whose process is still there
    spares_left: int = 0
    layout: replicas.ReplicaLayout | None = None
    replicas_differ: bool = False  # the ranks found their replicas different: none stands in
    isolated: Collection[int] = ()  # ranks on isolated devices: any restart moves them to spares
    repeats: int = 1  # this failure, identical and before any step completed, so many in a row
    retries_left: int | None = None  # unconditional retries left (fault-retry-times); None: any


@dataclasses.dataclass(frozen=True)
class Decision:
    strategy: Strategy
    reason: str


def may_be_crash_loop(settings: RecoverySettings, context: FaultContext) -> bool:
    """Worth waiting for the other ranks before deciding: early, no progress, from the script."""
    fault = context.fault
    return (context.age <= settings.crash_loop_window and not context.progressed
            and fault.kind not in (process.ProcessFaultKind.HUNG,
                                   process.ProcessFaultKind.COMMUNICATION)
            and fault.returncode != -signal.SIGKILL and not fault.alive)


def _out_of_use(faults: Sequence[process.ProcessFault]) -> str:
    fault = faults[0]
    where = fault.device or f"rank {fault.rank}'s device"
    level = fault.device_level
    return f"{where} is {levels.health(level)} ({level}) after code {fault.code}"


def _on_isolated(ranks: Collection[int]) -> str:
    listed = sorted(ranks)
    if len(listed) == 1:
        return f"rank {listed[0]} is on an isolated device"
    return f"ranks {', '.join(map(str, listed))} are on isolated devices"


def _why_not(strategy: Strategy, context: FaultContext) -> str | None:
    """Why ``strategy`` does not fit the fault; None when it does."""
    failed = {f.rank for f in context.failed}
    if strategy in IN_PROCESS and not context.in_process:
        return "the script does not use session.run"
    held = [f for f in context.failed if not f.in_place]
    if strategy is Strategy.RETRY:
        if not all(f.retryable for f in context.failed):
            escalated = [f for f in held if f.retry_code]
            return _out_of_use(escalated) if escalated else "not every fault is transient"
        if len(context.alive) < context.world_size:
            return "a process is gone"
    elif strategy is Strategy.RECOVER_IN_PLACE:
        if held:
            return _out_of_use(held)
    elif strategy in (Strategy.RECOVER, Strategy.DUMP):
        if strategy is Strategy.RECOVER and context.spares_left < len(failed):
            return f"{context.spares_left} spare devices for {len(failed)} failed ranks"
        if context.replicas_differ:
            return "the ranks found their replicas different, so none stands in for another"
        layout = context.layout
        healthy = set(context.alive) - failed
        if layout is None or any(layout.donor(rank, healthy) is None for rank in failed):
            return "a failed rank has no healthy data-parallel replica"
    return None


def decide(settings: RecoverySettings, context: FaultContext, *,
           after: Strategy | None = None, failed_because: str = "") -> Decision:
    """The strategy for ``context``'s fault; ``after``: the strategy that just failed for it,
    ``failed_because``: why (the reason to fail when no strategy is left after it).

    The crash-loop and budget checks come first; then the first enabled strategy that fits,
    after ``after`` in the chain. The reason names why each finer strategy was not used.
    """
    # A rank that failed because a peer vanished did not fail on its own.
    independent = [f for f in context.failed if not process.lost_a_peer(f.error_excerpt)]
    if may_be_crash_loop(settings, context) and len(independent) >= context.world_size:
        return Decision(Strategy.FAIL, (
            f"crash loop: all {context.world_size} ranks failed within "
            f"{context.age:.1f} s of the start, before completing a step; not retried"))
    if context.repeats >= settings.crash_loop_repeats:
        return Decision(Strategy.FAIL, (
            f"crash loop: the same failure {context.repeats} times in a row, each before a step "
            f"completed (crash-loop-repeats {settings.crash_loop_repeats}); a restart does not "
            f"fix it; last fault: {context.fault.describe()}"))
    if context.restarts_left <= 0:
        return Decision(Strategy.FAIL, (
            f"retry budget exhausted (max-restarts {settings.max_restarts}); "
            f"last fault: {context.fault.describe()}"))
    if (context.retries_left is not None and context.retries_left <= 0
            and not context.fault.hardware_cause):
        return Decision(Strategy.FAIL, (
            f"unconditional retry budget exhausted (fault-retry-times "
            f"{settings.fault_retry_times}: failures with no hardware cause); last fault: "
            f"{context.fault.describe()}"))
    start = CHAIN.index(after) + 1 if after is not None else 0
    passed: dict[str, list[Strategy]] = {}  # why not -> the strategies passed over for it
    for strategy in CHAIN[start:]:
        if strategy is Strategy.EXIT and len(context.isolated) > context.spares_left:
            return Decision(Strategy.FAIL, (
                f"{_on_isolated(context.isolated)} and {context.spares_left} spare devices "
                "are left (--spare-devices): no restart may place a rank on an isolated "
                "device, and the job does not shrink; not restarted"))
        reason = _why_not(strategy, context)
        if strategy in settings.recover_strategy and reason is None:
            return Decision(strategy, f"{context.fault.kind} process: {_WHAT[strategy]}"
                                      f"{_passed_over(passed)}")
        passed.setdefault(reason or "not in --recover-strategy", []).append(strategy)
    # Only after the last strategy: restarting the job could not be carried out (a host lost
    # and none to take its ranks).
    assert after is not None
    return Decision(Strategy.FAIL, f"{after.label} failed: {failed_because or 'no reason given'}")


def _passed_over(passed: dict[str, list[Strategy]]) -> str:
    """`` (not retry step, restart failed ranks: the script does not use session.run)``."""
    if not passed:
        return ""
    return " (" + "; ".join(
        f"not {', '.join(s.label for s in strategies)}: {reason}"
        for reason, strategies in passed.items()) + ")"
