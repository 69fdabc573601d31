"""The npu backend through the backend interface, on output recorded in npu-smi's documented
format (``Key : value`` lines)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.detect.devices.conftest import FakeClock
from trainguard.detect.devices import backend, npu
from trainguard.faults.device.fault_codes import Severity

REMAP = """\
 Chip Physical ID            :{physical}
 Chip Logic ID               :{logic}
 NPU ID                      :{npu}
 Chip ID                     :0
"""
SPOD_A3 = """\
        SDID                           : 37748736
        Super Pod Size                 : 48
        Super Pod ID                   : 1
        Server Index                   : 0xffffffff
"""
HEALTHY = """\
        Health Status                  : OK
        Error Code                     : NA
        Error Information              : NA
"""
FAULTY = """\
        Health Status                  : Critical
        Error Code                     : 80E18402 80e18401,A8028801
        Error Information              : node type=HBM, sensor type=ECC
"""


class RecordedNpuSmi:
    """Answers each command line with its recorded output; a failing one raises."""

    def __init__(self, outputs: dict[str, list[str]]) -> None:
        self.outputs = outputs
        self.commands: list[str] = []

    def __call__(self, command: Sequence[str]) -> str:
        line = " ".join(command)
        self.commands.append(line)
        recorded = self.outputs.get(line)
        if recorded is None:
            raise backend.BackendError("npu", f"`{line}` exited with 255: not recorded")
        return recorded.pop(0) if len(recorded) > 1 else recorded[0]


def _host(tmp_path: Path, physical_ids: Sequence[int]) -> Path:
    for physical in physical_ids:
        (tmp_path / f"davinci{physical}").touch()
    (tmp_path / "davinci_manager").touch()
    return tmp_path


def _two_chips(spod: str | None = SPOD_A3) -> dict[str, list[str]]:
    outputs = {
        "npu-smi info -t phyid-remap -p 0": [REMAP.format(physical=0, logic=1, npu=8)],
        "npu-smi info -t phyid-remap -p 3": [REMAP.format(physical=3, logic=0, npu=5)],
        "npu-smi info -t health -i 8 -c 0": [HEALTHY, FAULTY, HEALTHY],
        "npu-smi info -t health -i 5 -c 0": [HEALTHY],
    }
    if spod is not None:
        outputs["npu-smi info -t spod-info -i 8 -c 0"] = [spod]
    return outputs


def test_inventory_from_dev_davinci_and_the_phyid_remap(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    smi = RecordedNpuSmi(_two_chips())
    inventory = npu.NpuBackend(clock=clock, run=smi, device_directory=_host(tmp_path, [3, 0])
                               ).open()
    assert inventory.devices == (backend.DeviceIdentity(0, 1), backend.DeviceIdentity(3, 0))
    assert (inventory.super_pod_id, inventory.server_index) == (1, -1)


@pytest.mark.parametrize("spod", ["This device does not support querying spod-info.\n", None])
def test_a_chip_without_super_pod_information_gives_minus_two(tmp_path: Path, clock: FakeClock,
                                                              spod: str | None) -> None:
    smi = RecordedNpuSmi(_two_chips(spod))
    inventory = npu.NpuBackend(clock=clock, run=smi, device_directory=_host(tmp_path, [0, 3])
                               ).open()
    assert (inventory.super_pod_id, inventory.server_index) == (-2, -2)


def test_polls_read_each_chips_codes_and_severity(tmp_path: Path, clock: FakeClock) -> None:
    device = npu.NpuBackend(clock=clock, run=RecordedNpuSmi(_two_chips()),
                            device_directory=_host(tmp_path, [0, 3]))
    device.open()
    assert device.subscribe(lambda event: None, lambda error: None) is False
    assert device.poll().present == {}
    clock.advance(5.0)
    reading = device.poll()
    assert reading.time == clock.wall()
    assert reading.present == {"device-0": frozenset({"80E18402", "80E18401", "A8028801"})}
    assert reading.severity == {"device-0": Severity.CRITICAL}
    assert device.poll().present == {}


def test_without_npu_smi_the_message_says_so(tmp_path: Path, clock: FakeClock) -> None:
    device = npu.NpuBackend(clock=clock, command="npu-smi-not-installed",
                            device_directory=tmp_path)
    with pytest.raises(backend.BackendError, match=r"npu: npu-smi-not-installed not found on "
                                                   r"PATH \(is the Ascend driver installed\?\)"):
        device.open()


def test_a_host_without_npus_cannot_open(tmp_path: Path, clock: FakeClock) -> None:
    device = npu.NpuBackend(clock=clock, run=RecordedNpuSmi({}), device_directory=tmp_path)
    with pytest.raises(backend.BackendError, match=r"npu: no NPU found: no .*/davinci<N> device"):
        device.open()
    missing = npu.NpuBackend(clock=clock, run=RecordedNpuSmi({}),
                             device_directory=tmp_path / "absent")
    with pytest.raises(backend.BackendError, match=r"npu: cannot list .*absent"):
        missing.open()


@pytest.mark.parametrize(("command", "output", "message"), [
    ("npu-smi info -t phyid-remap -p 0", " Chip Logic ID : -\n",
     "phyid-remap -p 0`: Chip Logic ID: expected a number, got '-'"),
    ("npu-smi info -t health -i 8 -c 0", "Health Status : OK\n",
     "health -i 8 -c 0`: Error Code: missing from the output"),
    ("npu-smi info -t health -i 8 -c 0", "Health Status : Alarm\nError Code : 80E1+\n",
     "health -i 8 -c 0`: Error Code: '80E1\\+' is not a fault code"),
])
def test_unexpected_output_names_the_command_and_field(tmp_path: Path, clock: FakeClock,
                                                       command: str, output: str,
                                                       message: str) -> None:
    outputs = _two_chips()
    outputs[command] = [output]
    device = npu.NpuBackend(clock=clock, run=RecordedNpuSmi(outputs),
                            device_directory=_host(tmp_path, [0, 3]))
    with pytest.raises(backend.BackendError, match=message):
        _open_and_poll(device)


def _open_and_poll(device: npu.NpuBackend) -> None:
    device.open()
    device.poll()


def test_the_real_runner_reports_a_failing_command() -> None:
    with pytest.raises(backend.BackendError, match=r"npu: `false` exited with 1: no output"):
        npu.run_command(["false"])
    assert npu.run_command(["echo", "Health Status : OK"]) == "Health Status : OK\n"
    assert npu.parse_fields(" NPU ID : 3 \nno colon here\n : 4\n") == {"NPU ID": "3"}
