"""The escalation engine: frequency and duration rules, reasons, release and reconfiguration."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.faults.device.customization import (
    Customization,
    DurationRule,
    FrequencyRule,
    default_customization,
)
from trainguard.faults.device.device_events import (
    Assertion,
    DeviceFaultEvent,
    UpgradeReason,
    UpgradeType,
)
from trainguard.faults.device.escalation import Escalation, EscalationState
from trainguard.faults.device.fault_codes import NETWORK_CODES
from trainguard.faults.levels import Level

DAY = 86400.0
LINK_DOWN = "81078603"
MANUAL = Level.MANUALLY_SEPARATE_NPU
FREQUENCY = UpgradeType.FAULT_FREQUENCY
DURATION = UpgradeType.FAULT_DURATION

SEPARATE = FrequencyRule(0x80C98000, "80C98000", 100.0, 3, Level.SEPARATE_NPU, 60.0)
RESTART = DurationRule(0x80B78000, "80B78000", 10.0, 30.0, Level.RESTART_NPU)


def custom(frequency: Iterable[FrequencyRule] = (),
           duration: Iterable[DurationRule] = ()) -> Customization:
    return Customization(frequency={rule.event_id: rule for rule in frequency},
                         duration={rule.event_id: rule for rule in duration})


def engine(customization: Customization | None = None) -> Escalation:
    return Escalation(customization or default_customization(),
                      is_network=NETWORK_CODES.__contains__)


def feed(escalation: Escalation, *events: tuple[str, str, float], device: str = "npu-0"
         ) -> EscalationState:
    """Observe ``(assertion, code, time)`` events, evaluating after each; the last state."""
    state = escalation.evaluate(device, 0.0)
    for assertion, code, time in events:
        escalation.observe(DeviceFaultEvent(device, code, Assertion(assertion), time))
        state = escalation.evaluate(device, time)
    return state


def outage(code: str, start: float, length: float) -> list[tuple[str, str, float]]:
    return [("occur", code, start), ("recover", code, start + length)]


# --- frequency -----------------------------------------------------------------------------


def test_unconfigured_code_changes_nothing() -> None:
    escalation = engine()

    state = feed(escalation, ("occur", "A2301001", 1.0), ("occur", "A2301001", 2.0))

    assert state == EscalationState(Level.NORMAL_NPU, Level.NORMAL_NETWORK, False, (), (), ())
    assert escalation.devices() == []


def test_times_occurrences_in_the_window_raise_the_level() -> None:
    escalation = engine(custom([SEPARATE]))

    state = feed(escalation, ("occur", "80C98000", 0.0), ("occur", "80c98000", 50.0))
    assert state.chip is Level.NORMAL_NPU
    state = feed(escalation, ("occur", "80C98000", 100.0))

    reason = UpgradeReason("80C98000", Level.SEPARATE_NPU, FREQUENCY, 100.0)
    assert state == EscalationState(Level.SEPARATE_NPU, Level.NORMAL_NETWORK, False, (reason,),
                                    (reason,), ())


def test_window_keeps_an_occurrence_exactly_time_window_old() -> None:
    escalation = engine(custom([SEPARATE]))
    escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, 0.0))
    escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, 50.0))
    escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, 100.5))

    assert escalation.evaluate("npu-0", 100.5).chip is Level.NORMAL_NPU  # 0 is 100.5 s old

    escalation = engine(custom([SEPARATE]))
    for time in (0.0, 50.0, 100.0):
        escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, time))

    assert escalation.evaluate("npu-0", 100.0).chip is Level.SEPARATE_NPU


def test_trigger_clears_occurrences_and_the_reason_carries_the_level() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)])

    state = feed(escalation, ("occur", "80C98000", 3.0), ("occur", "80C98000", 4.0))

    # the level stays, refreshed to the last fault; the two new ones do not trigger again
    assert state.chip is Level.SEPARATE_NPU
    assert state.reasons == (UpgradeReason("80C98000", Level.SEPARATE_NPU, FREQUENCY, 4.0),)
    assert state.added == ()


def test_release_window_counts_from_the_last_recovery() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)],
         ("recover", "80C98000", 10.0))

    assert escalation.evaluate("npu-0", 70.0).chip is Level.SEPARATE_NPU  # exactly 60 s
    state = escalation.evaluate("npu-0", 70.5)

    assert state.chip is Level.NORMAL_NPU
    assert state.removed == (UpgradeReason("80C98000", Level.SEPARATE_NPU, FREQUENCY, 2.0),)
    assert escalation.devices() == []


def test_no_release_while_the_fault_is_not_recovered() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)],
         ("recover", "80C98000", 3.0), ("occur", "80C98000", 4.0))

    assert escalation.evaluate("npu-0", 10_000.0).chip is Level.SEPARATE_NPU
    assert escalation.devices_due() == ["npu-0"]


def test_a_once_notification_is_over_when_it_arrives() -> None:
    escalation = engine(custom([SEPARATE]))
    state = feed(escalation, *[("once", "80C98000", time) for time in (0.0, 1.0, 2.0)])
    assert state.chip is Level.SEPARATE_NPU

    assert escalation.evaluate("npu-0", 62.5).chip is Level.NORMAL_NPU


def test_network_code_frequency_raises_the_network() -> None:
    rule = FrequencyRule(0x81078607, "81078607", 100.0, 1, Level.SEPARATE_NPU, 60.0)
    state = feed(engine(custom([rule])), ("occur", "81078607", 5.0))

    assert (state.chip, state.network) == (Level.NORMAL_NPU, Level.SEPARATE_NPU)


def test_every_id_of_a_device_counts_in_one_evaluation() -> None:
    other = FrequencyRule(0x80B78000, "80B78000", 100.0, 1, Level.RESTART_NPU, 60.0)
    escalation = engine(custom([SEPARATE, other]))
    for time in (0.0, 1.0, 2.0):
        escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, time))
    escalation.observe(DeviceFaultEvent("npu-0", "80B78000", Assertion.OCCUR, 2.0))

    state = escalation.evaluate("npu-0", 3.0)

    assert {reason.fault_level for reason in state.added} == {Level.SEPARATE_NPU,
                                                              Level.RESTART_NPU}
    assert state.chip is Level.SEPARATE_NPU


def test_devices_are_independent() -> None:
    escalation = engine(custom([SEPARATE]))
    for time, device in ((0.0, "npu-0"), (1.0, "npu-1"), (2.0, "npu-0"), (3.0, "npu-1")):
        escalation.observe(DeviceFaultEvent(device, "80C98000", Assertion.OCCUR, time))

    assert escalation.evaluate("npu-0", 4.0).chip is Level.NORMAL_NPU
    assert sorted(escalation.devices()) == ["npu-0", "npu-1"]


# --- ManuallySeparateNPU -------------------------------------------------------------------


def test_hbm_uce_twice_in_a_day_is_manually_separated_until_released() -> None:
    escalation = engine()
    state = feed(escalation, ("occur", "80E01801", 0.0), ("recover", "80E01801", 5.0),
                 ("occur", "80E01801", DAY - 1.0), ("recover", "80E01801", DAY))

    reason = UpgradeReason("80E01801", MANUAL, FREQUENCY, DAY - 1.0)
    assert state == EscalationState(MANUAL, Level.NORMAL_NETWORK, True, (reason,), (), ())
    assert escalation.evaluate("npu-0", 1000 * DAY).manually_separated  # no release window
    assert escalation.devices_due() == []  # time alone changes nothing

    released = escalation.release("npu-0", 1000 * DAY)

    assert released == EscalationState(Level.NORMAL_NPU, Level.NORMAL_NETWORK, False, (), (),
                                       (reason,))
    assert escalation.evaluate("npu-0", 1000 * DAY + 1).chip is Level.NORMAL_NPU


def test_hbm_uce_twice_more_than_a_day_apart_is_not_separated() -> None:
    state = feed(engine(), ("occur", "80E01801", 0.0), ("recover", "80E01801", 5.0),
                 ("occur", "80E01801", DAY + 0.5))

    assert not state.manually_separated


def test_release_of_a_device_without_state_is_normal() -> None:
    assert engine().release("npu-9", 5.0).chip is Level.NORMAL_NPU


def test_release_keeps_reasons_of_other_levels() -> None:
    manual = FrequencyRule(0x80E18005, "80E18005", 100.0, 1, MANUAL, None)
    escalation = engine(custom([SEPARATE, manual]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)],
         ("occur", "80E18005", 3.0))

    state = escalation.release("npu-0", 4.0)

    assert state.chip is Level.SEPARATE_NPU
    assert [reason.fault_level for reason in state.removed] == [MANUAL]


# --- duration ------------------------------------------------------------------------------


def test_duration_raises_while_timed_out_and_lowers_after_recover_timeout() -> None:
    escalation = engine(custom(duration=[RESTART]))
    feed(escalation, ("occur", "80B78000", 100.0))

    assert escalation.evaluate("npu-0", 110.0).chip is Level.NORMAL_NPU  # exactly 10 s
    state = escalation.evaluate("npu-0", 110.5)
    reason = UpgradeReason("80B78000", Level.RESTART_NPU, DURATION, 110.0)
    assert (state.chip, state.added) == (Level.RESTART_NPU, (reason,))

    state = feed(escalation, ("recover", "80B78000", 200.0))
    assert state.chip is Level.RESTART_NPU
    assert escalation.evaluate("npu-0", 230.0).chip is Level.RESTART_NPU  # exactly 30 s
    state = escalation.evaluate("npu-0", 230.5)
    assert (state.chip, state.removed) == (Level.NORMAL_NPU, (reason,))
    assert escalation.devices() == []


def test_link_down_longer_than_20_s_pre_separates_the_network() -> None:
    escalation = engine()
    feed(escalation, ("occur", LINK_DOWN, 0.0))

    state = escalation.evaluate("npu-0", 20.5)

    assert (state.chip, state.network) == (Level.NORMAL_NPU, Level.PRE_SEPARATE_NPU)
    assert escalation.devices_due() == []  # timed out, nothing queued


def test_devices_due_are_those_with_pending_judgments() -> None:
    escalation = engine()
    escalation.observe(DeviceFaultEvent("npu-3", LINK_DOWN, Assertion.OCCUR, 0.0))

    assert escalation.devices_due() == ["npu-3"]
    escalation.evaluate("npu-3", 5.0)
    assert escalation.devices_due() == ["npu-3"]  # the occur still waits
    escalation.observe(DeviceFaultEvent("npu-3", LINK_DOWN, Assertion.RECOVER, 6.0))
    escalation.evaluate("npu-3", 6.0)
    assert (escalation.devices_due(), escalation.devices()) == ([], [])


def test_flapping_link_is_manually_separated_then_released() -> None:
    """Five outages of more than 20 s within a day separate the chip manually; outages of 20 s
    or less never count; two days after the last recovery (confirmed 60 s after it) with no
    new fault, the separation is released."""
    escalation = engine()
    for hour in range(20):  # 20 outages of exactly 20 s: never counted
        state = feed(escalation, *outage(LINK_DOWN, hour * 3600.0, 20.0))
        state = escalation.evaluate("npu-0", hour * 3600.0 + 100.0)
        assert (state.network, state.reasons) == (Level.NORMAL_NETWORK, ())

    starts = [DAY + hour * 3600.0 for hour in range(5)]
    for number, start in enumerate(starts, 1):
        feed(escalation, ("occur", LINK_DOWN, start))
        state = escalation.evaluate("npu-0", start + 25.0)
        if number < 5:
            assert (state.chip, state.network) == (Level.NORMAL_NPU, Level.PRE_SEPARATE_NPU)
            assert [reason.upgrade_type for reason in state.added] == [DURATION]
        else:
            assert (state.chip, state.network, state.manually_separated) == (MANUAL, MANUAL, True)
            assert {reason.upgrade_type for reason in state.added} == {DURATION, FREQUENCY}
        feed(escalation, ("recover", LINK_DOWN, start + 30.0))
        state = escalation.evaluate("npu-0", start + 91.0)
        assert [reason.upgrade_type for reason in state.removed] == [DURATION]

    assert state.reasons == (UpgradeReason(LINK_DOWN, MANUAL, FREQUENCY, starts[-1] + 20.0),)
    recovered = starts[-1] + 30.0 + 60.0
    assert escalation.evaluate("npu-0", recovered + 172800.0).manually_separated
    state = escalation.evaluate("npu-0", recovered + 172800.5)
    assert (state.chip, state.network, state.manually_separated) == (
        Level.NORMAL_NPU, Level.NORMAL_NETWORK, False)
    assert [reason.fault_level for reason in state.removed] == [MANUAL]


def test_an_outage_during_the_release_window_restarts_it() -> None:
    escalation = engine()
    for hour in range(5):
        feed(escalation, *outage(LINK_DOWN, hour * 3600.0, 30.0))
        escalation.evaluate("npu-0", hour * 3600.0 + 25.0)
    late = 5 * 3600.0 + 100_000.0
    feed(escalation, ("occur", LINK_DOWN, late))
    escalation.evaluate("npu-0", late + 25.0)
    feed(escalation, ("recover", LINK_DOWN, late + 30.0))

    assert escalation.evaluate("npu-0", 4 * 3600.0 + 90.0 + 172801.0).manually_separated
    assert escalation.evaluate("npu-0", late + 90.0 + 172800.0).manually_separated
    assert not escalation.evaluate("npu-0", late + 90.0 + 172800.5).manually_separated


# --- reconfiguration -----------------------------------------------------------------------


def test_deleted_rule_removes_its_raised_level_at_the_next_evaluation() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)])

    escalation.reconfigure(custom())
    state = escalation.evaluate("npu-0", 10.0)

    assert state.chip is Level.NORMAL_NPU
    assert state.removed == (UpgradeReason("80C98000", Level.SEPARATE_NPU, FREQUENCY, 2.0),)
    assert escalation.devices() == []


def test_changed_handling_moves_the_raised_level() -> None:
    escalation = engine(custom([SEPARATE], [RESTART]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)],
         ("occur", "80B78000", 3.0))
    escalation.evaluate("npu-0", 20.0)

    escalation.reconfigure(custom(
        [FrequencyRule(0x80C98000, "80C98000", 100.0, 3, Level.PRE_SEPARATE_NPU, 60.0)],
        [DurationRule(0x80B78000, "80B78000", 10.0, 30.0, Level.FREE_RESTART_NPU)]))
    state = escalation.evaluate("npu-0", 26.0)

    assert state.chip is Level.PRE_SEPARATE_NPU
    assert {(reason.fault_level, reason.upgrade_time) for reason in state.reasons} == {
        (Level.PRE_SEPARATE_NPU, 2.0), (Level.FREE_RESTART_NPU, 13.0)}
    assert {reason.fault_level for reason in state.removed} == {Level.SEPARATE_NPU,
                                                                Level.RESTART_NPU}
    assert len(state.added) == 2


def test_manual_separation_survives_deleting_or_changing_its_rule() -> None:
    escalation = engine()
    feed(escalation, ("occur", "80E01801", 0.0), ("occur", "80E01801", 1.0))

    escalation.reconfigure(custom())
    assert escalation.evaluate("npu-0", 6.0).manually_separated
    escalation.reconfigure(custom([FrequencyRule(0x80E01801, "80E01801", 100.0, 2,
                                                 Level.SEPARATE_NPU, 60.0)]))
    state = escalation.evaluate("npu-0", 1e9)

    assert (state.chip, state.removed) == (MANUAL, ())
    assert escalation.release("npu-0", 1e9).chip is Level.NORMAL_NPU


def test_a_level_is_not_moved_to_manual_separation() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, *[("occur", "80C98000", time) for time in (0.0, 1.0, 2.0)])

    escalation.reconfigure(custom([FrequencyRule(0x80C98000, "80C98000", 100.0, 3, MANUAL,
                                                 None)]))
    state = escalation.evaluate("npu-0", 6.0)

    assert (state.chip, state.manually_separated, state.added, state.removed) == (
        Level.SEPARATE_NPU, False, (), ())


def test_dropped_ids_forget_their_history() -> None:
    escalation = engine(custom([SEPARATE]))
    feed(escalation, ("occur", "80C98000", 0.0), ("occur", "80C98000", 1.0))

    escalation.reconfigure(custom())
    escalation.reconfigure(custom([SEPARATE]))

    assert feed(escalation, ("occur", "80C98000", 4.0)).chip is Level.NORMAL_NPU


# --- properties ----------------------------------------------------------------------------

CODES = ["80C98000", "80B78000", "80E18005", LINK_DOWN, "81078607", "A2301001"]
events = st.lists(st.tuples(st.integers(0, 90), st.sampled_from(CODES),
                            st.sampled_from(list(Assertion)), st.sampled_from(["a", "b"])),
                  max_size=40)


def run(escalation: Escalation, faults: Iterable[DeviceFaultEvent],
        evaluations: Iterable[float] = ()) -> list[tuple[float, str, EscalationState]]:
    """Feed events in time order; evaluate both devices at each event's and each extra time."""
    states = []
    pending = sorted(faults, key=lambda event: event.time)
    for now in sorted({*evaluations, *(event.time for event in pending)}):
        while pending and pending[0].time <= now:
            escalation.observe(pending.pop(0))
        for device in ("a", "b"):
            states.append((now, device, escalation.evaluate(device, now)))
    return states


def timed(steps: Sequence[tuple[int, str, Assertion, str]]) -> list[DeviceFaultEvent]:
    """Events from (seconds since the previous one, code, assertion, device)."""
    time, result = 0.0, []
    for delta, code, assertion, device in steps:
        time += delta
        result.append(DeviceFaultEvent(device, code, assertion, time))
    return result


@given(events)
def test_same_events_give_the_same_states(steps: list[tuple[int, str, Assertion, str]]) -> None:
    customization = custom(
        [SEPARATE, FrequencyRule(0x80E18005, "80E18005", 120.0, 2, MANUAL, None),
         FrequencyRule(0x81078603, LINK_DOWN, 300.0, 2, MANUAL, 100.0)],
        [RESTART, DurationRule(0x81078603, LINK_DOWN, 5.0, 15.0, Level.PRE_SEPARATE_NPU)])
    extra = [500.0, 1000.0]

    assert run(engine(customization), timed(steps), extra) == run(engine(customization),
                                                                 timed(steps), extra)


@settings(max_examples=200)
@given(events, st.integers(0, 900), st.sampled_from(CODES), st.sampled_from(["a", "b"]),
       st.integers(1, 3), st.integers(0, 30))
def test_an_extra_occurring_fault_never_lowers_a_level(
        steps: list[tuple[int, str, Assertion, str]], at: int, code: str, device: str,
        times: int, timeout: int) -> None:
    """For frequency rules without release window, and for duration rules alone. Not in
    general: a fault that triggers a frequency rule early clears its occurrences, and after a
    release the later faults must add up again; and a fault that keeps a link down through
    RecoverTimeout joins two outages into one occurrence."""
    customization = custom(
        [FrequencyRule(0x80C98000, "80C98000", 100.0, times, MANUAL, None),
         FrequencyRule(0x80E18005, "80E18005", 50.0, times + 1, MANUAL, None)],
        [DurationRule(0x80B78000, "80B78000", float(timeout), 20.0, Level.RESTART_NPU),
         DurationRule(0x81078603, LINK_DOWN, 10.0, float(timeout), Level.PRE_SEPARATE_NPU)])
    base = timed(steps)
    extra = DeviceFaultEvent(device, code, Assertion.OCCUR, float(at))
    evaluations = [*(event.time for event in base), float(at), 2000.0]

    before = run(engine(customization), base, evaluations)
    after = run(engine(customization), [*base, extra], evaluations)

    for (now, name, old), (_, _, new) in zip(before, after, strict=True):
        assert new.chip.severity >= old.chip.severity, (now, name)
        assert new.network.severity >= old.network.severity, (now, name)


@given(st.integers(60, 864000), st.integers(1, 10), st.integers(0, 10**6))
def test_window_edges(window: int, times: int, start: int) -> None:
    """Times occurrences spanning exactly TimeWindow trigger; spanning one second more not."""
    rule = FrequencyRule(0x80C98000, "80C98000", float(window), times, Level.SEPARATE_NPU, 60.0)
    for span, triggered in ((window, True), (window + 1, False)):
        escalation = engine(custom([rule]))
        now = float(start + span)
        moments = [float(start)] + [now] * (times - 1)
        for moment in moments:
            escalation.observe(DeviceFaultEvent("npu-0", "80C98000", Assertion.OCCUR, moment))

        state = escalation.evaluate("npu-0", now)

        assert (state.chip is Level.SEPARATE_NPU) is triggered
