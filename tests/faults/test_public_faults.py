"""Public fault codes (the 9-digit layout) and their configuration files (SPEC D8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.faults.config_problems import Action
from trainguard.faults.levels import Level
from trainguard.faults.public.public_faults import (
    BUILTIN_MEANINGS,
    PublicCode,
    PublicCodeType,
    PublicFaultConfig,
)

SYSTEM_FILE = (Path(__file__).parents[2] / "trainguard" / "faults" / "data"
               / "publicFaultConfiguration.json")

TABLE_5 = {
    "010001001": Level.SUB_HEALTH_FAULT,
    "210001007": Level.SUB_HEALTH_FAULT,
    "220001001": Level.SEPARATE_NPU,
    "010001004": Level.SUB_HEALTH_FAULT,
    "210001008": Level.SUB_HEALTH_FAULT,
    "310001005": Level.SUB_HEALTH_FAULT,
    "200001006": Level.NOT_HANDLE_FAULT,
    "210001009": Level.SUB_HEALTH_FAULT,
    "220001002": Level.SEPARATE_NPU,
    "220001003": Level.SEPARATE_NPU,
    "220001004": Level.SEPARATE_NPU,
    "220001005": Level.SEPARATE_NPU,
    "220001006": Level.SEPARATE_NPU,
    "220001007": Level.SEPARATE_NPU,
}
"""Seed table 5: the supported public faults and their default levels."""


def document(**lists: object) -> dict[str, object]:
    return {"publicFaultCode": dict(lists), "publicFaultResource": ["CCAE"]}


# --- the code layout ----------------------------------------------------------------------------

def test_the_14_builtin_codes_have_meanings() -> None:
    assert set(BUILTIN_MEANINGS) == set(TABLE_5)
    assert all(meaning and meaning.isascii() for meaning in BUILTIN_MEANINGS.values())


@pytest.mark.parametrize(("text", "level"), TABLE_5.items())
def test_each_builtin_code_parses_to_its_table_5_level(text: str, level: Level) -> None:
    code = PublicCode.parse(text)

    assert code.default_level is level
    assert code.fault_type is PublicCodeType(int(text[0]))
    assert code.user_defined is False
    assert str(code) == text


@pytest.mark.parametrize(("text", "level"), TABLE_5.items())
def test_the_shipped_configuration_gives_each_builtin_code_its_table_5_level(
        text: str, level: Level) -> None:
    assert PublicFaultConfig.default().level_of(text) is level


@pytest.mark.parametrize(("text", "expected"), [
    ("010001001", PublicCode(PublicCodeType.CHIP, Level.SUB_HEALTH_FAULT, "00", False, 1001)),
    ("100011002", PublicCode(PublicCodeType.NODE, Level.NOT_HANDLE_FAULT, "00", True, 1002)),
    ("220001003", PublicCode(PublicCodeType.NETWORK, Level.SEPARATE_NPU, "00", False, 1003)),
    ("310000000", PublicCode(PublicCodeType.STORAGE, Level.SUB_HEALTH_FAULT, "00", False, 0)),
])
def test_the_table_4_examples_read_digit_by_digit(text: str, expected: PublicCode) -> None:
    assert PublicCode.parse(text) == expected
    assert str(expected) == text


def test_reserved_digits_are_kept_as_they_are() -> None:
    code = PublicCode.parse("012701001")

    assert code.reserved == "27"
    assert str(code) == "012701001"


@pytest.mark.parametrize(("text", "message"), [
    ("", "'' has 0 characters; it must have 9 digits"),
    ("01000100", "'01000100' has 8 characters; it must have 9 digits"),
    ("0100010010", "has 10 characters"),
    ("a10001001", "digit 1 is 'a', not a decimal digit"),
    ("01000100x", "digit 9 is 'x', not a decimal digit"),
    ("0100 1001", "digit 5 is ' ', not a decimal digit"),
    ("01000100\u0663", "digit 9 is '\u0663', not a decimal digit"),
    ("410001001", "digit 1 (fault type) is 4; it must be 0 chip, 1 node, 2 network or 3 storage"),
    ("930001001", "digit 1 (fault type) is 9"),
    ("030001001", "digit 2 (default level) is 3; it must be 0 NotHandleFault, 1 SubHealthFault "
                  "or 2 SeparateNPU"),
    ("010021001", "digit 5 (user-defined) is 2; it must be 0 (defined by the release) or 1 "
                  "(user-defined)"),
])
def test_a_malformed_code_names_the_wrong_digit(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="public fault code") as raised:
        PublicCode.parse(text)

    assert message in str(raised.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"number": 10000}, "number 10000 must be in 0..9999"),
    ({"number": -1}, "number -1 must be in 0..9999"),
    ({"reserved": "0"}, "reserved '0' must be two decimal digits"),
    ({"reserved": "0a"}, "reserved '0a' must be two decimal digits"),
    ({"default_level": Level.PRE_SEPARATE_NPU}, "default_level PreSeparateNPU is not a level"),
])
def test_a_code_built_with_impossible_digits_is_refused(changes: dict[str, object],
                                                       message: str) -> None:
    fields: dict[str, object] = {"fault_type": PublicCodeType.CHIP,
                                 "default_level": Level.SUB_HEALTH_FAULT, "reserved": "00",
                                 "user_defined": False, "number": 1, **changes}

    with pytest.raises(ValueError, match=message):
        PublicCode(**fields)  # type: ignore[arg-type]


@given(st.sampled_from(PublicCodeType), st.integers(0, 2), st.integers(0, 99), st.booleans(),
       st.integers(0, 9999))
def test_any_well_formed_code_parses_and_reads_back(fault_type: PublicCodeType, level: int,
                                                    reserved: int, user_defined: bool,
                                                    number: int) -> None:
    text = f"{fault_type.value}{level}{reserved:02d}{int(user_defined)}{number:04d}"

    code = PublicCode.parse(text)

    assert str(code) == text
    assert code.fault_type is fault_type
    assert code.user_defined is user_defined
    assert code.number == number


@given(st.text(max_size=12))
def test_parsing_any_text_either_reads_back_or_raises_value_error(text: str) -> None:
    try:
        code = PublicCode.parse(text)
    except ValueError:
        return
    assert str(code) == text


# --- the configuration document -----------------------------------------------------------------

def test_the_shipped_configuration_loads_without_problems() -> None:
    document_ = json.loads(SYSTEM_FILE.read_text())

    config, problems = PublicFaultConfig.from_document(document_, file=SYSTEM_FILE.name)

    assert problems == []
    assert config == PublicFaultConfig.default()
    assert len(config.levels) == 30
    assert config.resources == {"CCAE", "fd-online", "pingmesh", "Netmind", "dpcStorage",
                                "dtfsStorage"}


@pytest.mark.parametrize(("code", "level"), [
    ("110001020", Level.SUB_HEALTH_FAULT),  # NodeD DPC: process
    ("110001021", Level.SUB_HEALTH_FAULT),  # NodeD DPC: memory
    ("110001022", Level.PRE_SEPARATE_NPU),  # NodeD DTFS: process; digit 2 says SubHealthFault
    ("110001023", Level.PRE_SEPARATE_NPU),  # NodeD DTFS: link
    ("200001010", Level.NOT_HANDLE_FAULT),
    ("120001003", Level.SEPARATE_NPU),
])
def test_the_list_a_code_is_in_gives_its_level_whatever_its_digit_2(code: str,
                                                                    level: Level) -> None:
    config = PublicFaultConfig.default()

    assert config.level_of(code) is level
    assert config.sources[code].startswith("publicFaultConfiguration.json ")


@pytest.mark.parametrize("code", ["999999999", "22000100", "", "220001001 ", "420001001"])
def test_an_unknown_code_has_no_level(code: str) -> None:
    assert PublicFaultConfig.default().level_of(code) is None


@pytest.mark.parametrize("order", [
    ("NotHandleFaultCodes", "SubHealthFaultCodes", "PreSeparateNPUCodes", "SeparateNPUCodes"),
    ("SeparateNPUCodes", "PreSeparateNPUCodes", "SubHealthFaultCodes", "NotHandleFaultCodes"),
])
def test_a_code_in_several_lists_takes_the_most_serious_level(order: tuple[str, ...]) -> None:
    config, problems = PublicFaultConfig.from_document(
        document(**{name: ["010001001"] for name in order}), file="f.json")

    assert config.level_of("010001001") is Level.SEPARATE_NPU
    assert config.sources["010001001"] == "f.json SeparateNPUCodes"
    assert [problem.describe() for problem in problems] == [
        f"f.json: publicFaultCode.{name}: 010001001: also listed as SeparateNPU; the more "
        "serious level is kept [ignored]"
        for name in ("PreSeparateNPUCodes", "SubHealthFaultCodes", "NotHandleFaultCodes")]


def test_a_code_listed_twice_in_one_list_is_no_problem() -> None:
    config, problems = PublicFaultConfig.from_document(
        document(SeparateNPUCodes=["220001001", "220001001"]), file="f.json")

    assert problems == []
    assert dict(config.levels) == {"220001001": Level.SEPARATE_NPU}


def test_entries_that_are_not_codes_are_skipped_and_reported() -> None:
    config, problems = PublicFaultConfig.from_document(
        document(SubHealthFaultCodes=["01000100", 10001001, "410001001", "010001001"]),
        file="f.json")

    assert dict(config.levels) == {"010001001": Level.SUB_HEALTH_FAULT}
    assert [(problem.entry, problem.field, problem.action) for problem in problems] == [
        ("publicFaultCode.SubHealthFaultCodes", "'01000100'", Action.IGNORED),
        ("publicFaultCode.SubHealthFaultCodes", "10001001", Action.IGNORED),
        ("publicFaultCode.SubHealthFaultCodes", "'410001001'", Action.IGNORED),
    ]
    assert "has 8 characters" in problems[0].message
    assert problems[1].message == "a code must be a string of 9 digits"
    assert "digit 1 (fault type) is 4" in problems[2].message


def test_unknown_keys_are_reported_and_ignored() -> None:
    document_ = {"publicFaultCode": {"SilentFaultCodes": ["010001001"]},
                 "publicFaultResource": ["CCAE"], "comment": "x"}

    config, problems = PublicFaultConfig.from_document(document_, file="f.json")

    assert config.levels == {}
    assert [problem.describe() for problem in problems] == [
        "f.json: comment: not a key of the file (known: publicFaultCode, publicFaultResource) "
        "[ignored]",
        "f.json: publicFaultCode.SilentFaultCodes: not a list of public fault codes (known: "
        "SeparateNPUCodes, PreSeparateNPUCodes, SubHealthFaultCodes, NotHandleFaultCodes) "
        "[ignored]",
    ]


def test_senders_that_are_not_names_are_reported_and_duplicates_kept_once() -> None:
    document_ = {"publicFaultCode": {}, "publicFaultResource": ["CCAE", "", 3, "CCAE", "x"]}

    config, problems = PublicFaultConfig.from_document(document_, file="f.json")

    assert config.resources == {"CCAE", "x"}
    assert [problem.field for problem in problems] == ["''", "3"]
    assert all(problem.message == "a sender must be a non-empty string" for problem in problems)


@pytest.mark.parametrize(("document_", "message"), [
    ([], "f.json: the file is not a JSON object"),
    ({"publicFaultResource": []}, "f.json: publicFaultCode is missing"),
    ({"publicFaultCode": {}}, "f.json: publicFaultResource is missing"),
    ({"publicFaultCode": [], "publicFaultResource": []}, "f.json: publicFaultCode is not an "
                                                         "object"),
    ({"publicFaultCode": {}, "publicFaultResource": "CCAE"}, "f.json: publicFaultResource is "
                                                             "not a list"),
    ({"publicFaultCode": {"SeparateNPUCodes": "220001001"}, "publicFaultResource": []},
     "f.json: publicFaultCode.SeparateNPUCodes is not a list"),
])
def test_a_document_of_the_wrong_shape_is_refused(document_: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PublicFaultConfig.from_document(document_, file="f.json")
