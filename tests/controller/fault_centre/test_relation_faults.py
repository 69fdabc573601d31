"""Relation faults: the shipped rules, their loading, and the rules of NOTES §2.7."""

from __future__ import annotations

import dataclasses
import json

import pytest

from trainguard.controller.fault_centre.relation_config import (
    RelationConfig,
    RelationKind,
    RelationRule,
    Strategy,
    rules_from_document,
    timeouts_from_document,
)
from trainguard.controller.fault_centre.relation_faults import (
    JobFault,
    RelationDecision,
    RelationFaults,
)
from trainguard.faults.config_problems import Action, ConfigProblem

LINK_DOWN = "81078603"
SWITCH_LINK_DOWN = "[0x08520003,na,L2,na]"

SHIPPED_RULES = [
    {"TriggerFault": "8C1F8609", "RelationFaults": ["81078603"], "FaultStrategy": "SubHealth"},
    {"TriggerFault": "8C1F860B", "RelationFaults": ["81078603"], "FaultStrategy": "Separate"},
    {"TriggerFault": "8C1F860B", "RelationFaults": ["[0x08520003,na,L2,na]"],
     "FaultStrategy": "Separate"},
    {"TriggerFault": "8C1F8608", "RelationFaults": ["81078603"], "FaultStrategy": "Separate"},
    {"TriggerFault": "4C1F8608", "RelationFaults": ["81078603"], "FaultStrategy": "Separate"},
]
SHIPPED_DURATIONS = [
    {"FaultCode": "81078603", "FaultType": "faultDevice", "TimeOutInterval": 300},
    {"FaultCode": "[0x08520003,na,L2,na]", "FaultType": "faultSwitch", "TimeOutInterval": 300},
]


def _loaded(rules: object | None, durations: object | None
            ) -> tuple[RelationConfig, list[ConfigProblem]]:
    """The configuration from the parsed files (None: absent), as the controller builds it:
    a file refused leaves its defaults."""
    config, problems = RelationConfig(), list[ConfigProblem]()
    if rules is not None:
        found, problems = rules_from_document(rules)
        config = dataclasses.replace(config, rules=found) if found is not None else config
    if durations is not None:
        timeouts, more = timeouts_from_document(durations)
        problems += more
        config = (dataclasses.replace(config, timeouts=timeouts) if timeouts is not None
                  else config)
    return config, problems


def test_the_defaults_are_the_shipped_files() -> None:
    loaded, problems = _loaded(SHIPPED_RULES, SHIPPED_DURATIONS)
    assert problems == []
    assert loaded == RelationConfig()
    timeout = RelationConfig().timeout_of("81078603")
    assert timeout is not None
    assert (timeout.kind, timeout.timeout) == (RelationKind.DEVICE, 300)


@pytest.mark.parametrize(("rules", "durations", "entry", "field", "message"), [
    ([{"TriggerFault": "", "RelationFaults": ["81078603"], "FaultStrategy": "Separate"}], None,
     "[0]", "TriggerFault", "'' is not a fault code"),
    ([{"TriggerFault": "8C1F860B", "RelationFaults": [], "FaultStrategy": "Separate"}], None,
     "[0]", "RelationFaults", "must be a non-empty list"),
    ([{"TriggerFault": "8C1F860B", "RelationFaults": ["[0x1,na]"], "FaultStrategy": "Separate"}],
     None, "[0]", "RelationFaults", "not a switch fault code: 2 comma-separated parts"),
    ([SHIPPED_RULES[0], {"TriggerFault": "8C1F860B", "RelationFaults": ["81078603"],
                         "FaultStrategy": "Isolate"}], None,
     "[1]", "FaultStrategy", "'Isolate' is not one of SubHealth, Separate"),
    (None, [{"FaultCode": "81078603", "FaultType": "faultDevice", "TimeOutInterval": -1}],
     "[0]", "TimeOutInterval", "-1 is not a whole number of seconds >= 0"),
    (None, [{"FaultCode": "81078603", "FaultType": "faultNode", "TimeOutInterval": 1}],
     "[0]", "FaultType", "'faultNode' is not one of faultDevice, faultSwitch"),
    (None, {"FaultCode": "81078603"}, "", "", "not a JSON list"),
])
def test_a_bad_file_names_the_field_and_keeps_the_defaults(
        rules: object, durations: object, entry: str, field: str, message: str) -> None:
    config, problems = _loaded(rules, durations)
    assert config == RelationConfig()
    (problem,) = problems
    assert (problem.entry, problem.field, problem.action) == (entry, field, Action.DEFAULT_USED)
    assert message in problem.message


def test_unknown_fields_are_reported_and_ignored() -> None:
    rules = [{**SHIPPED_RULES[1], "Comment": "x"}]
    config, problems = _loaded(rules, None)
    assert config.rules == (RelationRule("8C1F860B", ("81078603",), Strategy.SEPARATE),)
    assert [(p.field, p.action) for p in problems] == [("Comment", Action.IGNORED)]


def link_down(node: str = "n1", time: float = 0.0) -> JobFault:
    return JobFault(node, f"{node}/device-0", LINK_DOWN, time)


def trigger(code: str, node: str = "n1", time: float = 0.0) -> JobFault:
    return JobFault(node, f"{node}/device-1", code, time)


def test_a_trigger_with_its_relation_separates_the_node() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    assert faults.evaluate([link_down()], 1.0) == []
    decisions = faults.evaluate([link_down(), trigger("8C1F860B", time=2.0)], 2.0)
    assert decisions == [RelationDecision("job", "n1", Strategy.SEPARATE, (LINK_DOWN,))]
    assert faults.evaluate([link_down(), trigger("8C1F860B", time=2.0)], 3.0) == []
    assert faults.strategies == {"n1": Strategy.SEPARATE}


def test_sub_health_can_rise_to_separate_but_separate_stays() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    first = faults.evaluate([link_down(), trigger("8C1F8609")], 1.0)
    assert [d.strategy for d in first] == [Strategy.SUB_HEALTH]
    second = faults.evaluate([link_down(), trigger("8C1F860B")], 2.0)
    assert [d.strategy for d in second] == [Strategy.SEPARATE]
    assert faults.evaluate([link_down(), trigger("8C1F8609")], 3.0) == []
    assert faults.strategies == {"n1": Strategy.SEPARATE}


def test_a_trigger_after_the_relation_timed_out_does_nothing() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    assert faults.evaluate([link_down(time=0.0)], 0.0) == []
    assert faults.evaluate([link_down(time=0.0)], 300.0) == []  # timed out, no trigger
    assert faults.evaluate([link_down(time=0.0), trigger("8C1F860B")], 301.0) == []


def test_a_switch_fault_that_times_out_gives_its_node_sub_health() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    switch = JobFault("n2", None, SWITCH_LINK_DOWN, 10.0)
    assert faults.evaluate([switch], 309.0) == []
    assert faults.evaluate([switch], 310.0) == [
        RelationDecision("job", "n2", Strategy.SUB_HEALTH, (SWITCH_LINK_DOWN,))]


def test_a_switch_fault_with_its_trigger_separates_the_node() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    switch = JobFault("n2", None, SWITCH_LINK_DOWN, 10.0)
    decisions = faults.evaluate([switch, trigger("8C1F860B", node="n1")], 20.0)
    assert decisions == [RelationDecision("job", "n2", Strategy.SEPARATE, (SWITCH_LINK_DOWN,))]


@pytest.mark.parametrize(("cqe_time", "separated"), [(100.0, True), (301.0, False)])
def test_on_a_super_pod_a_cqe_waits_for_the_link_interval(cqe_time: float,
                                                          separated: bool) -> None:
    faults = RelationFaults("job", config=RelationConfig(), super_pod=True)
    cqe = trigger("8C1F8608", time=cqe_time)
    assert faults.evaluate([link_down(time=0.0), cqe], cqe_time) == []  # not at once
    decisions = faults.evaluate([link_down(time=0.0), cqe], max(cqe_time, 300.0))
    assert [d.strategy for d in decisions] == ([Strategy.SEPARATE] if separated else [])


def test_a_device_link_down_timing_out_without_a_trigger_gives_nothing() -> None:
    faults = RelationFaults("job", config=RelationConfig(), super_pod=True)
    assert faults.evaluate([link_down(time=0.0)], 400.0) == []


def test_a_relation_fault_that_went_and_came_back_starts_over() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    faults.evaluate([link_down(time=0.0)], 300.0)  # timed out: done
    faults.evaluate([], 301.0)  # recovered
    decisions = faults.evaluate([link_down(time=302.0), trigger("8C1F8609")], 303.0)
    assert [d.strategy for d in decisions] == [Strategy.SUB_HEALTH]


def test_export_and_restore_keep_the_state() -> None:
    faults = RelationFaults("job", config=RelationConfig(), super_pod=True)
    faults.evaluate([link_down(time=0.0), trigger("8C1F8608", time=5.0),
                     JobFault("n2", None, SWITCH_LINK_DOWN, 1.0)], 10.0)
    faults.evaluate([link_down(node="n3"), trigger("8C1F8609", node="n3")], 11.0)
    data = json.loads(json.dumps(faults.export()))
    again = RelationFaults("job", config=RelationConfig(), super_pod=True)
    again.restore(data)
    assert again.export() == faults.export()
    view = [link_down(time=0.0), JobFault("n2", None, SWITCH_LINK_DOWN, 1.0)]
    assert again.evaluate(view, 301.0) == faults.evaluate(view, 301.0)


def test_restore_names_the_bad_field() -> None:
    faults = RelationFaults("job", config=RelationConfig())
    data = faults.export()
    data["labels"] = {"n1": "Isolate"}
    with pytest.raises(ValueError, match=r"labels\['n1'\]: 'Isolate' is not one of"):
        faults.restore(data)
