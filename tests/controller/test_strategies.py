"""The recovery strategies: parsing, fitting them to the job, and the fallback chain of decide()."""

from __future__ import annotations

import dataclasses
import math
import re
import signal
from collections.abc import Collection, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.controller import policy
from trainguard.controller.policy import Strategy
from trainguard.faults import process
from trainguard.job.replicas import ReplicaLayout

Kind = process.ProcessFaultKind

UCE = "80E01801"  # uncorrectable memory error: retryable, RestartBusiness
SEPARATE = "80E3A201"  # SeparateNPU: the device is taken out of use
RESTART_REQUEST = "80C98008"  # RestartRequest: in place, not retryable

ALL = (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.RECOVER, Strategy.DUMP, Strategy.EXIT)
NO_DUMP = (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.RECOVER, Strategy.EXIT)
SETTINGS = policy.RecoverySettings(max_restarts=5, recover_strategy=ALL)
PAIRS = ReplicaLayout(4, 2)  # ranks 0 and 2 hold one part, 1 and 3 the other


def _fault(rank: int = 1, *, kind: process.ProcessFaultKind = Kind.RAISED,
           returncode: int | None = None, code: str = "", alive: bool = True,
           error: str = "") -> process.ProcessFault:
    return process.ProcessFault(rank=rank, pid=1000 + rank, kind=kind, detected_at=50.0,
                                returncode=returncode, code=code, alive=alive,
                                error_excerpt=error)


def _context(fault: process.ProcessFault, *, failed: Sequence[process.ProcessFault] | None = None,
             world_size: int = 4, alive: Collection[int] | None = None,
             in_process: bool = True, spares_left: int = 0,
             layout: ReplicaLayout | None = PAIRS, restarts_left: int = 3,
             age: float = 100.0, progressed: bool = True) -> policy.FaultContext:
    return policy.FaultContext(
        fault=fault, age=age, progressed=progressed, world_size=world_size,
        failed=[fault] if failed is None else failed, restarts_left=restarts_left,
        in_process=in_process, alive=range(world_size) if alive is None else alive,
        spares_left=spares_left, layout=layout)


def _decide(context: policy.FaultContext, *, after: Strategy | None = None,
            settings: policy.RecoverySettings = SETTINGS) -> Strategy:
    return policy.decide(settings, context, after=after).strategy


# --- parse_strategies ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("", (Strategy.EXIT,)),
    ("exit", (Strategy.EXIT,)),
    ("retry", (Strategy.RETRY, Strategy.EXIT)),
    ("dump,retry", (Strategy.RETRY, Strategy.DUMP, Strategy.EXIT)),
    ("exit,recover,recover-in-place", (Strategy.RECOVER_IN_PLACE, Strategy.RECOVER,
                                       Strategy.EXIT)),
    ("dump,retry,dump,retry", (Strategy.RETRY, Strategy.DUMP, Strategy.EXIT)),
    (" retry , , dump ,", (Strategy.RETRY, Strategy.DUMP, Strategy.EXIT)),
    (",,,", (Strategy.EXIT,)),
    ("dump,recover,recover-in-place,retry", ALL),
])
def test_parse_strategies_orders_dedups_and_appends_exit(
        text: str, expected: tuple[Strategy, ...]) -> None:
    assert policy.parse_strategies(text) == expected


def test_parse_strategies_returns_members() -> None:
    parsed = policy.parse_strategies("recover")

    assert [type(s) for s in parsed] == [Strategy, Strategy]
    assert parsed[0] is Strategy.RECOVER


@pytest.mark.parametrize("name", ["bogus", "Retry", "recover_in_place", "restart"])
def test_parse_strategies_names_an_unknown_strategy(name: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(name))) as caught:
        policy.parse_strategies(f"retry,{name}")

    assert str(caught.value) == (
        f"recover-strategy: {name!r} is not a strategy "
        "(known: retry, restart-failed-ranks (recover-in-place), move-to-spare (recover), "
        "dump, restart-job (exit))")


@pytest.mark.parametrize("text", ["fail", "retry, fail", "fail,exit"])
def test_parse_strategies_refuses_fail(text: str) -> None:
    with pytest.raises(ValueError, match="'fail'") as caught:
        policy.parse_strategies(text)

    assert str(caught.value) == "recover-strategy: 'fail' is not a strategy one can enable"


@given(chosen=st.lists(st.sampled_from(ALL), max_size=10))
def test_parse_strategies_property(chosen: list[Strategy]) -> None:
    parsed = policy.parse_strategies(",".join(chosen))

    assert parsed[-1] is Strategy.EXIT
    assert set(parsed) == {*chosen, Strategy.EXIT}
    assert list(parsed) == sorted(parsed, key=policy.CHAIN.index)
    assert len(parsed) == len(set(parsed))
    assert policy.parse_strategies(",".join(parsed)) == parsed  # idempotent


# --- RecoverySettings ---------------------------------------------------------------------------


def test_settings_default_to_every_strategy_but_dump() -> None:
    settings = policy.RecoverySettings()

    assert settings.recover_strategy == NO_DUMP
    assert settings.recover_strategy == policy.DEFAULT_STRATEGIES
    assert settings.recover_timeout == 30.0


@pytest.mark.parametrize(("given_", "expected"), [
    ((), (Strategy.EXIT,)),
    ((Strategy.DUMP, Strategy.RETRY), (Strategy.RETRY, Strategy.DUMP, Strategy.EXIT)),
    ((Strategy.RECOVER, Strategy.RECOVER), (Strategy.RECOVER, Strategy.EXIT)),
    ((Strategy.EXIT, Strategy.RECOVER_IN_PLACE), (Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
])
def test_settings_normalise_the_strategies(given_: tuple[Strategy, ...],
                                           expected: tuple[Strategy, ...]) -> None:
    settings = policy.RecoverySettings(recover_strategy=given_)

    assert settings.recover_strategy == expected
    assert type(settings.recover_strategy) is tuple


def test_settings_refuse_fail_as_a_strategy() -> None:
    with pytest.raises(ValueError, match="'fail' is not a strategy one can enable"):
        policy.RecoverySettings(recover_strategy=(Strategy.FAIL,))


@pytest.mark.parametrize(("timeout", "shown"), [(0.0, "0.0"), (-1.0, "-1.0"), (math.nan, "nan")])
def test_settings_refuse_a_recover_timeout_not_above_zero(timeout: float, shown: str) -> None:
    text = f"recover-timeout must be > 0 seconds, got {shown}"

    with pytest.raises(ValueError, match=re.escape(text)) as caught:
        policy.RecoverySettings(recover_timeout=timeout)

    assert str(caught.value) == text


def test_settings_accept_a_small_recover_timeout() -> None:
    assert policy.RecoverySettings(recover_timeout=0.001).recover_timeout == 0.001


# --- fit_to_job ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("layout", "spares", "expected"), [
    (ReplicaLayout(8, 4), 2, NO_DUMP),
    (ReplicaLayout(8, 4), 0, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
    (ReplicaLayout(8, 1), 2, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
    (ReplicaLayout(8, 1), 0, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
    (ReplicaLayout(2, 2), 1, NO_DUMP),
])
def test_fit_to_job_trims_the_defaults_silently(layout: ReplicaLayout, spares: int,
                                                expected: tuple[Strategy, ...]) -> None:
    fitted = policy.fit_to_job(policy.DEFAULT_STRATEGIES, layout=layout, spares=spares,
                               explicit=False)

    assert fitted == expected


@pytest.mark.parametrize(("layout", "spares", "expected"), [
    (ReplicaLayout(8, 4), 2, ALL),
    (ReplicaLayout(8, 4), 0, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.DUMP,
                              Strategy.EXIT)),
    (ReplicaLayout(8, 1), 2, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
    (ReplicaLayout(8, 1), 0, (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)),
])
def test_fit_to_job_trims_an_implicit_list_with_dump_silently(
        layout: ReplicaLayout, spares: int, expected: tuple[Strategy, ...]) -> None:
    assert policy.fit_to_job(ALL, layout=layout, spares=spares, explicit=False) == expected


def test_fit_to_job_refuses_an_explicit_recover_without_spares() -> None:
    with pytest.raises(ValueError, match="spare") as caught:
        policy.fit_to_job((Strategy.RECOVER, Strategy.EXIT), layout=ReplicaLayout(8, 4),
                          spares=0, explicit=True)

    message = str(caught.value)
    assert message.startswith(
        "recover-strategy: move to spare (recover) moves failed ranks to spare devices")
    assert "spare" in message
    assert "--spare-devices" in message


def test_fit_to_job_refuses_an_explicit_recover_without_replicas() -> None:
    with pytest.raises(ValueError, match="replica") as caught:
        policy.fit_to_job((Strategy.RECOVER, Strategy.EXIT), layout=ReplicaLayout(8, 1),
                          spares=2, explicit=True)

    assert str(caught.value) == (
        "recover-strategy: move to spare (recover) loads the moved ranks' state from a "
        "data-parallel replica, and the job has none (--dp-size 1)")


def test_fit_to_job_refuses_an_explicit_dump_with_dp_size_one() -> None:
    with pytest.raises(ValueError, match="dump saves") as caught:
        policy.fit_to_job((Strategy.DUMP, Strategy.EXIT), layout=ReplicaLayout(4, 1), spares=3,
                          explicit=True)

    assert str(caught.value) == (
        "recover-strategy: dump saves the failed ranks' state from their data-parallel "
        "replicas, and the job has none (--dp-size 1)")


def test_fit_to_job_names_every_refused_strategy() -> None:
    with pytest.raises(ValueError, match=r"^recover-strategy: ") as caught:
        policy.fit_to_job(ALL, layout=ReplicaLayout(4, 1), spares=0, explicit=True)

    message = str(caught.value)
    assert message.count("; ") == 1
    assert "move to spare (recover) moves failed ranks to spare devices" in message
    assert "dump saves the failed ranks' state" in message
    assert message.index("(recover) moves") < message.index("dump saves")


@pytest.mark.parametrize("explicit", [True, False])
def test_fit_to_job_keeps_what_can_work(explicit: bool) -> None:
    chosen = (Strategy.RETRY, Strategy.RECOVER_IN_PLACE, Strategy.EXIT)

    assert policy.fit_to_job(chosen, layout=ReplicaLayout(4, 1), spares=0,
                             explicit=explicit) == chosen


# --- decide: the first strategy that fits -------------------------------------------------------


def test_a_retryable_device_fault_is_retried() -> None:
    decision = policy.decide(SETTINGS, _context(_fault(code=UCE)))

    assert decision == policy.Decision(Strategy.RETRY,
                                       "raised process: redo the step on every rank")


def test_a_lower_case_retryable_code_is_retried() -> None:
    assert _decide(_context(_fault(code=UCE.lower()))) is Strategy.RETRY


def test_a_communication_fault_is_retried() -> None:
    fault = _fault(kind=Kind.COMMUNICATION)

    decision = policy.decide(SETTINGS, _context(fault))

    assert decision == policy.Decision(Strategy.RETRY,
                                       "communication process: redo the step on every rank")


def test_retry_needs_every_failed_rank_to_be_transient() -> None:
    other = _fault(2, kind=Kind.RAISED)  # an ordinary exception on another rank
    context = _context(_fault(code=UCE), failed=[_fault(code=UCE), other])

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is Strategy.RECOVER_IN_PLACE
    assert decision.reason == ("raised process: restart the failed processes in place "
                               "(not retry step: not every fault is transient)")


def test_a_retryable_fault_with_a_process_gone_is_recovered_in_place() -> None:
    context = _context(_fault(kind=Kind.COMMUNICATION), alive=[0, 1, 3])

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is Strategy.RECOVER_IN_PLACE
    assert decision.reason.endswith(" (not retry step: a process is gone)")


def test_a_sigkilled_process_is_recovered_in_place() -> None:
    fault = _fault(kind=Kind.SIGNALED, returncode=-signal.SIGKILL, alive=False)

    decision = policy.decide(SETTINGS, _context(fault, alive=[0, 2, 3]))

    assert decision.strategy is Strategy.RECOVER_IN_PLACE
    assert decision.reason.endswith(" (not retry step: not every fault is transient)")


def test_a_sigkilled_process_with_a_retryable_code_is_not_retried() -> None:
    fault = _fault(kind=Kind.SIGNALED, returncode=-signal.SIGKILL, code=UCE, alive=False)

    decision = policy.decide(SETTINGS, _context(fault, alive=[0, 2, 3]))

    assert decision.strategy is Strategy.RECOVER_IN_PLACE
    assert decision.reason.endswith(" (not retry step: a process is gone)")


def test_a_restart_request_code_is_recovered_in_place_not_retried() -> None:
    assert _decide(_context(_fault(code=RESTART_REQUEST))) is Strategy.RECOVER_IN_PLACE


def test_a_separated_device_moves_to_a_spare() -> None:
    decision = policy.decide(SETTINGS, _context(_fault(code=SEPARATE), spares_left=1))

    assert decision.strategy is Strategy.RECOVER
    assert decision.reason == (
        "raised process: move the failed ranks to spare devices "
        "(not retry step: not every fault is transient; not restart failed ranks: "
        "rank 1's device is isolated (SeparateNPU) after code 80E3A201)")


def test_a_separated_device_without_spares_is_dumped() -> None:
    decision = policy.decide(SETTINGS, _context(_fault(code=SEPARATE), spares_left=0))

    assert decision.strategy is Strategy.DUMP
    assert decision.reason.endswith("not move to spare: 0 spare devices for 1 failed ranks)")


def test_default_settings_never_dump() -> None:
    settings = policy.RecoverySettings(max_restarts=5)
    context = _context(_fault(code=SEPARATE), spares_left=0)

    assert _decide(context, settings=settings) is Strategy.EXIT
    assert _decide(context, settings=SETTINGS) is Strategy.DUMP


def test_recover_needs_a_spare_for_every_failed_rank() -> None:
    faults = [_fault(1, code=SEPARATE), _fault(2, code=SEPARATE)]

    decision = policy.decide(SETTINGS, _context(faults[0], failed=faults, spares_left=1))

    assert decision.strategy is Strategy.DUMP
    assert "not move to spare: 1 spare devices for 2 failed ranks" in decision.reason


def test_failed_ranks_are_counted_once() -> None:
    # The same rank reported twice still needs one spare.
    faults = [_fault(1, code=SEPARATE), _fault(1, code=SEPARATE)]

    assert _decide(_context(faults[0], failed=faults, spares_left=1)) is Strategy.RECOVER


@pytest.mark.parametrize(("layout", "alive", "why"), [
    (ReplicaLayout(4, 1), None, "dp size 1: no replica"),
    (None, None, "no layout known"),
    (PAIRS, [0, 1, 2], "rank 1's replica, rank 3, is gone"),
])
def test_a_separated_device_without_a_healthy_replica_exits(
        layout: ReplicaLayout | None, alive: list[int] | None, why: str) -> None:
    context = _context(_fault(code=SEPARATE), spares_left=2, layout=layout, alive=alive)

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is Strategy.EXIT, why
    assert decision.reason.endswith(
        "not move to spare, dump: a failed rank has no healthy data-parallel replica)")


def test_replicas_found_different_stand_in_for_no_rank_and_the_reason_says_so() -> None:
    context = dataclasses.replace(_context(_fault(code=SEPARATE), spares_left=2),
                                  replicas_differ=True)

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is Strategy.EXIT
    assert decision.reason.endswith(
        "not move to spare, dump: the ranks found their replicas different, so none stands in "
        "for another)")


def test_a_failed_replica_is_no_healthy_donor() -> None:
    # Ranks 1 and 3 hold the same part and both failed: nobody can stand in for them.
    faults = [_fault(1, code=SEPARATE), _fault(3, code=SEPARATE)]

    assert _decide(_context(faults[0], failed=faults, spares_left=4)) is Strategy.EXIT


def test_a_healthy_replica_in_another_group_is_no_donor() -> None:
    # World 8, dp 4: rank 1's group is 1, 3, 5, 7; only rank 5 is left of it.
    context = _context(_fault(1, code=SEPARATE), world_size=8, layout=ReplicaLayout(8, 4),
                       alive=[0, 1, 2, 4, 5, 6], spares_left=1)
    assert _decide(context) is Strategy.RECOVER

    gone = _context(_fault(1, code=SEPARATE), world_size=8, layout=ReplicaLayout(8, 4),
                    alive=[0, 1, 2, 4, 6], spares_left=1)
    assert _decide(gone) is Strategy.EXIT


@pytest.mark.parametrize(("fault", "spares", "layout", "expected"), [
    (_fault(code=UCE), 1, PAIRS, Strategy.DUMP),
    (_fault(kind=Kind.COMMUNICATION), 1, PAIRS, Strategy.DUMP),
    (_fault(code=SEPARATE), 1, PAIRS, Strategy.DUMP),
    (_fault(code=UCE), 1, ReplicaLayout(4, 1), Strategy.EXIT),
    (_fault(kind=Kind.EXITED, returncode=1, alive=False), 0, None, Strategy.EXIT),
])
def test_without_session_run_only_dump_or_exit(
        fault: process.ProcessFault, spares: int, layout: ReplicaLayout | None,
        expected: Strategy) -> None:
    context = _context(fault, in_process=False, spares_left=spares, layout=layout)

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is expected
    assert decision.reason.startswith(f"{fault.kind} process: ")
    # A plain script never gets the in-process strategies, and the reason says why.
    assert ("(not retry step, restart failed ranks, move to spare: the script does not use "
            "session.run") in decision.reason


# --- decide: the fallback chain -----------------------------------------------------------------


def test_after_retry_comes_recover_in_place() -> None:
    decision = policy.decide(SETTINGS, _context(_fault(code=UCE)), after=Strategy.RETRY)

    assert decision == policy.Decision(Strategy.RECOVER_IN_PLACE,
                                       "raised process: restart the failed processes in place")


@pytest.mark.parametrize(("spares", "layout", "expected"), [
    (1, PAIRS, Strategy.RECOVER),
    (0, PAIRS, Strategy.DUMP),
    (1, ReplicaLayout(4, 1), Strategy.EXIT),
    (0, None, Strategy.EXIT),
])
def test_after_recover_in_place(spares: int, layout: ReplicaLayout | None,
                                expected: Strategy) -> None:
    context = _context(_fault(code=UCE), spares_left=spares, layout=layout)

    assert _decide(context, after=Strategy.RECOVER_IN_PLACE) is expected


def test_after_recover_comes_dump() -> None:
    context = _context(_fault(code=SEPARATE), spares_left=1)

    assert _decide(context, after=Strategy.RECOVER) is Strategy.DUMP


@pytest.mark.parametrize("fault", [_fault(code=UCE), _fault(code=SEPARATE),
                                   _fault(kind=Kind.COMMUNICATION)])
def test_after_dump_comes_exit(fault: process.ProcessFault) -> None:
    decision = policy.decide(SETTINGS, _context(fault, spares_left=3), after=Strategy.DUMP)

    assert decision == policy.Decision(Strategy.EXIT, f"{fault.kind} process: restart every "
                                                      "process")


def test_the_whole_chain_for_a_transient_fault() -> None:
    context = _context(_fault(code=UCE), spares_left=1)
    tried = []
    after = None
    while after is not Strategy.EXIT:
        after = _decide(context, after=after)
        tried.append(after)

    assert tried == list(ALL)


def test_no_budget_left_fails_even_for_a_retryable_fault() -> None:
    decision = policy.decide(SETTINGS, _context(_fault(code=UCE), restarts_left=0))

    assert decision.strategy is Strategy.FAIL
    assert decision.reason.startswith("retry budget exhausted (max-restarts 5); last fault: ")


def test_no_budget_left_fails_in_the_fallback_too() -> None:
    context = _context(_fault(code=UCE), restarts_left=0)

    assert _decide(context, after=Strategy.RETRY) is Strategy.FAIL


# --- decide: enabled strategies -----------------------------------------------------------------


def test_a_disabled_strategy_is_named_as_not_enabled() -> None:
    settings = policy.RecoverySettings(max_restarts=5,
                                       recover_strategy=(Strategy.RECOVER_IN_PLACE,))

    decision = policy.decide(settings, _context(_fault(code=UCE)))

    assert decision == policy.Decision(Strategy.RECOVER_IN_PLACE,
                                       "raised process: restart the failed processes in place "
                                       "(not retry step: not in --recover-strategy)")


@pytest.mark.parametrize(("enabled", "expected"), [
    ((), Strategy.EXIT),
    ((Strategy.DUMP,), Strategy.DUMP),
    ((Strategy.RECOVER,), Strategy.RECOVER),
    ((Strategy.RECOVER, Strategy.DUMP), Strategy.RECOVER),
    ((Strategy.RETRY, Strategy.RECOVER), Strategy.RETRY),
])
def test_only_enabled_strategies_are_chosen(enabled: tuple[Strategy, ...],
                                            expected: Strategy) -> None:
    settings = policy.RecoverySettings(max_restarts=5, recover_strategy=enabled)
    context = _context(_fault(code=UCE), spares_left=1)

    assert _decide(context, settings=settings) is expected


def test_disabled_strategies_are_skipped_in_the_fallback() -> None:
    settings = policy.RecoverySettings(max_restarts=5,
                                       recover_strategy=(Strategy.RETRY, Strategy.DUMP))
    context = _context(_fault(code=UCE), spares_left=1)

    assert _decide(context, settings=settings) is Strategy.RETRY
    assert _decide(context, settings=settings, after=Strategy.RETRY) is Strategy.DUMP


# --- decide: crash loops ------------------------------------------------------------------------


def test_ranks_that_left_alive_are_no_crash_loop() -> None:
    faults = [_fault(rank, code=UCE) for rank in range(4)]
    context = _context(faults[0], failed=faults, age=0.5, progressed=False)

    assert _decide(context) is Strategy.RETRY


def test_every_rank_exiting_early_is_still_a_crash_loop() -> None:
    faults = [_fault(rank, kind=Kind.EXITED, returncode=1, alive=False) for rank in range(4)]
    context = _context(faults[0], failed=faults, alive=(), age=0.5, progressed=False)

    decision = policy.decide(SETTINGS, context)

    assert decision.strategy is Strategy.FAIL
    assert decision.reason.startswith("crash loop: all 4 ranks failed within 0.5 s")


def test_ranks_that_lost_a_peer_do_not_make_a_crash_loop() -> None:
    first = _fault(0, kind=Kind.EXITED, returncode=1, alive=False)
    rest = [_fault(rank, kind=Kind.EXITED, returncode=1, alive=False,
                   error="RuntimeError: Connection closed by peer") for rank in range(1, 4)]
    context = _context(first, failed=[first, *rest], alive=(), age=0.5, progressed=False,
                       layout=None, in_process=False)

    assert _decide(context) is Strategy.EXIT


# --- properties ---------------------------------------------------------------------------------

CODES = ["", UCE, UCE.lower(), "8C1F860B", SEPARATE, RESTART_REQUEST, "A2301001", "FFFFFFFF"]
LAYOUTS = {1: [1], 2: [1, 2], 4: [1, 2, 4], 8: [1, 2, 4, 8]}


SOME_RESTARTS = st.integers(1, 5)


@st.composite
def fault_contexts(draw: st.DrawFn, *, restarts_left: st.SearchStrategy[int] = SOME_RESTARTS
                   ) -> policy.FaultContext:
    world_size = draw(st.sampled_from(sorted(LAYOUTS)))
    dp_size = draw(st.sampled_from(LAYOUTS[world_size]))
    layout = draw(st.none() | st.just(ReplicaLayout(world_size, dp_size)))
    ranks = draw(st.lists(st.integers(0, world_size - 1), min_size=1, max_size=world_size))
    faults = [process.ProcessFault(
        rank=rank, pid=1000 + rank, kind=draw(st.sampled_from(Kind)), detected_at=50.0,
        returncode=draw(st.none() | st.sampled_from([1, -signal.SIGKILL, -signal.SIGSEGV])),
        code=draw(st.sampled_from(CODES)), alive=draw(st.booleans()),
        error_excerpt=draw(st.sampled_from(["", "broken pipe"]))) for rank in ranks]
    alive = draw(st.sets(st.integers(0, world_size - 1)))
    return policy.FaultContext(
        fault=faults[0], age=100.0, progressed=True, world_size=world_size, failed=faults,
        restarts_left=draw(restarts_left), in_process=draw(st.booleans()), alive=alive,
        spares_left=draw(st.integers(0, 3)), layout=layout)


enabled_sets = st.lists(st.sampled_from(ALL[:-1]), unique=True)
afters = st.none() | st.sampled_from(ALL[:-1])


@given(enabled=enabled_sets, context=fault_contexts(), after=afters)
def test_decide_property(enabled: list[Strategy], context: policy.FaultContext,
                         after: Strategy | None) -> None:
    settings = policy.RecoverySettings(max_restarts=5, recover_strategy=tuple(enabled))

    decision = policy.decide(settings, context, after=after)
    strategy = decision.strategy

    assert strategy is not Strategy.FAIL  # budget left and no crash loop: exit always fits
    assert strategy in settings.recover_strategy
    assert strategy is Strategy.EXIT or strategy in enabled
    if after is not None:
        assert policy.CHAIN.index(strategy) > policy.CHAIN.index(after)
    failed = {f.rank for f in context.failed}
    if strategy in policy.IN_PROCESS:
        assert context.in_process
    if strategy is Strategy.RETRY:
        assert all(f.retryable for f in context.failed)
        assert set(context.alive) >= set(range(context.world_size))
    if strategy is Strategy.RECOVER_IN_PLACE:
        assert all(f.in_place for f in context.failed)
    if strategy is Strategy.RECOVER:
        assert context.spares_left >= len(failed)
    if strategy in (Strategy.RECOVER, Strategy.DUMP):
        assert context.layout is not None
        healthy = set(context.alive) - failed
        assert all(set(context.layout.group(rank)) & healthy for rank in failed)
    assert decision.reason.startswith(f"{context.fault.kind} process: ")


@given(enabled=enabled_sets, context=fault_contexts(), after=afters)
def test_decide_picks_the_first_that_fits_property(
        enabled: list[Strategy], context: policy.FaultContext, after: Strategy | None) -> None:
    """Enabling more strategies later in the chain never changes an earlier choice."""
    settings = policy.RecoverySettings(max_restarts=5, recover_strategy=tuple(enabled))
    chosen = policy.decide(settings, context, after=after).strategy
    later = tuple(s for s in ALL if policy.CHAIN.index(s) > policy.CHAIN.index(chosen))
    more = policy.RecoverySettings(max_restarts=5, recover_strategy=(*enabled, *later))

    assert policy.decide(more, context, after=after).strategy is chosen


@given(enabled=enabled_sets, context=fault_contexts(restarts_left=st.integers(-3, 0)),
       after=afters)
def test_no_budget_always_fails_property(enabled: list[Strategy], context: policy.FaultContext,
                                         after: Strategy | None) -> None:
    settings = policy.RecoverySettings(max_restarts=5, recover_strategy=tuple(enabled))

    decision = policy.decide(settings, context, after=after)

    assert decision.strategy is Strategy.FAIL
    assert decision.reason.startswith("retry budget exhausted")
