"""deviceNameCustomization.json with the seed's rules (table 7): a bad file keeps the defaults
and names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.detect.devices import naming
from trainguard.faults.config_problems import Action

GOOD = {"ResourceType": "Ascend910", "DevicePublicType": "example.com/npu910",
        "DevicePublicNamePre": "npu-", "PodConfigurationName": "example.com/npu-configuration"}


def test_defaults_are_the_originals_names_and_the_nvidia_plugins_for_gpus() -> None:
    ascend = naming.default_naming("npu")
    assert (ascend.public_type, ascend.public_name(3)) == ("huawei.com/Ascend910", "Ascend910-3")
    assert naming.default_naming("sim") is ascend
    gpu = naming.default_naming("nvml")
    assert (gpu.public_type, gpu.public_name(3)) == ("nvidia.com/gpu", "gpu-3")


def test_a_good_file_renames_the_devices() -> None:
    chosen, problems = naming.DeviceNaming.from_document(GOOD, default=naming.ASCEND_NAMING)
    assert problems == []
    assert (chosen.public_type, chosen.public_name(0)) == ("example.com/npu910", "npu-0")
    inference = {key: value for key, value in GOOD.items() if key != "PodConfigurationName"}
    inference["ResourceType"] = "Ascend310P"  # PodConfigurationName is only needed for 910
    chosen, problems = naming.DeviceNaming.from_document(inference,
                                                         default=naming.ASCEND_NAMING)
    assert (chosen.resource_type, problems) == ("Ascend310P", [])


@pytest.mark.parametrize(("field", "value", "message"), [
    ("ResourceType", "Ascend950", "'Ascend950' is not one of Ascend910, Ascend310, Ascend310P"),
    ("ResourceType", "", "required"),
    ("DevicePublicType", "a.b/c", "'a.b/c' has 5 characters; 10 to 32 are allowed"),
    ("DevicePublicType", "huawei.com/Ascend-910", "is not xxx.xxx/xxx with letters and digits"),
    ("DevicePublicType", "huawei.com.cn/Ascend910", "is not xxx.xxx/xxx"),
    ("DevicePublicNamePre", "A", "'A' has 1 characters; 2 to 16 are allowed"),
    ("DevicePublicNamePre", "9npu-", "starting with a letter"),
    ("DevicePublicNamePre", "npu_", "letters, digits and '-'"),
    ("DevicePublicNamePre", "averyveryverylongname-", "2 to 16 are allowed"),
    ("PodConfigurationName", "", "'' has 0 characters; 10 to 63 are allowed"),
    ("PodConfigurationName", "example.com/conf-", "ending with a letter or digit"),
    ("PodConfigurationName", "example.com/con f", "letters, digits, '-', '/' and '.'"),
    ("PodConfigurationName", 7, "expected a string, got 7"),
])
def test_a_bad_value_keeps_the_defaults_and_names_its_field(field: str, value: object,
                                                            message: str) -> None:
    document = {**GOOD, field: value}
    chosen, problems = naming.DeviceNaming.from_document(document, default=naming.ASCEND_NAMING)
    assert chosen is naming.ASCEND_NAMING
    [problem] = problems
    assert (problem.field, problem.action) == (field, Action.DEFAULT_USED)
    assert message in problem.message
    assert problem.describe().startswith(f"deviceNameCustomization.json: {field}: ")


def test_unknown_fields_are_reported_and_ignored() -> None:
    chosen, problems = naming.DeviceNaming.from_document({**GOOD, "Colour": "red"},
                                                         default=naming.ASCEND_NAMING)
    assert chosen.public_type == "example.com/npu910"
    assert [(p.field, p.action) for p in problems] == [("Colour", Action.IGNORED)]


def test_files(tmp_path: Path) -> None:
    default = naming.ASCEND_NAMING
    assert naming.DeviceNaming.load(tmp_path / "absent.json", default=default) == (default, [])
    path = tmp_path / naming.FILE
    path.write_text("{not json")
    chosen, [problem] = naming.DeviceNaming.load(path, default=default)
    assert chosen is default
    assert "not JSON" in problem.message
    assert problem.file == str(path)
    path.write_text("[]")
    chosen, [problem] = naming.DeviceNaming.load(path, default=default)
    assert "the file is not a JSON object" in problem.message
    path.write_text('{"ResourceType": "Ascend310", "DevicePublicType": "huawei.com/Ascend310",'
                    ' "DevicePublicNamePre": "Ascend310-"}')
    chosen, problems = naming.DeviceNaming.load(path, default=default)
    assert (chosen.public_name(1), problems) == ("Ascend310-1", [])
    directory = tmp_path / "directory.json"
    directory.mkdir()
    chosen, [problem] = naming.DeviceNaming.load(directory, default=default)
    assert "cannot be read" in problem.message


def test_constructing_a_bad_naming_raises_naming_the_field() -> None:
    with pytest.raises(naming.NamingError, match="DevicePublicNamePre: '-x' is not letters"):
        naming.DeviceNaming("GPU", "nvidia.com/gpu", "-x")
