"""The host's detectors from the run's settings: what each flag reads, and the errors that name
the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard import clock as clocks
from trainguard.agent import device_watch, host_detectors
from trainguard.detect import network
from trainguard.proto import control_pb2 as pb


def test_training_interfaces_are_read_with_the_devices_each_serves() -> None:
    settings = host_detectors.DetectorSettings(training_interfaces="eth0=0,1; ib0=2")
    assert settings.interfaces() == (network.TrainingInterface("eth0", (0, 1)),
                                     network.TrainingInterface("ib0", (2,)))


@pytest.mark.parametrize(("fields", "message"), [
    ({"training_interfaces": "eth0"}, "training-interfaces 'eth0': expected INTERFACE=DEVICE"),
    ({"training_interfaces": "eth0=a"}, "training-interfaces 'eth0=a': invalid literal"),
    ({"training_interfaces": "eth0=-1"}, "training-interfaces 'eth0=-1': "),
    ({"storage_mounts": "relative/path"}, "storage-mounts: "),
    ({"switch_source": "hccs"}, "switch-source must be one of none, sim, nvlink"),
    ({"device_backend": "tpu"}, "device-backend must be one of sim, nvml, npu"),
    ({"bmc_period": 0}, "bmc-period must be > 0 seconds, got 0"),
])
def test_a_setting_that_cannot_be_used_is_refused_naming_its_flag(
        fields: dict[str, object], message: str) -> None:
    with pytest.raises(host_detectors.DetectorSettingsError) as refused:
        host_detectors.DetectorSettings(**fields)  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)


def test_every_asked_for_detector_joins_the_watch_and_a_bad_timeline_is_named(
        tmp_path: Path) -> None:
    async def send(report: pb.DeviceReport) -> object:
        return None

    def build(settings: host_detectors.DetectorSettings) -> device_watch.DeviceWatch:
        return host_detectors.build(settings, node="host-a", job="job", devices=2, table=None,
                                    customization=None, send=send, record=lambda e: None,
                                    publish=lambda n, d: None, clock=clocks.SystemClock())

    watch = build(host_detectors.DetectorSettings(
        training_interfaces="eth0=0", switch_source="sim", storage_mounts=str(tmp_path)))
    assert list(watch.states()) == ["devices", "network", "node", "switch", "storage"]
    bad = tmp_path / "devices.jsonl"
    bad.write_text('{"time": 0, "device": 5, "code": "80E01801", "assertion": "occur"}\n')
    with pytest.raises(host_detectors.DetectorSettingsError, match=r"device-timeline .*line 1"):
        build(host_detectors.DetectorSettings(device_timeline=bad))
