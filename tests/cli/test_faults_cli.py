"""``trainguard faults explain``, ``trainguard faults replay`` and ``trainguard config check``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.controller.fault_config import ConfigKind

DATA = Path(str(resources.files("trainguard.faults").joinpath("data")))


def _run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _lines(result: Result) -> dict[str, str]:
    """An explanation's ``label  text`` lines (after the first, the code) as a mapping."""
    lines = result.stdout.splitlines()
    pairs = {}
    for line in lines[1:]:
        label, _, text = line.strip().partition("  ")
        pairs[label] = text.strip()
    return pairs


def _write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _timeline(path: Path, records: Sequence[dict[str, Any] | str]) -> Path:
    return _write(path, "".join(record if isinstance(record, str) else json.dumps(record) + "\n"
                                for record in records))


# --- faults explain ---------------------------------------------------------------------------


def test_explain_a_chip_code() -> None:
    result = _run("faults", "explain", "80e01801")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "80e01801"
    lines = _lines(result)
    assert lines["level"] == "RestartBusiness (faultCode.json RestartBusinessCodes)"
    assert lines["fault type"] == "CardUnhealthy"
    assert lines["reset policy"] == "restart"
    assert "retry" in lines
    assert lines["FaultFrequency"] == ("2 times in 86400 s -> ManuallySeparateNPU, never "
                                       "released but by an operator")
    assert "FaultDuration" not in lines
    assert "UCE" in lines["meaning"]


def test_explain_aligns_the_labels() -> None:
    result = _run("faults", "explain", "80E01801")

    body = result.stdout.splitlines()[1:]
    starts = {len(re.match(r"  \S+(?: \S+)*\s+", line).group())  # type: ignore[union-attr]
              for line in body}
    assert len(starts) == 1


def test_explain_a_network_code() -> None:
    result = _run("faults", "explain", "81078603")

    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines["level"].startswith("NotHandleFault (network code, judged apart from the "
                                     "chip's codes; faultCode.json NotHandleFaultCodes)")
    assert lines["fault type"] == "CardNetworkUnhealthy"
    assert lines["reset policy"] == "empty"
    assert lines["FaultFrequency"] == ("5 times in 86400 s -> ManuallySeparateNPU, released "
                                       "172800 s after it last recovered")
    assert lines["FaultDuration"].startswith("lasting over 20 s -> PreSeparateNPU; recovered "
                                             "after 60 s without it")
    assert "retry" not in lines


@pytest.mark.parametrize("code", ["XID-79", "xid-79"])
def test_explain_a_gpu_code(code: str) -> None:
    result = _run("faults", "explain", code)

    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines["level"] == "SeparateNPU (gpuFaultCode.json SeparateNPUCodes)"
    assert lines["fault type"] == "CardUnhealthy"
    assert lines["reset policy"] == "isolate"
    assert "Xid 79" in lines["meaning"]


def test_explain_a_public_code() -> None:
    result = _run("faults", "explain", "010001001")

    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines["public code"] == ("type chip, default level SubHealthFault, defined by the "
                                    "release, number 1001")
    assert lines["public level"] == ("SubHealthFault (publicFaultConfiguration.json "
                                     "SubHealthFaultCodes)")
    assert "level" not in lines  # not a device code


def test_explain_a_switch_code() -> None:
    result = _run("faults", "explain", "[0x00f1fef5,155914,npu,na]")

    assert result.exit_code == 0, result.output
    assert _lines(result) == {"switch level": "RestartRequest (SwitchFaultCode.json)"}


def test_explain_an_unknown_switch_code() -> None:
    result = _run("faults", "explain", "[0x00000001,na,na,na]")

    assert result.exit_code == 1
    assert _lines(result) == {"switch level": "not in SwitchFaultCode.json: not handled"}


def test_explain_a_noded_code() -> None:
    result = _run("faults", "explain", "2c000031")

    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines["NodeD level"] == "SeparateFault (NodeDConfiguration.json)"
    assert "level" not in lines


def test_explain_an_unknown_code() -> None:
    result = _run("faults", "explain", "DEADBEEF")

    assert result.exit_code == 1
    lines = _lines(result)
    assert lines["level"].startswith("not listed: SeparateNPU, or NotHandleFault when the "
                                     "device reports it as Minor or Suggestion")
    assert lines["reset policy"] == "isolate"


@pytest.mark.parametrize("code", ["80E0 1801", "80E0/1801", "X" * 40])
def test_explain_a_malformed_argument(code: str) -> None:
    result = _run("faults", "explain", code)

    assert result.exit_code == 2  # a usage error, not an unknown code
    assert _lines(result)["error"].startswith("not a fault code: hex digits (80E01801)")


def test_explain_json() -> None:
    result = _run("faults", "explain", "81078603", "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["code"] == "81078603"
    assert (data["known"], data["valid"], data["level"]) == (True, True, "NotHandleFault")
    details = data["details"]
    assert details["fault type"] == "CardNetworkUnhealthy"
    assert details["reset policy"] == "empty"
    assert details["level"].startswith("NotHandleFault (network code")
    assert set(details) >= {"FaultFrequency", "FaultDuration", "meaning"}


def test_explain_json_of_an_unknown_code_says_so() -> None:
    result = _run("faults", "explain", "DEADBEEF", "--json")

    data = json.loads(result.stdout)
    assert (data["code"], data["known"]) == ("DEADBEEF", False)


def test_explain_json_of_an_unknown_code_exits_1() -> None:
    assert _run("faults", "explain", "DEADBEEF", "--json").exit_code == 1


def test_explain_with_an_operators_fault_code_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "faultCode.json", {"SeparateNPUCodes": ["80E01801"]})

    result = _run("faults", "explain", "80E01801", "--config-dir", tmp_path)

    assert result.exit_code == 0, result.output
    lines = _lines(result)
    assert lines["level"] == f"SeparateNPU ({path} SeparateNPUCodes)"
    assert lines["reset policy"] == "isolate"
    assert result.stderr == ""


def test_explain_with_a_config_dir_reports_its_problems(tmp_path: Path) -> None:
    path = _write(tmp_path / "faultCode.json", {"SeparateNPUCodes": ["80E01801", "??"]})

    result = _run("faults", "explain", "80E01801", "--config-dir", tmp_path)

    assert result.exit_code == 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("trainguard: ")]
    (line,) = ours
    assert line.startswith(f"trainguard: {path}: SeparateNPUCodes: '??': not a fault code")
    assert "ignored" in line


def test_a_config_dir_problem_is_shown_once(tmp_path: Path) -> None:
    _write(tmp_path / "faultCode.json", {"SeparateNPUCodes": ["??"]})

    result = _run("faults", "explain", "80E01801", "--config-dir", tmp_path)

    assert len([line for line in result.stderr.splitlines() if "'??'" in line]) == 1


def test_explain_with_an_operators_customization(tmp_path: Path) -> None:
    _write(tmp_path / "faultCustomization.json", {
        "GraceTolerance": {"WaitProcessReadCMTime": 30, "WaitDeviceResetTime": 150,
                           "WaitFaultSelfHealingTime": 15},
        "FaultFrequency": [{"EventId": ["80E01801"], "TimeWindow": 3600, "Times": 3,
                            "FaultHandling": "SeparateNPU", "ReleaseTimeWindow": 7200}]})

    result = _run("faults", "explain", "80E01801", "--config-dir", tmp_path)

    assert _lines(result)["FaultFrequency"] == ("3 times in 3600 s -> SeparateNPU, released "
                                                "7200 s after it last recovered")


def test_explain_with_a_missing_config_dir(tmp_path: Path) -> None:
    result = _run("faults", "explain", "80E01801", "--config-dir", tmp_path / "absent")

    assert result.exit_code == 2


# --- faults replay ----------------------------------------------------------------------------


LINK_FLAP: list[dict[str, Any] | str] = [
    "# link down for 100 s\n",
    {"time": 0, "device": "npu-0", "code": "81078603"},
    {"time": 100, "device": "npu-0", "code": "81078603", "assertion": "recover"},
]


def test_replay_prints_each_change(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", LINK_FLAP)

    result = _run("faults", "replay", events, "--until", "400")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "+00:00:00.0  npu-0  NormalNPU -> NotHandleFault CardNetworkUnhealthy (policy empty)"
        "  [line 2: 81078603 occur]",
        "+00:00:21.0  npu-0  NotHandleFault -> PreSeparateNPU CardNetworkUnhealthy (policy "
        "isolate)  +FaultDuration 81078603  [time passed]",
        "+00:02:41.0  npu-0  PreSeparateNPU -> NormalNPU (policy empty)  -FaultDuration "
        "81078603  [time passed]",
        "2 records, 3 changes",
    ]


def test_replay_json(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", LINK_FLAP)

    result = _run("faults", "replay", events, "--until", "400", "--json", "--period", "10")

    assert result.exit_code == 0, result.output
    changes = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(c["time"], c["before"], c["after"]) for c in changes] == [
        (0.0, "NormalNPU", "NotHandleFault"), (30.0, "NotHandleFault", "PreSeparateNPU"),
        (170.0, "PreSeparateNPU", "NormalNPU")]
    assert changes[1]["added"] == [{"fault_code": "81078603", "fault_level": "PreSeparateNPU",
                                    "upgrade_type": "FaultDuration", "upgrade_time": 20.0}]
    assert changes[2]["removed"] == changes[1]["added"]
    assert changes[2]["fault_type"] is None
    assert changes[0]["cause"] == "line 2: 81078603 occur"


def test_replay_with_iso_times_prints_them(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", [
        {"time": "2025-04-09T03:14:28Z", "device": "npu-0", "code": "80E3A201"},
        {"time": "2025-04-09T03:15:28Z", "device": "npu-0", "code": "80E3A201",
         "assertion": "recover"}])

    result = _run("faults", "replay", events, "--until", "2025-04-09T04:00:00Z")

    assert result.exit_code == 0, result.output
    assert [line.split("  ")[0] for line in result.stdout.splitlines()[:2]] == [
        "2025-04-09T03:14:28.000Z", "2025-04-09T03:15:28.000Z"]


def test_replay_with_an_operators_configuration(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", LINK_FLAP)
    _write(tmp_path / "config" / "faultCode.json", {"SeparateNPUCodes": ["81078603"]})

    result = _run("faults", "replay", events, "--config-dir", tmp_path / "config", "--json")

    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout.splitlines()[0])
    assert (first["after"], first["reset_policy"]) == ("SeparateNPU", "isolate")


def test_replay_reports_a_customization_records_problems(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", [
        {"time": 0, "customization": {"FaultDuration": [{"EventId": ["81078603"],
                                                         "FaultTimeout": 9999,
                                                         "FaultHandling": "SeparateNPU"}]}}])

    result = _run("faults", "replay", events)

    assert result.exit_code == 0, result.output
    assert "trainguard: line 1 customization: FaultDuration[0]: FaultTimeout: " \
        in result.stderr
    assert result.stdout.splitlines()[-1] == "1 records, 0 changes"


@pytest.mark.parametrize(("records", "message"), [
    ([{"time": 0}, "{\"time\": 1,,}\n"], "line 2: not JSON"),
    (["# c\n", {"time": 5}, {"time": 1}], "line 3: time: 1.0 is earlier than the line before"),
    ([{"time": 0, "device": "npu-0", "code": "81078603", "assertion": "maybe"}],
     "line 1: assertion: 'maybe' is not one of occur, recover, once"),
])
def test_replay_error_exits_2_naming_the_line(tmp_path: Path, records: list[Any],
                                              message: str) -> None:
    events = _timeline(tmp_path / "events.jsonl", records)

    result = _run("faults", "replay", events)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"trainguard: {events}: {message}")


def test_replay_of_a_file_not_in_utf8_exits_2(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"{\"time\": 0, \"device\": \"\xff\"}\n")

    assert _run("faults", "replay", events).exit_code == 2


def test_replay_with_a_bad_until_exits_2(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", LINK_FLAP)

    result = _run("faults", "replay", events, "--until", "soon")

    assert result.exit_code == 2
    assert "--until" in result.stderr
    assert "'soon'" in result.stderr


def test_replay_until_an_iso_date(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", [
        {"time": "2025-04-09T03:14:28Z", "device": "npu-0", "code": "81078603"}])

    result = _run("faults", "replay", events, "--until", "2025-04-10", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["after"] == "PreSeparateNPU"


def test_replay_refuses_a_period_of_zero(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", LINK_FLAP)

    assert _run("faults", "replay", events, "--period", "0").exit_code == 2


def test_replay_of_an_empty_timeline(tmp_path: Path) -> None:
    events = _timeline(tmp_path / "events.jsonl", ["# nothing yet\n"])

    result = _run("faults", "replay", events, "--until", "100")

    assert result.exit_code == 0, result.output
    assert result.stdout == "0 records, 0 changes\n"


# --- config check -----------------------------------------------------------------------------


def _effective(result: Result) -> Any:
    """The effective configuration: the JSON after the problem lines."""
    text = result.stdout
    return json.loads(text[text.index("\n{") + 1:])


@pytest.mark.parametrize("name", ["faultCustomization.json", "SwitchFaultCode.json",
                                  "NodeDConfiguration.json", "publicFaultConfiguration.json"])
def test_config_check_of_a_shipped_default_file(name: str) -> None:
    path = DATA / name

    result = _run("config", "check", path)

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"{path} ({name}): no problems"
    assert _effective(result)


def test_config_check_of_the_shipped_fault_code_file_reports_the_originals_conflict() -> None:
    # The original's own faultCode.json lists A2301001 under RestartBusiness and SeparateNPU.
    path = DATA / "faultCode.json"

    result = _run("config", "check", path)

    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{path} (faultCode.json): 1 problem"
    assert lines[1].startswith(f"  {path}: RestartBusinessCodes: A2301001: also listed as "
                               "SeparateNPU; the more serious level is kept")
    effective = _effective(result)
    assert effective["chip"]["A2301001"] == "SeparateNPU"
    assert effective["chip"]["80E01801"] == "RestartBusiness"
    assert effective["chip"]["020001002"] == "SeparateNPU"  # the configured spelling
    assert effective["chip"]["XID-79"] == "SeparateNPU"
    assert effective["network"] == {"81078603": "NotHandleFault", "81078607": "NotHandleFault",
                                    "110000002": "SubHealthFault",
                                    "110001024": "PreSeparateNPU"}


def test_config_check_of_the_customization_prints_its_rules() -> None:
    result = _run("config", "check", DATA / "faultCustomization.json")

    effective = _effective(result)
    assert effective["grace"] == {"wait_process_read_cm_time": 30.0,
                                  "wait_device_reset_time": 150.0,
                                  "wait_fault_self_healing_time": 15.0}
    assert effective["frequency"]["81078603"]["release_window"] == 172800.0
    assert effective["duration"]["81078603"]["handling"] == "PreSeparateNPU"


def test_config_check_quiet_prints_no_configuration() -> None:
    path = DATA / "SwitchFaultCode.json"

    result = _run("config", "check", "-q", path)

    assert result.exit_code == 0
    assert result.stdout == f"{path} (SwitchFaultCode.json): no problems\n"


BAD_FILES: dict[str, tuple[Any, list[tuple[str, str, str]]]] = {
    "faultCode.json": (
        {"SeparateNPUCodes": ["80E3A201", "bad code!"], "RestartBusinessCodes": ["81078607"],
         "Unknown": []},
        [("SeparateNPUCodes", "'bad code!'", "ignored"),
         ("RestartBusinessCodes", "81078607", "replaced"),
         ("Unknown", "", "ignored")]),
    "faultCustomization.json": (
        {"GraceTolerance": {"WaitProcessReadCMTime": 1, "WaitDeviceResetTime": 150,
                            "WaitFaultSelfHealingTime": 15},
         "FaultFrequency": [{"EventId": ["80E18005"], "TimeWindow": 10, "Times": 2,
                             "FaultHandling": "ManuallySeparateNPU"}],
         "FaultDuration": [{"EventId": ["81078603"], "FaultTimeout": 20,
                            "FaultHandling": "Nonsense"}]},
        [("GraceTolerance", "WaitProcessReadCMTime", "default used"),
         ("FaultFrequency[0]", "TimeWindow", "ignored"),
         ("FaultDuration[0]", "FaultHandling", "ignored")]),
    "SwitchFaultCode.json": (
        {"SeparateFaultCodes": ["[0x00f1fef5,155915,npu,na]", "0x1"]},
        [("SeparateFaultCodes", "0x1", "ignored")]),
    "NodeDConfiguration.json": (
        {"FaultTypeCode": {"NotHandleFaultCodes": ["2C000031", "xyz"]}},
        [("FaultTypeCode.NotHandleFaultCodes", "xyz", "ignored")]),
    "publicFaultConfiguration.json": (
        {"publicFaultCode": {"SeparateNPUCodes": ["220001001", "12345"]},
         "publicFaultResource": ["CCAE", ""]},
        [("publicFaultCode.SeparateNPUCodes", "'12345'", "ignored"),
         ("publicFaultResource", "''", "ignored")]),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_config_check_of_bad_entries_names_each_problem(tmp_path: Path, name: str) -> None:
    document, expected = BAD_FILES[name]
    path = _write(tmp_path / name, document)

    result = _run("config", "check", path)

    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    count = len(expected)
    assert lines[0] == f"{path} ({name}): {count} problem{'s' if count > 1 else ''}"
    problems = lines[1:1 + count]
    assert lines[1 + count] == "{"  # then the effective configuration
    for entry, field, action in expected:  # in any order
        where = f"  {path}: {entry}: " + (f"{field}: " if field else "")
        (line,) = [line for line in problems if line.startswith(where)]
        assert line.endswith(f"[{action}]"), line
    assert _effective(result)  # the rest still takes effect


def test_config_check_of_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = _write(tmp_path / "faultCode.json", "{\"SeparateNPUCodes\": [")

    result = _run("config", "check", path)

    assert result.exit_code == 2
    lines = result.stdout.splitlines()
    assert lines[0] == f"{path} (faultCode.json): 1 problem"
    assert lines[1].startswith(f"  {path}: not valid JSON")
    assert "the file cannot be used" in lines[2]


def test_config_check_of_a_public_file_of_the_wrong_shape(tmp_path: Path) -> None:
    path = _write(tmp_path / "publicFaultConfiguration.json", {"publicFaultCode": {}})

    result = _run("config", "check", path)

    assert result.exit_code == 2
    assert "publicFaultResource is missing" in result.stdout
    assert "the file cannot be used" in result.stdout


def test_config_check_of_a_public_file_of_the_wrong_shape_names_it_once(tmp_path: Path) -> None:
    path = _write(tmp_path / "publicFaultConfiguration.json", {"publicFaultCode": {}})

    result = _run("config", "check", path)

    assert result.stdout.count(str(path)) == 2  # the heading and the problem


def test_config_check_of_a_refused_noded_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "NodeDConfiguration.json",
                  {"FaultTypeCode": {"NotHandleFaultCodes": ["2C000031"],
                                     "SeparateFaultCodes": ["2C000031"]}})

    result = _run("config", "check", path)

    assert result.exit_code == 2
    assert "the file cannot be used" in result.stdout


def test_config_check_of_an_unknown_file_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "my-codes.json", {"SeparateNPUCodes": ["80E3A201"]})

    result = _run("config", "check", path)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"trainguard: {path}: which kind of file is it?")
    for kind in ConfigKind:
        assert kind.value in result.stderr


def test_config_check_of_an_unknown_file_name_with_kind(tmp_path: Path) -> None:
    path = _write(tmp_path / "my-codes.json", {"SeparateNPUCodes": ["80E3A201"]})

    result = _run("config", "check", "--kind", "faultCode.json", path)

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"{path} (faultCode.json): no problems"
    assert _effective(result)["chip"]["80E3A201"] == "SeparateNPU"


def test_config_check_of_our_gpu_codes_with_kind() -> None:
    path = DATA / "gpuFaultCode.json"

    assert _run("config", "check", path).exit_code == 2
    assert _run("config", "check", "--kind", "faultCode.json", "-q", path).exit_code == 0


def test_config_check_of_several_files_exits_with_the_worst(tmp_path: Path) -> None:
    good = DATA / "SwitchFaultCode.json"
    bad = _write(tmp_path / "faultCode.json", {"Unknown": []})
    broken = _write(tmp_path / "x" / "faultCode.json", "[")

    assert _run("config", "check", "-q", good, good).exit_code == 0
    assert _run("config", "check", "-q", good, bad).exit_code == 1
    result = _run("config", "check", "-q", broken, bad, good)
    assert result.exit_code == 2
    assert [line for line in result.stdout.splitlines() if not line.startswith(" ")] == [
        f"{broken} (faultCode.json): 1 problem", f"{bad} (faultCode.json): 1 problem",
        f"{good} (SwitchFaultCode.json): no problems"]


def test_config_check_of_a_missing_file(tmp_path: Path) -> None:
    assert _run("config", "check", tmp_path / "faultCode.json").exit_code == 2


# --- check-message: a public fault message as the cluster would receive it ----------------------

_MESSAGE: dict[str, Any] = {
    "id": "msg-00000001", "timestamp": 1_764_500_000_000, "version": "1.0",
    "resource": "pingmesh",
    "faults": [{"faultId": "fault-000001", "faultType": "NPU", "faultCode": "220001001",
                "faultTime": 1_764_500_000_000, "assertion": "occur",
                "influence": [{"nodeName": "node-1", "deviceIds": [0, 3]}]}],
}


def test_check_message_accepts_a_valid_message(tmp_path: Path) -> None:
    _write(tmp_path / "message.json", _MESSAGE)

    result = _run("faults", "check-message", str(tmp_path / "message.json"))

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "accepted fault-000001: 220001001 SeparateNPU occur on node-1 devices 0,3")


def test_check_message_drops_an_unknown_code_and_says_why(tmp_path: Path) -> None:
    unknown = dict(_MESSAGE["faults"][0], faultId="fault-000002", faultCode="229999999")
    _write(tmp_path / "message.json", dict(_MESSAGE, faults=[*_MESSAGE["faults"], unknown]))

    result = _run("faults", "check-message", str(tmp_path / "message.json"), "--json")

    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [fault["faultId"] for fault in data["accepted"]] == ["fault-000001"]
    assert data["dropped"] == ["faults[1].faultCode: 229999999 is not a configured public fault "
                               "code; fault dropped"]
    assert data["rejected"] is False


def test_check_message_rejects_a_sender_that_is_not_allowed(tmp_path: Path) -> None:
    _write(tmp_path / "message.json", dict(_MESSAGE, resource="someone"))

    result = _run("faults", "check-message", str(tmp_path / "message.json"))

    assert result.exit_code == 2
    assert "resource" in result.stderr
    assert "message rejected" in result.stderr


def test_check_message_follows_a_public_customization(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    _write(config / "publicCustomization.json", {
        "publicFaultCode": {"SubHealthFaultCodes": ["220001001"]},
        "publicFaultResource": ["pingmesh"]})
    _write(tmp_path / "message.json", _MESSAGE)

    result = _run("faults", "check-message", str(tmp_path / "message.json"), "--config-dir",
                  str(config), "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["accepted"][0]["level"] == "SubHealthFault"
