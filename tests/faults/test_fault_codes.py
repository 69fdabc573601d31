"""faultCode.json: loading (and what is reported), spelling, and the level of a set of codes.

The rules are the original's (NOTES §2.2); the counts are those of its default file, which is
shipped unchanged in ``trainguard/faults/data``.
"""

from __future__ import annotations

import json
from collections import Counter
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device import fault_codes
from trainguard.faults.device.fault_codes import CodeTable, Severity, code_key
from trainguard.faults.levels import Level

LINK_DOWN = 0x81078603  # RoCE link down: a network code
UBOE_DOWN = 0x81078607  # UBOE port down: a network code
UCE = "80E01801"  # RestartBusiness in the default file
SEPARATE = "80E3A201"  # SeparateNPU in the default file
RESTART_REQUEST = "80C98008"  # RestartRequest in the default file
UNKNOWN = 0xDEADBEEF

_LISTS = {
    "NotHandleFaultCodes": Level.NOT_HANDLE_FAULT,
    "RestartRequestCodes": Level.RESTART_REQUEST,
    "RestartBusinessCodes": Level.RESTART_BUSINESS,
    "FreeRestartNPUCodes": Level.FREE_RESTART_NPU,
    "RestartNPUCodes": Level.RESTART_NPU,
    "SeparateNPUCodes": Level.SEPARATE_NPU,
    "PreSeparateNPUCodes": Level.PRE_SEPARATE_NPU,
    "SubHealthFaultCodes": Level.SUB_HEALTH_FAULT,
}


def _data(name: str) -> Any:
    text = resources.files("trainguard.faults").joinpath("data", name).read_text()
    return json.loads(text)


def _load(document: object) -> tuple[CodeTable, list[ConfigProblem]]:
    return CodeTable.from_document(document, file="faultCode.json")


# --- loading: what is reported --------------------------------------------------------------


def test_an_empty_document_loads_without_problems() -> None:
    table, problems = _load({})

    assert problems == []
    assert (dict(table.chip), dict(table.network)) == ({}, {})


@pytest.mark.parametrize("document", [[], "faultCode", 3, None])
def test_a_document_that_is_not_an_object_is_reported(document: object) -> None:
    table, problems = _load(document)

    assert problems == [ConfigProblem("faultCode.json", "", "", "the file is not a JSON object",
                                      Action.IGNORED)]
    assert dict(table.chip) == {}


def test_an_unknown_key_is_reported_and_the_rest_loads() -> None:
    table, problems = _load({"SeparateNPUCode": ["80E3A201"], "SeparateNPUCodes": [SEPARATE]})

    (problem,) = problems
    assert (problem.file, problem.entry, problem.field) == ("faultCode.json",
                                                            "SeparateNPUCode", "")
    assert problem.action is Action.IGNORED
    assert problem.message.startswith("not a list of fault codes (known: ")
    assert "SeparateNPUCodes" in problem.message
    assert "PreSeparateNPUNetworkCodes" in problem.message
    assert table.level_of(code_key(SEPARATE)) is Level.SEPARATE_NPU


@pytest.mark.parametrize("value", ["80E3A201", {"80E3A201": 1}, 7])
def test_a_list_that_is_not_a_list_is_reported(value: object) -> None:
    table, problems = _load({"SeparateNPUCodes": value, "RestartNPUCodes": ["80E18005"]})

    assert problems == [ConfigProblem("faultCode.json", "SeparateNPUCodes", "", "not a list",
                                      Action.IGNORED)]
    assert dict(table.chip) == {0x80E18005: Level.RESTART_NPU}


@pytest.mark.parametrize("entry", ["80E3 A201", "", "80E3A201!", 0x80E3A201, None, ["80E3A201"],
                                   "X" * 33])
def test_a_bad_code_is_reported_with_its_value_and_skipped(entry: object) -> None:
    table, problems = _load({"SeparateNPUCodes": [entry, SEPARATE]})

    (problem,) = problems
    assert (problem.file, problem.entry, problem.field) == ("faultCode.json",
                                                            "SeparateNPUCodes", repr(entry))
    assert problem.action is Action.IGNORED
    assert problem.message.startswith("not a fault code")
    assert dict(table.chip) == {code_key(SEPARATE): Level.SEPARATE_NPU}


def test_a_code_in_two_lists_keeps_the_more_serious_level_and_is_reported() -> None:
    # The default file does this with A2301001 (RestartBusiness and SeparateNPU).
    table, problems = _load({"RestartBusinessCodes": ["A2301001"],
                             "SeparateNPUCodes": ["A2301001"],
                             "NotHandleFaultCodes": ["a2301001"]})

    assert table.level_of(0xA2301001) is Level.SEPARATE_NPU
    assert table.sources[0xA2301001] == "faultCode.json SeparateNPUCodes"
    assert [(p.entry, p.field, p.action) for p in problems] == [
        ("RestartBusinessCodes", "A2301001", Action.IGNORED),
        ("NotHandleFaultCodes", "a2301001", Action.IGNORED)]
    assert all(p.message == "also listed as SeparateNPU; the more serious level is kept"
               for p in problems)


def test_a_code_twice_in_one_list_is_no_problem() -> None:
    # The default file lists B4060011 twice under RestartBusinessCodes.
    table, problems = _load({"RestartBusinessCodes": ["B4060011", "B4060011"]})

    assert problems == []
    assert table.level_of(0xB4060011) is Level.RESTART_BUSINESS


@pytest.mark.parametrize("name", ["RestartRequestCodes", "RestartBusinessCodes",
                                  "RestartNPUCodes", "FreeRestartNPUCodes"])
def test_a_network_code_in_a_restart_list_is_demoted_to_not_handle_and_reported(
        name: str) -> None:
    table, problems = _load({name: ["81078607"]})

    assert table.is_network(UBOE_DOWN)
    assert table.network_level([UBOE_DOWN]) is Level.NOT_HANDLE_FAULT
    assert table.chip_level([UBOE_DOWN]) is Level.NORMAL_NPU
    assert UBOE_DOWN not in table.chip
    (problem,) = problems
    assert (problem.file, problem.entry, problem.field) == ("faultCode.json", name, "81078607")
    assert problem.action is Action.REPLACED
    assert problem.message == (f"a network code cannot be {_LISTS[name]}; it is "
                               "NotHandleFault")


@pytest.mark.parametrize(("name", "level"), [
    ("NotHandleFaultCodes", Level.NOT_HANDLE_FAULT),
    ("PreSeparateNPUCodes", Level.PRE_SEPARATE_NPU),
    ("SeparateNPUCodes", Level.SEPARATE_NPU),
    ("SubHealthFaultCodes", Level.SUB_HEALTH_FAULT),
])
def test_a_network_code_in_a_chip_list_with_a_network_level_keeps_it(
        name: str, level: Level) -> None:
    table, problems = _load({name: ["81078607"]})

    assert problems == []
    assert table.network_level([UBOE_DOWN]) is level
    assert table.level_of(UBOE_DOWN) is level
    assert table.sources[UBOE_DOWN] == f"faultCode.json {name}"


def test_link_down_as_sub_health_is_demoted_but_uboe_port_down_is_kept() -> None:
    # The seed allows link down (81078603) only NotHandleFault, PreSeparateNPU or SeparateNPU.
    table, problems = _load({"SubHealthFaultCodes": ["81078603", "81078607"]})

    assert table.network_level([LINK_DOWN]) is Level.NOT_HANDLE_FAULT
    assert table.network_level([UBOE_DOWN]) is Level.SUB_HEALTH_FAULT
    (problem,) = problems
    assert (problem.entry, problem.field, problem.action) == (
        "SubHealthFaultCodes", "81078603", Action.REPLACED)
    assert "SubHealthFault" in problem.message


@pytest.mark.parametrize("name", ["NotHandleFaultCodes", "PreSeparateNPUCodes",
                                  "SeparateNPUCodes"])
def test_link_down_keeps_the_levels_the_seed_allows(name: str) -> None:
    table, problems = _load({name: ["81078603"]})

    assert problems == []
    assert table.network_level([LINK_DOWN]) is _LISTS[name]


def test_link_down_in_the_sub_health_network_list_is_demoted_too() -> None:
    table, problems = _load({"SubHealthFaultNetworkCodes": ["81078603"]})

    assert table.network_level([LINK_DOWN]) is Level.NOT_HANDLE_FAULT
    assert [(p.entry, p.field, p.action) for p in problems] == [
        ("SubHealthFaultNetworkCodes", "81078603", Action.REPLACED)]


def test_a_code_of_a_network_list_is_judged_as_a_network_code() -> None:
    table, problems = _load({"PreSeparateNPUNetworkCodes": ["1234ABCD"],
                             "SeparateNPUCodes": [SEPARATE]})

    assert problems == []
    assert table.is_network(0x1234ABCD)
    assert table.chip_level([0x1234ABCD]) is Level.NORMAL_NPU
    assert table.network_level([0x1234ABCD]) is Level.PRE_SEPARATE_NPU
    assert table.chip_level([0x1234ABCD, code_key(SEPARATE)]) is Level.SEPARATE_NPU
    assert table.sources[0x1234ABCD] == "faultCode.json PreSeparateNPUNetworkCodes"


def test_a_code_in_two_network_lists_is_reported() -> None:
    table, problems = _load({"SeparateNPUNetworkCodes": ["81078607"],
                             "NotHandleFaultNetworkCodes": ["81078607"]})

    assert table.network_level([UBOE_DOWN]) is Level.SEPARATE_NPU
    assert [(p.entry, p.field) for p in problems] == [("NotHandleFaultNetworkCodes",
                                                       "81078607")]


@pytest.mark.parametrize("document", [
    {"SeparateNPUCodes": ["81078607"], "NotHandleFaultCodes": ["81078607"]},
    {"SeparateNPUNetworkCodes": ["81078607"], "NotHandleFaultCodes": ["81078607"]},
])
def test_a_network_code_in_two_lists_is_reported(document: dict[str, list[str]]) -> None:
    table, problems = _load(document)

    assert table.network_level([UBOE_DOWN]) is Level.SEPARATE_NPU
    assert [(p.entry, p.field) for p in problems] == [("NotHandleFaultCodes", "81078607")]


# --- codes and their spelling -----------------------------------------------------------------


@pytest.mark.parametrize(("text", "key"), [
    ("80e01801", 0x80E01801), ("80E01801", 0x80E01801), (" 80E01801 ", 0x80E01801),
    ("020001002", 0x20001002), ("xid-79", "XID-79"), ("XID-79", "XID-79"),
    ("row-remap-pending", "ROW-REMAP-PENDING"),
])
def test_code_key(text: str, key: fault_codes.CodeKey) -> None:
    assert code_key(text) == key


def test_hex_codes_are_one_code_whatever_their_case_and_keep_the_first_spelling() -> None:
    table, problems = _load({"RestartNPUCodes": ["80e18005"], "SeparateNPUCodes": ["80E3a201"]})

    assert problems == []
    assert table.level_of(code_key("80E18005")) is Level.RESTART_NPU
    assert table.level_of(code_key("80e3A201")) is Level.SEPARATE_NPU
    assert table.spelling(0x80E18005) == "80e18005"
    assert table.spelling(0x80E3A201) == "80E3a201"


def test_a_leading_zero_survives_in_the_configured_spelling() -> None:
    table = fault_codes.default_table()

    key = code_key("020001002")
    assert key == code_key("20001002")  # the same value ...
    assert table.spelling(key) == "020001002"  # ... shown as configured
    assert fault_codes.spell(key) == "20001002"  # and as an unconfigured one would be
    assert table.level_of(key) is Level.SEPARATE_NPU


def test_an_unconfigured_code_is_spelled_in_upper_case_with_eight_digits() -> None:
    table, _ = _load({})

    assert table.spelling(0xABC) == "00000ABC"
    assert table.spelling(0x80E01801) == "80E01801"
    assert table.spelling("XID-1") == "XID-1"


def test_is_code() -> None:
    assert fault_codes.is_code("80E01801")
    assert fault_codes.is_code("XID-79")
    assert fault_codes.is_code("a_b")
    assert not fault_codes.is_code("")
    assert not fault_codes.is_code("80E0 1801")
    assert not fault_codes.is_code("[0x00f1fef5,155914,npu,na]")
    assert not fault_codes.is_code("X" * 33)


# --- the level of a set of codes --------------------------------------------------------------


@pytest.fixture(scope="module")
def table() -> CodeTable:
    return fault_codes.default_table()


def _key(text: str) -> fault_codes.CodeKey:
    return code_key(text)


def test_no_code_is_normal(table: CodeTable) -> None:
    assert table.chip_level([]) is Level.NORMAL_NPU
    assert table.network_level([]) is Level.NORMAL_NETWORK


def test_the_most_serious_matching_list_wins(table: CodeTable) -> None:
    codes = [_key("8C1F860B"), _key(RESTART_REQUEST), _key(UCE)]  # NotHandle, RR, RB

    assert table.chip_level(codes) is Level.RESTART_BUSINESS
    assert table.chip_level([*codes, _key(SEPARATE)]) is Level.SEPARATE_NPU


def test_an_unknown_code_is_ignored_beside_a_known_one(table: CodeTable) -> None:
    not_handle = _key("8C1F860B")

    assert table.chip_level([not_handle]) is Level.NOT_HANDLE_FAULT
    assert table.chip_level([not_handle, UNKNOWN]) is Level.NOT_HANDLE_FAULT
    assert table.chip_level([UNKNOWN, not_handle],
                            {UNKNOWN: Severity.CRITICAL}) is Level.NOT_HANDLE_FAULT
    assert table.chip_level([UNKNOWN, "XID-1000", _key(UCE)]) is Level.RESTART_BUSINESS


@pytest.mark.parametrize(("severities", "level"), [
    ({}, Level.SEPARATE_NPU),  # no known severity
    ({UNKNOWN: Severity.CRITICAL}, Level.SEPARATE_NPU),
    ({UNKNOWN: Severity.MAJOR}, Level.SEPARATE_NPU),
    ({UNKNOWN: Severity.MINOR}, Level.NOT_HANDLE_FAULT),
    ({UNKNOWN: Severity.SUGGESTION}, Level.NOT_HANDLE_FAULT),
])
def test_with_no_known_code_the_severity_decides(table: CodeTable,
                                                 severities: dict[fault_codes.CodeKey, Severity],
                                                 level: Level) -> None:
    assert table.chip_level([UNKNOWN], severities) is level


def test_with_no_known_code_any_serious_or_unrated_code_separates(table: CodeTable) -> None:
    other = 0xDEADBEE0

    minor: dict[fault_codes.CodeKey, Severity] = {UNKNOWN: Severity.MINOR,
                                                  other: Severity.SUGGESTION}
    assert table.chip_level([UNKNOWN, other], minor) is Level.NOT_HANDLE_FAULT
    assert table.chip_level([UNKNOWN, other], {**minor, other: Severity.MAJOR}) \
        is Level.SEPARATE_NPU
    assert table.chip_level([UNKNOWN, other], {UNKNOWN: Severity.MINOR}) is Level.SEPARATE_NPU


def test_network_codes_are_set_apart(table: CodeTable) -> None:
    assert table.is_network(LINK_DOWN)
    assert not table.is_network(_key(UCE))
    assert table.chip_level([LINK_DOWN]) is Level.NORMAL_NPU  # not an unknown chip code
    assert table.chip_level([LINK_DOWN, _key(RESTART_REQUEST)]) is Level.RESTART_REQUEST
    assert table.network_level([LINK_DOWN]) is Level.NOT_HANDLE_FAULT  # the default file's
    assert table.network_level([LINK_DOWN, _key(SEPARATE)]) is Level.NOT_HANDLE_FAULT
    assert table.network_level([_key(SEPARATE)]) is Level.NORMAL_NETWORK
    assert table.level_of(LINK_DOWN) is Level.NOT_HANDLE_FAULT


@pytest.mark.parametrize("code", [0x81078603, 0x81078607, 0x110000002, 0x110001024])
def test_an_unlisted_network_code_is_pre_separate(code: int) -> None:
    empty, _ = _load({})

    assert empty.is_network(code)
    assert empty.network_level([code]) is Level.PRE_SEPARATE_NPU
    assert empty.chip_level([code]) is Level.NORMAL_NPU


def test_the_network_level_is_the_most_serious_network_code() -> None:
    table, _ = _load({"SeparateNPUCodes": ["81078607"], "NotHandleFaultCodes": ["81078603"]})

    assert table.network_level([LINK_DOWN]) is Level.NOT_HANDLE_FAULT
    assert table.network_level([LINK_DOWN, UBOE_DOWN]) is Level.SEPARATE_NPU
    assert table.network_level([LINK_DOWN, 0x110000002]) is Level.PRE_SEPARATE_NPU  # unlisted


def test_an_unknown_code_can_lower_a_set_once_a_known_code_joins(table: CodeTable) -> None:
    # The original's rule, kept: unknown codes count only when no code of the set is known, so
    # "adding a known code never lowers the level" holds for sets of known codes only.
    assert table.chip_level([UNKNOWN]) is Level.SEPARATE_NPU
    assert table.chip_level([UNKNOWN, _key("8C1F860B")]) is Level.NOT_HANDLE_FAULT


# --- the default table ------------------------------------------------------------------------


def test_the_default_file_has_the_originals_counts() -> None:
    document = _data("faultCode.json")

    assert {name: len(codes) for name, codes in document.items()} == {
        "NotHandleFaultCodes": 132, "RestartRequestCodes": 33, "RestartBusinessCodes": 26,
        "FreeRestartNPUCodes": 23, "RestartNPUCodes": 162, "SeparateNPUCodes": 215,
        "PreSeparateNPUCodes": 200, "SubHealthFaultCodes": 13}
    business = [code.upper() for code in document["RestartBusinessCodes"]]
    assert len(set(business)) == 25
    assert [code for code, n in Counter(business).items() if n > 1] == ["B4060011"]


def test_the_default_file_loads_with_one_problem_its_conflicting_code() -> None:
    table, problems = CodeTable.from_document(_data("faultCode.json"))

    assert [(p.entry, p.field, p.action) for p in problems] == [
        ("RestartBusinessCodes", "A2301001", Action.IGNORED)]
    assert table.level_of(0xA2301001) is Level.SEPARATE_NPU


def test_every_default_code_has_its_lists_level() -> None:
    document = _data("faultCode.json")
    table = fault_codes.default_table()
    # The lists in severity order: a code gets the first (most serious) list naming it.
    order = sorted(_LISTS, key=lambda name: -_LISTS[name].severity)
    expected: dict[fault_codes.CodeKey, Level] = {}
    for name in order:
        for text in document[name]:
            expected.setdefault(code_key(text), _LISTS[name])

    network = {key for key in expected if key in fault_codes.NETWORK_CODES}
    assert network == set(fault_codes.NETWORK_CODES)  # all four are in the default file
    chip = {key: level for key, level in expected.items() if key not in network}
    assert {key: table.chip[key] for key in chip} == chip
    assert {key: table.network[key] for key in network} == {key: expected[key]
                                                           for key in network}
    per_level = Counter(chip.values())
    assert per_level == Counter(level for key, level in table.chip.items()
                                if isinstance(key, int))
    assert sum(per_level.values()) == 803 - 1 - 4  # entries, less the conflict and network


def test_the_default_files_network_codes() -> None:
    table = fault_codes.default_table()

    assert dict(table.network) == {
        0x81078603: Level.NOT_HANDLE_FAULT, 0x81078607: Level.NOT_HANDLE_FAULT,
        0x110000002: Level.SUB_HEALTH_FAULT, 0x110001024: Level.PRE_SEPARATE_NPU}


def test_the_default_file_is_spelled_as_configured() -> None:
    table = fault_codes.default_table()
    document = _data("faultCode.json")

    for codes in document.values():
        for text in codes:
            assert table.spelling(code_key(text)) == text


# --- our GPU codes ----------------------------------------------------------------------------


def test_every_gpu_code_has_its_lists_level() -> None:
    document = _data("gpuFaultCode.json")
    table = fault_codes.default_table()

    assert sum(len(codes) for codes in document.values()) == 20
    for name, codes in document.items():
        for text in codes:
            key = code_key(text)
            assert isinstance(key, str)
            assert table.level_of(key) is _LISTS[name]
            assert table.level_of(code_key(text.lower())) is _LISTS[name]
            assert table.spelling(key) == text
            assert table.sources[key] == f"gpuFaultCode.json {name}"


@pytest.mark.parametrize(("code", "level"), [
    ("XID-79", Level.SEPARATE_NPU), ("xid-64", Level.SEPARATE_NPU),
    ("ROW-REMAP-FAILURE", Level.SEPARATE_NPU), ("NVLINK-DOWN", Level.RESTART_NPU),
    ("ROW-REMAP-PENDING", Level.FREE_RESTART_NPU), ("XID-13", Level.RESTART_BUSINESS),
    ("ECC-SBE-RATE", Level.SUB_HEALTH_FAULT), ("XID-45", Level.NOT_HANDLE_FAULT),
])
def test_gpu_codes_documented_levels(code: str, level: Level) -> None:
    assert fault_codes.default_table().level_of(code_key(code)) is level


def test_gpu_codes_are_chip_codes_and_mix_with_the_originals() -> None:
    table = fault_codes.default_table()

    assert not table.is_network("NVLINK-DOWN")
    assert table.chip_level(["XID-45", _key(UCE)]) is Level.RESTART_BUSINESS
    assert table.chip_level(["XID-45", "XID-99999"]) is Level.NOT_HANDLE_FAULT
    assert table.chip_level(["XID-99999"]) is Level.SEPARATE_NPU


def test_merged_prefers_the_table_over_the_other() -> None:
    operator, _ = _load({"NotHandleFaultCodes": ["xid-79"], "SeparateNPUCodes": [UCE]})
    merged = operator.merged(fault_codes.default_table())

    assert merged.level_of("XID-79") is Level.NOT_HANDLE_FAULT
    assert merged.spelling("XID-79") == "xid-79"
    assert merged.sources["XID-79"] == "faultCode.json NotHandleFaultCodes"
    assert merged.level_of(_key(UCE)) is Level.SEPARATE_NPU
    assert merged.level_of("XID-13") is Level.RESTART_BUSINESS  # the other's, where silent


# --- properties -------------------------------------------------------------------------------


_DEFAULT = fault_codes.default_table()
_KNOWN_CHIP = sorted(_DEFAULT.chip, key=str)
_NETWORK = sorted(fault_codes.NETWORK_CODES)
_UNKNOWN = [0xDEADBEEF, 0x0BADC0DE, "XID-4242"]

known_codes = st.lists(st.sampled_from(_KNOWN_CHIP + _NETWORK), max_size=8)
any_codes = st.lists(st.sampled_from(_KNOWN_CHIP[:200] + _NETWORK + _UNKNOWN), max_size=8)
severities = st.dictionaries(st.sampled_from(_UNKNOWN), st.sampled_from(list(Severity)))


@settings(max_examples=200, deadline=None)
@given(codes=known_codes, added=st.sampled_from(_KNOWN_CHIP + _NETWORK))
def test_adding_a_known_code_never_lowers_the_level(codes: list[fault_codes.CodeKey],
                                                    added: fault_codes.CodeKey) -> None:
    before_chip = _DEFAULT.chip_level(codes)
    before_network = _DEFAULT.network_level(codes)

    assert _DEFAULT.chip_level([*codes, added]).severity >= before_chip.severity
    assert _DEFAULT.network_level([*codes, added]).severity >= before_network.severity


@settings(max_examples=200, deadline=None)
@given(codes=any_codes, severity=severities, data=st.data())
def test_the_order_of_codes_never_matters(codes: list[fault_codes.CodeKey],
                                          severity: dict[fault_codes.CodeKey, Severity],
                                          data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(codes))

    assert _DEFAULT.chip_level(shuffled, severity) is _DEFAULT.chip_level(codes, severity)
    assert _DEFAULT.network_level(shuffled) is _DEFAULT.network_level(codes)


@settings(max_examples=100, deadline=None)
@given(codes=any_codes)
def test_duplicates_never_matter(codes: list[fault_codes.CodeKey]) -> None:
    assert _DEFAULT.chip_level(codes + codes) is _DEFAULT.chip_level(codes)
    assert _DEFAULT.network_level(codes + codes) is _DEFAULT.network_level(codes)
