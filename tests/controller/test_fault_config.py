"""FaultConfigDirectory: the original's configuration files from one directory, re-read when
they change; a file that cannot be used gives the default at start and keeps the last good
configuration later."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from trainguard.controller import fault_config
from trainguard.controller.fault_config import ConfigKind, FaultConfigDirectory
from trainguard.faults.config_problems import Action, ConfigProblem
from trainguard.faults.device import customization, fault_codes
from trainguard.faults.levels import Level
from trainguard.faults.node import node_faults, switch_faults
from trainguard.faults.public import public_faults

UCE = 0x80E01801
GRACE = {"WaitProcessReadCMTime": 30, "WaitDeviceResetTime": 150, "WaitFaultSelfHealingTime": 15}
CUSTOMIZATION = {"GraceTolerance": {**GRACE, "WaitDeviceResetTime": 90},
                 "FaultFrequency": [{"EventId": ["80E18005"], "TimeWindow": 600, "Times": 4,
                                     "FaultHandling": "ManuallySeparateNPU"}]}
SWITCH = {"SeparateFaultCodes": ["[0x00f1fef5,155915,npu,na]"]}
NODED = {"FaultTypeCode": {"NotHandleFaultCodes": ["2C000031"],
                           "SeparateFaultCodes": ["0100000D"]}}
PUBLIC = {"publicFaultCode": {"SeparateNPUCodes": ["010001001"]},
          "publicFaultResource": ["CCAE"]}
PUBLIC_CUSTOM = {"publicFaultCode": {"NotHandleFaultCodes": ["010001001"],
                                     "SeparateNPUCodes": ["220011001"]},
                 "publicFaultResource": ["mine"]}


class Directory:
    """A configuration directory whose every write is seen as a change (a later mtime)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = 1_700_000_000

    def write(self, kind: ConfigKind | str, content: Any) -> Path:
        path = self.path / str(kind)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        self.touch(path)
        return path

    def touch(self, path: Path) -> None:
        self._mtime += 10
        os.utime(path, ns=(self._mtime * 10**9, self._mtime * 10**9), follow_symlinks=False)

    def remove(self, kind: ConfigKind) -> None:
        (self.path / kind).unlink()


@pytest.fixture
def directory(tmp_path: Path) -> Directory:
    return Directory(tmp_path)


def _where(problems: list[ConfigProblem]) -> list[tuple[str, Action]]:
    return [(Path(problem.file).name, problem.action) for problem in problems]


# --- loading ---------------------------------------------------------------------------------


def test_an_empty_directory_gives_the_defaults_and_no_problems(directory: Directory) -> None:
    config = FaultConfigDirectory(directory.path)

    assert config.poll() == (False, [])
    assert config.config.codes is fault_codes.default_table()
    assert config.config.customization is customization.default_customization()
    assert config.config.switch is switch_faults.default_switch_table()
    assert config.config.node is node_faults.default_node_table()
    assert config.config.public is public_faults.PublicFaultConfig.default()
    assert config.config == fault_config.FaultConfig()
    assert config.poll() == (False, [])  # nothing changed


def test_the_operators_files_take_effect(directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80e01801"]})
    directory.write(ConfigKind.FAULT_CUSTOMIZATION, CUSTOMIZATION)
    directory.write(ConfigKind.SWITCH_FAULT_CODE, SWITCH)
    directory.write(ConfigKind.NODED_CONFIGURATION, NODED)
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, PUBLIC)
    config = FaultConfigDirectory(directory.path)

    assert config.poll() == (False, [])  # the first poll is no change
    loaded = config.config
    assert loaded.codes.level_of(UCE) is Level.SEPARATE_NPU
    assert loaded.codes.spelling(UCE) == "80e01801"
    assert loaded.codes.sources[UCE] == f"{directory.path / 'faultCode.json'} SeparateNPUCodes"
    assert loaded.codes.level_of("XID-79") is Level.SEPARATE_NPU  # our GPU codes stay
    assert loaded.customization.grace.wait_device_reset_time == 90.0
    assert set(loaded.customization.frequency) == {0x80E18005}
    assert loaded.customization.frequency[0x80E18005].times == 4
    assert loaded.customization.duration == {}
    assert dict(loaded.switch.levels) == {"[0x00f1fef5,155915,npu,na]":
                                          switch_faults.SwitchLevel.SEPARATE}
    assert loaded.node.level_of("2c000031") is node_faults.NodeFaultLevel.NOT_HANDLE_FAULT
    assert loaded.node.level_of("03000009") is None  # only what the file lists
    assert loaded.public.level_of("010001001") is Level.SEPARATE_NPU
    assert loaded.public.resources == frozenset({"CCAE"})


def test_bad_entries_are_reported_and_the_rest_applies(directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E01801", "not a code"],
                                            "Bogus": []})
    config = FaultConfigDirectory(directory.path)

    changed, problems = config.poll()

    assert changed is False
    assert sorted((p.entry, p.field, p.action) for p in problems) == [
        ("Bogus", "", Action.IGNORED), ("SeparateNPUCodes", "'not a code'", Action.IGNORED)]
    assert all(p.file == str(directory.path / "faultCode.json") for p in problems)
    assert config.config.codes.level_of(UCE) is Level.SEPARATE_NPU


def test_a_changed_file_is_read_again(directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E01801"]})
    config = FaultConfigDirectory(directory.path)
    config.poll()
    customization_before = config.config.customization

    directory.write(ConfigKind.FAULT_CODE, {"RestartRequestCodes": ["80E01801"]})
    assert config.poll() == (True, [])
    assert config.config.codes.level_of(UCE) is Level.RESTART_REQUEST
    assert config.config.customization is customization_before  # untouched files stay
    assert config.poll() == (False, [])


# --- a file that cannot be used --------------------------------------------------------------


@pytest.mark.parametrize("kind", [ConfigKind.FAULT_CODE, ConfigKind.FAULT_CUSTOMIZATION,
                                  ConfigKind.SWITCH_FAULT_CODE, ConfigKind.NODED_CONFIGURATION,
                                  ConfigKind.PUBLIC_FAULT_CONFIGURATION,
                                  ConfigKind.PUBLIC_CUSTOMIZATION])
def test_bad_json_at_start_gives_the_default(directory: Directory, kind: ConfigKind) -> None:
    directory.write(kind, "{\"SeparateNPUCodes\": [")
    config = FaultConfigDirectory(directory.path)

    changed, problems = config.poll()

    assert changed is False
    (problem,) = problems
    assert (problem.file, problem.entry, problem.field) == (str(directory.path / kind), "", "")
    assert problem.message.startswith("not valid JSON")
    assert problem.action is Action.DEFAULT_USED
    assert config.config == fault_config.FaultConfig()


def test_a_file_edited_to_bad_json_keeps_the_last_good_configuration(
        directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E01801"]})
    directory.write(ConfigKind.FAULT_CUSTOMIZATION, CUSTOMIZATION)
    config = FaultConfigDirectory(directory.path)
    config.poll()
    good = config.config

    directory.write(ConfigKind.FAULT_CODE, "{\"SeparateNPUCodes\": [\"80E01801\"")
    directory.write(ConfigKind.FAULT_CUSTOMIZATION, "not json at all")
    changed, problems = config.poll()

    assert changed is False
    assert sorted(_where(problems)) == [("faultCode.json", Action.KEPT_LAST_GOOD),
                                        ("faultCustomization.json", Action.KEPT_LAST_GOOD)]
    assert all(p.message.startswith("not valid JSON") for p in problems)
    assert config.config == good
    assert config.config.codes.level_of(UCE) is Level.SEPARATE_NPU
    assert config.poll() == (False, [])  # reported once

    # Fixed again: read, and a change.
    directory.write(ConfigKind.FAULT_CODE, {"PreSeparateNPUCodes": ["80E01801"]})
    changed, problems = config.poll()
    assert (changed, problems) == (True, [])
    assert config.config.codes.level_of(UCE) is Level.PRE_SEPARATE_NPU
    assert config.config.customization == good.customization  # still bad: still the last good


def test_a_removed_file_goes_back_to_the_default(directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E01801"]})
    directory.write(ConfigKind.NODED_CONFIGURATION, NODED)
    config = FaultConfigDirectory(directory.path)
    config.poll()

    directory.remove(ConfigKind.FAULT_CODE)
    directory.remove(ConfigKind.NODED_CONFIGURATION)
    assert config.poll() == (True, [])
    assert config.config.codes is fault_codes.default_table()
    assert config.config.codes.level_of(UCE) is Level.RESTART_BUSINESS
    assert config.config.node is node_faults.default_node_table()


def test_noded_duplicate_codes_refuse_the_configuration(directory: Directory) -> None:
    duplicate = {"FaultTypeCode": {"NotHandleFaultCodes": ["2C000031"],
                                   "SeparateFaultCodes": ["2c000031"]}}
    directory.write(ConfigKind.NODED_CONFIGURATION, duplicate)
    config = FaultConfigDirectory(directory.path)

    changed, problems = config.poll()
    assert changed is False
    (problem,) = problems
    assert (problem.entry, problem.field) == ("FaultTypeCode.SeparateFaultCodes", "2c000031")
    assert "rejected" in problem.message
    assert problem.action is Action.DEFAULT_USED
    assert config.config.node is node_faults.default_node_table()

    # While running: the good configuration stays.
    directory.write(ConfigKind.NODED_CONFIGURATION, NODED)
    assert config.poll() == (True, [])
    good = config.config.node
    directory.write(ConfigKind.NODED_CONFIGURATION, duplicate)
    changed, problems = config.poll()
    assert changed is False
    assert _where(problems) == [("NodeDConfiguration.json", Action.KEPT_LAST_GOOD)]
    assert config.config.node is good
    assert config.config.node.level_of("0100000D") is node_faults.NodeFaultLevel.SEPARATE_FAULT


def test_a_public_file_of_the_wrong_shape_keeps_the_last_good(directory: Directory) -> None:
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, {"publicFaultCode": {}})
    config = FaultConfigDirectory(directory.path)
    changed, problems = config.poll()
    assert changed is False
    assert _where(problems) == [("publicFaultConfiguration.json", Action.DEFAULT_USED)]
    assert "publicFaultResource is missing" in problems[0].message
    assert config.config.public is public_faults.PublicFaultConfig.default()

    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, PUBLIC)
    assert config.poll() == (True, [])
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, ["not", "an", "object"])
    changed, problems = config.poll()
    assert changed is False
    assert _where(problems) == [("publicFaultConfiguration.json", Action.KEPT_LAST_GOOD)]
    assert config.config.public.level_of("010001001") is Level.SEPARATE_NPU


# --- publicCustomization.json ----------------------------------------------------------------


def test_public_customization_overrides_the_public_configuration(
        directory: Directory) -> None:
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, PUBLIC)
    directory.write(ConfigKind.PUBLIC_CUSTOMIZATION, PUBLIC_CUSTOM)
    config = FaultConfigDirectory(directory.path)

    assert config.poll() == (False, [])
    assert config.config.public.level_of("010001001") is Level.NOT_HANDLE_FAULT
    assert config.config.public.level_of("220011001") is Level.SEPARATE_NPU
    assert config.config.public.resources == frozenset({"mine"})

    # A change to the overridden file changes nothing that is in force.
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION,
                    {**PUBLIC, "publicFaultResource": ["other"]})
    config.poll()
    assert config.config.public.resources == frozenset({"mine"})

    # Without the customization, the configuration file is in force.
    directory.remove(ConfigKind.PUBLIC_CUSTOMIZATION)
    assert config.poll() == (True, [])
    assert config.config.public.level_of("010001001") is Level.SEPARATE_NPU
    assert config.config.public.resources == frozenset({"other"})


def test_public_customization_alone_overrides_the_default(directory: Directory) -> None:
    directory.write(ConfigKind.PUBLIC_CUSTOMIZATION, PUBLIC_CUSTOM)
    config = FaultConfigDirectory(directory.path)
    config.poll()

    assert config.config.public.level_of("220011001") is Level.SEPARATE_NPU
    assert config.config.public.level_of("220001001") is None


def test_a_symlinked_public_customization_is_refused(directory: Directory,
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "publicCustomization.json"
    target.write_text(json.dumps(PUBLIC_CUSTOM))
    link = directory.path / ConfigKind.PUBLIC_CUSTOMIZATION
    link.symlink_to(target)
    config = FaultConfigDirectory(directory.path)

    changed, problems = config.poll()

    assert changed is False
    (problem,) = problems
    assert problem.file == str(link)
    assert "symbolic link" in problem.message
    assert problem.action is Action.DEFAULT_USED
    assert config.config.public is public_faults.PublicFaultConfig.default()
    assert config.config.public.level_of("220011001") is None


def test_a_symlinked_public_customization_falls_back_to_the_public_configuration(
        directory: Directory, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "public.json"
    target.write_text(json.dumps(PUBLIC_CUSTOM))
    directory.write(ConfigKind.PUBLIC_FAULT_CONFIGURATION, PUBLIC)
    (directory.path / ConfigKind.PUBLIC_CUSTOMIZATION).symlink_to(target)
    config = FaultConfigDirectory(directory.path)

    _, problems = config.poll()

    assert _where(problems) == [("publicCustomization.json", Action.DEFAULT_USED)]
    assert config.config.public.resources == frozenset({"CCAE"})


def test_a_symlink_appearing_while_running_keeps_the_last_good(
        directory: Directory, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "public.json"
    target.write_text(json.dumps(PUBLIC))
    directory.write(ConfigKind.PUBLIC_CUSTOMIZATION, PUBLIC_CUSTOM)
    config = FaultConfigDirectory(directory.path)
    config.poll()

    directory.remove(ConfigKind.PUBLIC_CUSTOMIZATION)
    (directory.path / ConfigKind.PUBLIC_CUSTOMIZATION).symlink_to(target)
    changed, problems = config.poll()

    assert changed is False
    assert _where(problems) == [("publicCustomization.json", Action.KEPT_LAST_GOOD)]
    assert config.config.public.resources == frozenset({"mine"})


# --- a file that is JSON but not of the file's shape, and the operator's faultCode.json ----


def test_a_switch_file_of_the_wrong_shape_gives_the_default_at_start(
        directory: Directory) -> None:
    directory.write(ConfigKind.SWITCH_FAULT_CODE, [])
    config = FaultConfigDirectory(directory.path)

    _, problems = config.poll()

    assert config.config.switch == switch_faults.default_switch_table()
    assert _where(problems) == [("SwitchFaultCode.json", Action.DEFAULT_USED)]


@pytest.mark.parametrize(("kind", "good"), [
    (ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E01801"]}),
    (ConfigKind.SWITCH_FAULT_CODE, SWITCH),
    (ConfigKind.FAULT_CUSTOMIZATION, CUSTOMIZATION),
])
def test_a_file_edited_to_the_wrong_shape_keeps_the_last_good(
        directory: Directory, kind: ConfigKind, good: dict[str, Any]) -> None:
    directory.write(kind, good)
    config = FaultConfigDirectory(directory.path)
    config.poll()
    before = config.config

    directory.write(kind, ["not", "an", "object"])
    changed, problems = config.poll()

    assert _where(problems) == [(str(kind), Action.KEPT_LAST_GOOD)]
    assert changed is False
    assert config.config == before


def test_a_code_left_out_of_the_operators_file_is_unlisted(directory: Directory) -> None:
    directory.write(ConfigKind.FAULT_CODE, {"SeparateNPUCodes": ["80E3A201"]})
    config = FaultConfigDirectory(directory.path)
    config.poll()
    codes = config.config.codes

    assert codes.level_of("XID-79") is Level.SEPARATE_NPU  # our GPU codes apply
    assert UCE not in codes.sources
    assert codes.network_level([0x81078603]) is Level.PRE_SEPARATE_NPU


def test_a_configmap_update_is_seen(directory: Directory) -> None:
    # How the kubelet updates a ConfigMap volume: a new timestamped directory, then the
    # ..data link swapped atomically; the files themselves stay links through ..data.
    def version(name: str, document: dict[str, Any]) -> None:
        (directory.path / name).mkdir()
        (directory.path / name / "faultCode.json").write_text(json.dumps(document))
        (directory.path / "..data_tmp").symlink_to(name)
        os.replace(directory.path / "..data_tmp", directory.path / "..data")

    version("..2025_01_01_00_00_00.1", {"SeparateNPUCodes": ["80E01801"]})
    (directory.path / "faultCode.json").symlink_to("..data/faultCode.json")
    config = FaultConfigDirectory(directory.path)
    config.poll()
    assert config.config.codes.level_of(UCE) is Level.SEPARATE_NPU

    version("..2025_01_01_00_01_00.2", {"RestartRequestCodes": ["80E01801"]})
    assert config.poll() == (True, [])
    assert config.config.codes.level_of(UCE) is Level.RESTART_REQUEST


def test_an_edit_behind_a_symlink_is_seen(directory: Directory,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    target = tmp_path_factory.mktemp("elsewhere") / "custom.json"
    target.write_text(json.dumps(CUSTOMIZATION))
    (directory.path / ConfigKind.FAULT_CUSTOMIZATION).symlink_to(target)
    config = FaultConfigDirectory(directory.path)
    config.poll()
    assert config.config.customization.grace.wait_device_reset_time == 90.0

    target.write_text(json.dumps({**CUSTOMIZATION, "GraceTolerance": GRACE}))
    os.utime(target, ns=(1_800_000_000 * 10**9, 1_800_000_000 * 10**9))
    assert config.poll() == (True, [])
    assert config.config.customization.grace.wait_device_reset_time == 150.0


# --- kind_of and parse_file --------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ConfigKind))
def test_kind_of_takes_the_originals_names(kind: ConfigKind) -> None:
    assert fault_config.kind_of(Path("/etc/x") / kind.value) is kind


@pytest.mark.parametrize("name", ["faultcode.json", "gpuFaultCode.json", "faultCode.json.bak",
                                  "faultCode"])
def test_kind_of_refuses_other_names(name: str) -> None:
    assert fault_config.kind_of(Path(name)) is None


def test_parse_file_of_an_unreadable_path(tmp_path: Path) -> None:
    loaded, problems = fault_config.parse_file(tmp_path / "faultCode.json",
                                               ConfigKind.FAULT_CODE)

    assert loaded is None
    (problem,) = problems
    assert problem.message.startswith("cannot be read")
    assert problem.action is Action.IGNORED


def test_parse_file_of_a_file_not_in_utf8(tmp_path: Path) -> None:
    path = tmp_path / "faultCode.json"
    path.write_bytes(b"{\"SeparateNPUCodes\": [\"\xff\"]}")

    loaded, problems = fault_config.parse_file(path, ConfigKind.FAULT_CODE)

    assert loaded is None
    assert problems[0].message.startswith("not valid JSON")


# --- the fault centre's files --------------------------------------------------------------

RULES = [{"TriggerFault": "8C1F860B", "RelationFaults": ["81078603"],
          "FaultStrategy": "SubHealth"}]
DURATIONS = [{"FaultCode": "81078603", "FaultType": "faultDevice", "TimeOutInterval": 60}]
POLICY = """enabled: true
separate:
  fault_window_hours: 12
  fault_threshold: 2
release:
  fault_free_hours: -1
"""


def test_the_fault_centres_files_take_effect_and_are_read_again(directory: Directory) -> None:
    directory.write(ConfigKind.RELATION_FAULTS, RULES)
    directory.write(ConfigKind.FAULT_DURATION, DURATIONS)
    directory.write(ConfigKind.SEPARATION_POLICY, POLICY)
    config = FaultConfigDirectory(directory.path)

    assert config.poll() == (False, [])
    relation = config.config.relation
    assert [(r.trigger, r.strategy) for r in relation.rules] == [("8C1F860B", "SubHealth")]
    timeout = relation.timeout_of("81078603")
    assert timeout is not None
    assert timeout.timeout == 60
    policy = config.config.separation
    assert (policy.fault_window_hours, policy.fault_threshold, policy.fault_free) == (12, 2, None)

    directory.write(ConfigKind.SEPARATION_POLICY, POLICY.replace("threshold: 2", "threshold: 5"))
    assert config.poll() == (True, [])
    assert config.config.separation.fault_threshold == 5
    assert config.config.relation == relation


def test_a_fault_centre_file_refused_keeps_what_was_in_force(directory: Directory) -> None:
    directory.write(ConfigKind.SEPARATION_POLICY, "separate: [unclosed")
    directory.write(ConfigKind.FAULT_DURATION, {"FaultCode": "81078603"})
    config = FaultConfigDirectory(directory.path)

    changed, problems = config.poll()
    assert changed is False
    assert sorted((Path(p.file).name, p.message.split(" (")[0], p.action) for p in problems) == [
        ("faultDuration.json", "not a JSON list", Action.DEFAULT_USED),
        ("manually_separate_policy.conf", "not valid YAML", Action.DEFAULT_USED)]
    assert config.config == fault_config.FaultConfig()

    directory.write(ConfigKind.RELATION_FAULTS, RULES)
    config.poll()
    good = config.config.relation_rules
    directory.write(ConfigKind.RELATION_FAULTS, [{**RULES[0], "FaultStrategy": "Isolate"}])
    changed, problems = config.poll()
    assert changed is False
    (problem,) = problems
    assert (problem.entry, problem.field, problem.action) == (
        "[0]", "FaultStrategy", Action.KEPT_LAST_GOOD)
    assert config.config.relation_rules == good
