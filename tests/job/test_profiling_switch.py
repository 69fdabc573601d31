"""The lightweight-profiling switch: the original's profilingSwitch JSON both ways, its two
presets, and input that cannot be read refused naming what is wrong."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.job.profiling_switch import PRESETS, ProfilingSwitch, SwitchError


@given(st.dictionaries(st.sampled_from(list(ProfilingSwitch.NAMES)),
                       st.sampled_from(["on", "off", ""])))
def test_the_light_marks_go_together_and_the_switch_reads_back_from_its_json(
        fields: dict[str, str]) -> None:
    """As the original: any mark on turns Step, SaveCheckpoint, FP and DataLoader on; the
    communication operators follow their own field."""
    switch = ProfilingSwitch.from_fields(fields)
    on = {name for name, value in fields.items() if value == "on"}
    assert switch == (PRESETS["off"] if not on else PRESETS["heavy"]
                      if "CommunicationOperator" in on else PRESETS["light"])
    assert ProfilingSwitch.from_json(switch.to_json()) == switch
    assert ProfilingSwitch.parse(json.dumps(fields)) == switch


def test_it_writes_every_field_by_the_original_names() -> None:
    assert json.loads(PRESETS["light"].to_json()) == {
        "CommunicationOperator": "off", "Step": "on", "SaveCheckpoint": "on", "FP": "on",
        "DataLoader": "on"}


def test_the_presets_are_the_original_diagnosis_levels() -> None:
    assert PRESETS["heavy"] == ProfilingSwitch(True, True, True, True, True)
    assert PRESETS["light"].describe() == "Step, SaveCheckpoint, FP, DataLoader"
    assert not PRESETS["off"].any
    assert PRESETS["off"].describe() == "off"
    assert ProfilingSwitch.parse(" Heavy ") == PRESETS["heavy"]


def test_a_field_left_out_is_off_and_one_mark_on_is_light() -> None:
    assert ProfilingSwitch.from_json('{"Step": "on"}') == PRESETS["light"]
    assert ProfilingSwitch.from_json('{"Step": "off"}') == PRESETS["off"]


@pytest.mark.parametrize(("text", "said"), [
    ('{"Steps": "on"}', "unknown field 'Steps'; known: CommunicationOperator, Step"),
    ('{"FP": true}', "FP is True, expected \"on\" or \"off\""),
    ("{nope", "is not JSON"),
    ("medium", "unknown profiling switch 'medium': give one of off, light, heavy"),
])
def test_what_cannot_be_read_is_refused_naming_it(text: str, said: str) -> None:
    with pytest.raises(SwitchError) as raised:
        ProfilingSwitch.parse(text)
    assert said in str(raised.value)


def test_json_that_is_no_object_is_refused() -> None:
    with pytest.raises(SwitchError, match="must be a JSON object, got list"):
        ProfilingSwitch.from_json('["on"]')
