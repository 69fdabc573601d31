"""faultCustomization.json: every range edge, the fallbacks, and what each problem says."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device.customization import (
    Customization,
    DurationRule,
    FrequencyRule,
    GraceTolerance,
    default_customization,
)
from trainguard.faults.levels import Level

LINK_DOWN = 0x81078603
GRACE = {"WaitProcessReadCMTime": 30, "WaitDeviceResetTime": 150, "WaitFaultSelfHealingTime": 15}


def load(document: object) -> tuple[Customization, list[ConfigProblem]]:
    return Customization.from_document(document, file="custom.json")


def frequency(**fields: object) -> dict[str, object]:
    """A valid FaultFrequency rule for 80C98000, with ``fields`` changed (None removes one)."""
    rule: dict[str, object] = {"EventId": ["80C98000"], "TimeWindow": 3600, "Times": 3,
                               "FaultHandling": "SeparateNPU", "ReleaseTimeWindow": 600}
    rule.update(fields)
    return {key: value for key, value in rule.items() if value is not None}


def duration(**fields: object) -> dict[str, object]:
    rule: dict[str, object] = {"EventId": ["80C98000"], "FaultTimeout": 10,
                               "RecoverTimeout": 30, "FaultHandling": "RestartNPU"}
    rule.update(fields)
    return {key: value for key, value in rule.items() if value is not None}


def with_rules(frequency_rules: object = (), duration_rules: object = ()) -> dict[str, object]:
    return {"GraceTolerance": GRACE,
            "FaultFrequency": list(frequency_rules) if isinstance(frequency_rules, tuple)
            else frequency_rules,
            "FaultDuration": list(duration_rules) if isinstance(duration_rules, tuple)
            else duration_rules}


# --- the shipped default -------------------------------------------------------------------


def test_shipped_file_loads_without_problems() -> None:
    text = resources.files("trainguard.faults").joinpath("data", "faultCustomization.json")
    loaded, problems = load(json.loads(text.read_text()))

    assert problems == []
    assert loaded == default_customization()


def test_default_rules_are_the_originals() -> None:
    default = default_customization()

    assert default.grace == GraceTolerance(30.0, 150.0, 15.0)
    assert len(default.frequency) == 43  # 41 codes in the first rule, 80E18005, 81078603
    assert default.frequency[0x80E01801] == FrequencyRule(
        0x80E01801, "80E01801", 86400.0, 2, Level.MANUALLY_SEPARATE_NPU, None)
    assert default.frequency[0x80E18005].times == 3
    assert default.frequency[LINK_DOWN] == FrequencyRule(
        LINK_DOWN, "81078603", 86400.0, 5, Level.MANUALLY_SEPARATE_NPU, 172800.0)
    assert default.duration == {LINK_DOWN: DurationRule(
        LINK_DOWN, "81078603", 20.0, 60.0, Level.PRE_SEPARATE_NPU)}


def test_default_customization_is_cached() -> None:
    assert default_customization() is default_customization()


# --- GraceTolerance ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "attribute", "low", "high", "default"), [
    ("WaitProcessReadCMTime", "wait_process_read_cm_time", 5, 90, 30.0),
    ("WaitDeviceResetTime", "wait_device_reset_time", 60, 180, 150.0),
    ("WaitFaultSelfHealingTime", "wait_fault_self_healing_time", 1, 30, 15.0),
])
def test_grace_range_edges(name: str, attribute: str, low: int, high: int,
                           default: float) -> None:
    for value, expected in ((low, float(low)), (high, float(high)), (low - 1, default),
                            (high + 1, default)):
        loaded, problems = load({**with_rules(), "GraceTolerance": {**GRACE, name: value}})

        assert getattr(loaded.grace, attribute) == expected
        assert bool(problems) is (expected == default), value
    _, problems = load({**with_rules(), "GraceTolerance": {**GRACE, name: high + 1}})
    assert problems == [ConfigProblem(
        "custom.json", "GraceTolerance", name,
        f"{high + 1} is not a whole number of seconds in {low}..{high}; the default "
        f"{default:g} is used", Action.DEFAULT_USED)]


@pytest.mark.parametrize("value", ["30", 30.5, True, None])
def test_grace_field_of_wrong_type_or_missing_takes_its_default(value: object) -> None:
    grace = {**GRACE, "WaitProcessReadCMTime": value}
    if value is None:
        del grace["WaitProcessReadCMTime"]
    loaded, problems = load({**with_rules(), "GraceTolerance": {**grace,
                                                                 "WaitDeviceResetTime": 61}})

    assert loaded.grace == GraceTolerance(30.0, 61.0, 15.0)
    assert [(problem.field, problem.action) for problem in problems] == [
        ("WaitProcessReadCMTime", Action.DEFAULT_USED)]
    assert problems[0].message.startswith("missing" if value is None else repr(value))


@pytest.mark.parametrize(("section", "message"), [(None, "missing; defaults used"),
                                                  ([30], "not an object; defaults used")])
def test_grace_section_missing_or_not_an_object(section: object, message: str) -> None:
    document = with_rules()
    if section is None:
        del document["GraceTolerance"]
    else:
        document["GraceTolerance"] = section
    loaded, problems = load(document)

    assert loaded.grace == GraceTolerance()
    assert problems == [ConfigProblem("custom.json", "GraceTolerance", "", message,
                                      Action.DEFAULT_USED)]


# --- FaultFrequency ------------------------------------------------------------------------


def test_valid_frequency_rule() -> None:
    loaded, problems = load(with_rules([frequency(EventId=["80c98000", "80B78000"])]))

    assert problems == []
    assert loaded.frequency == {
        0x80C98000: FrequencyRule(0x80C98000, "80c98000", 3600.0, 3, Level.SEPARATE_NPU, 600.0),
        0x80B78000: FrequencyRule(0x80B78000, "80B78000", 3600.0, 3, Level.SEPARATE_NPU, 600.0)}
    assert loaded.duration == {}


@pytest.mark.parametrize(("field", "value", "valid"), [
    ("TimeWindow", 59, False), ("TimeWindow", 60, True), ("TimeWindow", 864000, True),
    ("TimeWindow", 864001, False),
    ("Times", 0, False), ("Times", 1, True), ("Times", 100, True), ("Times", 101, False),
    ("ReleaseTimeWindow", 59, False), ("ReleaseTimeWindow", 60, True),
    ("ReleaseTimeWindow", 2**32 - 1, True), ("ReleaseTimeWindow", 2**32, False),
    ("ReleaseTimeWindow", -1, False),
])
def test_frequency_range_edges(field: str, value: int, valid: bool) -> None:
    loaded, problems = load(with_rules([frequency(**{field: value})]))

    assert (0x80C98000 in loaded.frequency) is valid
    if valid:
        assert problems == []
    else:
        assert len(problems) == 1
        assert (problems[0].entry, problems[0].field, problems[0].action) == (
            "FaultFrequency[0]", field, Action.IGNORED)
        assert problems[0].message.endswith("; the rule is ignored")


@pytest.mark.parametrize("release", [0, None])
def test_release_window_zero_or_absent_means_never_and_needs_manual_separation(
        release: int | None) -> None:
    manual = frequency(FaultHandling="ManuallySeparateNPU", ReleaseTimeWindow=release)
    loaded, problems = load(with_rules([manual]))

    assert problems == []
    assert loaded.frequency[0x80C98000].release_window is None

    loaded, problems = load(with_rules([frequency(ReleaseTimeWindow=release)]))

    assert loaded.frequency == {}
    assert [(problem.field, problem.action) for problem in problems] == [
        ("ReleaseTimeWindow", Action.IGNORED)]
    assert "required unless FaultHandling is ManuallySeparateNPU" in problems[0].message


@pytest.mark.parametrize("handling", [None, "NormalNPU", "Separate", "separatenpu"])
def test_frequency_handling_missing_or_unknown_ignores_the_rule(handling: str | None) -> None:
    loaded, problems = load(with_rules([frequency(FaultHandling=handling)]))

    assert loaded.frequency == {}
    assert [(problem.field, problem.action) for problem in problems] == [
        ("FaultHandling", Action.IGNORED)]


@pytest.mark.parametrize("handling", sorted(set(Level) - {Level.NORMAL_NPU,
                                                          Level.NORMAL_NETWORK}))
def test_every_fault_level_is_a_frequency_handling(handling: Level) -> None:
    loaded, problems = load(with_rules([frequency(FaultHandling=str(handling))]))

    assert problems == []
    assert loaded.frequency[0x80C98000].handling is handling


def test_every_bad_value_of_a_rule_is_reported() -> None:
    _, problems = load(with_rules([frequency(TimeWindow=1, Times=0)]))

    assert [problem.field for problem in problems] == ["TimeWindow", "Times"]


@pytest.mark.parametrize("ids", [[], None])
def test_rule_without_event_id_is_ignored(ids: list[str] | None) -> None:
    loaded, problems = load(with_rules([frequency(EventId=ids)]))

    assert loaded.frequency == {}
    assert problems == [ConfigProblem("custom.json", "FaultFrequency[0]", "EventId",
                                      "no event id; the rule is ignored", Action.IGNORED)]


def test_first_valid_rule_of_an_id_wins() -> None:
    rules = [frequency(Times=0),  # invalid: does not claim the id
             frequency(Times=4, EventId=["80C98000", "80B78000"]),
             frequency(Times=5, EventId=["80c98000", "80E18005"])]
    loaded, problems = load(with_rules(rules))

    assert {key: rule.times for key, rule in loaded.frequency.items()} == {
        0x80C98000: 4, 0x80B78000: 4, 0x80E18005: 5}
    assert problems[1:] == [ConfigProblem(
        "custom.json", "FaultFrequency[2]", "EventId",
        "80c98000 already has a rule in FaultFrequency[1]", Action.IGNORED)]


def test_id_that_is_not_a_code_is_ignored_alone() -> None:
    loaded, problems = load(with_rules([frequency(EventId=["80C9 8000", "", "XID-79"])]))

    assert set(loaded.frequency) == {"XID-79"}
    assert [problem.message for problem in problems] == [
        "'80C9 8000' is not a fault code", "'' is not a fault code"]


def test_unknown_keys_are_reported_and_ignored() -> None:
    document = {**with_rules([{**frequency(), "ReleaseTimewindow": 60}]), "Extra": 1}
    loaded, problems = load(document)

    assert 0x80C98000 in loaded.frequency
    assert [(problem.entry, problem.field, problem.action) for problem in problems] == [
        ("", "Extra", Action.IGNORED), ("FaultFrequency[0]", "ReleaseTimewindow",
                                        Action.IGNORED)]


@pytest.mark.parametrize(("section", "entry", "field"), [
    ({"EventId": ["80C98000"]}, "FaultFrequency", ""),
    (["rule"], "FaultFrequency[0]", ""),
    ([frequency(TimeWindow="3600")], "FaultFrequency[0]", "TimeWindow"),
    ([frequency(Times=3.0)], "FaultFrequency[0]", "Times"),
    ([frequency(ReleaseTimeWindow=True)], "FaultFrequency[0]", "ReleaseTimeWindow"),
    ([frequency(EventId="80C98000")], "FaultFrequency[0]", "EventId"),
    ([frequency(EventId=[0x80C98000])], "FaultFrequency[0]", "EventId"),
    ([frequency(FaultHandling=5)], "FaultFrequency[0]", "FaultHandling"),
    ([frequency(), frequency(EventId=["80B78000"], Times="3")], "FaultFrequency[1]", "Times"),
])
def test_wrong_data_format_gives_the_default_section(section: object, entry: str,
                                                     field: str) -> None:
    loaded, problems = load(with_rules(section, [duration()]))

    assert loaded.frequency == default_customization().frequency
    assert loaded.duration[0x80C98000].handling is Level.RESTART_NPU  # the other section stays
    assert len(problems) == 1
    assert (problems[0].entry, problems[0].field, problems[0].action) == (
        entry, field, Action.DEFAULT_USED)
    assert problems[0].message.endswith("; the default FaultFrequency section is used")


def test_missing_or_null_rule_sections_have_no_rules() -> None:
    loaded, problems = load({"GraceTolerance": GRACE, "FaultFrequency": None})

    assert (loaded.frequency, loaded.duration, problems) == ({}, {}, [])


def test_file_that_is_not_an_object_gives_the_default() -> None:
    loaded, problems = load(["FaultFrequency"])

    assert loaded == default_customization()
    assert problems == [ConfigProblem("custom.json", "", "", "the file is not a JSON object",
                                      Action.DEFAULT_USED)]
    assert problems[0].describe() == ("custom.json: the file is not a JSON object "
                                      "[default used]")


# --- FaultDuration -------------------------------------------------------------------------


def test_valid_duration_rule() -> None:
    loaded, problems = load(with_rules((), [duration()]))

    assert problems == []
    assert loaded.duration == {0x80C98000: DurationRule(0x80C98000, "80C98000", 10.0, 30.0,
                                                        Level.RESTART_NPU)}


@pytest.mark.parametrize(("field", "value", "valid"), [
    ("FaultTimeout", -1, False), ("FaultTimeout", 0, True), ("FaultTimeout", 600, True),
    ("FaultTimeout", 601, False),
    ("RecoverTimeout", -1, False), ("RecoverTimeout", 0, True), ("RecoverTimeout", 86400, True),
    ("RecoverTimeout", 86401, False),
])
def test_duration_range_edges(field: str, value: int, valid: bool) -> None:
    loaded, problems = load(with_rules((), [duration(**{field: value})]))

    assert (0x80C98000 in loaded.duration) is valid
    assert [(problem.entry, problem.field) for problem in problems] == (
        [] if valid else [("FaultDuration[0]", field)])


@pytest.mark.parametrize("handling", ["ManuallySeparateNPU", "NormalNetwork", None])
def test_duration_cannot_separate_manually(handling: str | None) -> None:
    loaded, problems = load(with_rules((), [duration(FaultHandling=handling)]))

    assert loaded.duration == {}
    assert [(problem.field, problem.action) for problem in problems] == [
        ("FaultHandling", Action.IGNORED)]


def test_absent_timeouts_take_the_documented_defaults_per_id() -> None:
    rule = duration(EventId=["81078603", "80E01801", "80C98000"], FaultTimeout=None,
                    RecoverTimeout=None, FaultHandling="SeparateNPU")
    loaded, problems = load(with_rules((), [rule]))

    assert problems == []
    assert {key: (rule.fault_timeout, rule.recover_timeout)
            for key, rule in loaded.duration.items()} == {
        LINK_DOWN: (20.0, 60.0), 0x80E01801: (30.0, 0.0), 0x80C98000: (0.0, 0.0)}


@pytest.mark.parametrize(("handling", "expected"), [
    ("NotHandleFault", Level.NOT_HANDLE_FAULT), ("PreSeparateNPU", Level.PRE_SEPARATE_NPU),
    ("SeparateNPU", Level.SEPARATE_NPU), ("RestartNPU", Level.NOT_HANDLE_FAULT),
    ("SubHealthFault", Level.NOT_HANDLE_FAULT),
])
def test_link_down_duration_handling_is_restricted(handling: str, expected: Level) -> None:
    loaded, problems = load(with_rules((), [duration(EventId=["81078603", "80C98000"],
                                                     FaultHandling=handling)]))

    assert loaded.duration[LINK_DOWN].handling is expected
    assert loaded.duration[0x80C98000].handling is Level(handling)  # only link down
    if expected is Level(handling):
        assert problems == []
    else:
        assert problems == [ConfigProblem(
            "custom.json", "FaultDuration[0]", "FaultHandling",
            f"link down 81078603 can only be NotHandleFault, PreSeparateNPU, SeparateNPU, not "
            f"{handling}; NotHandleFault is used", Action.REPLACED)]


def test_duration_wrong_format_gives_the_default_section() -> None:
    loaded, problems = load(with_rules([frequency()], [duration(FaultTimeout="20")]))

    assert loaded.duration == default_customization().duration
    assert 0x80C98000 in loaded.frequency
    assert [(problem.entry, problem.field, problem.action) for problem in problems] == [
        ("FaultDuration[0]", "FaultTimeout", Action.DEFAULT_USED)]


def test_duplicate_duration_id_keeps_the_first() -> None:
    rules = [duration(), duration(FaultHandling="SeparateNPU", EventId=["80C98000"])]
    loaded, problems = load(with_rules((), rules))

    assert loaded.duration[0x80C98000].handling is Level.RESTART_NPU
    assert [(problem.entry, problem.field) for problem in problems] == [
        ("FaultDuration[1]", "EventId")]
