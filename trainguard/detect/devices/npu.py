"""Ascend NPUs through the ``npu-smi`` command-line tool, polled (SPEC D1).

``npu-smi`` only answers questions, so this backend polls; subscribing to the driver's fault
events would take the DCMI C library, which the original's device plugin links and we do not.
What it runs, and what it reads of the documented output (``Key : value`` lines):

* at open, each ``/dev/davinci<N>`` (N is the chip's physical id):
  ``npu-smi info -t phyid-remap -p N`` -> ``Chip Logic ID``, ``NPU ID``, ``Chip ID``;
  then, for the first chip, ``npu-smi info -t spod-info -i <NPU ID> -c <Chip ID>`` ->
  ``Super Pod ID`` and ``Server Index`` (a device that "does not support" it, or a failed
  query, gives -2; 0xffffffff gives -1);
* at each poll, per chip: ``npu-smi info -t health -i <NPU ID> -c <Chip ID>`` ->
  ``Health Status`` (OK, Warning, Alarm, Critical, UNKNOWN) and ``Error Code`` (``NA``, or
  the chip's current codes, 8 hex digits each, separated by spaces or commas). The status is
  the severity of the codes (Warning Minor, Alarm Major, Critical Critical): it decides the
  level of a code the table does not know.

Written from the tool's documentation and tested with recorded output; it has not run against
an Ascend host.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from trainguard import clock as clocks
from trainguard.detect.devices import backend
from trainguard.faults.device import fault_codes
from trainguard.faults.device.fault_codes import Severity

__all__ = ["NpuBackend", "Runner", "parse_fields", "run_command"]

Runner = Callable[[Sequence[str]], str]
"""Runs a command line; its standard output. Raises backend.BackendError when it fails."""

_DEVICE = re.compile(r"davinci(\d+)")
_SEVERITY = {"WARNING": Severity.MINOR, "ALARM": Severity.MAJOR, "CRITICAL": Severity.CRITICAL}
_TIMEOUT = 10.0  # seconds an npu-smi call may take; it answers in well under one


def parse_fields(text: str) -> dict[str, str]:
    """``Key : value`` lines -> {key: value}, keys with their inner spaces, both stripped."""
    fields = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip():
            fields[key.strip()] = value.strip()
    return fields


def run_command(command: Sequence[str]) -> str:
    """The real :data:`Runner`: the command's standard output, within 10 s."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise backend.BackendError("npu", f"`{' '.join(command)}` failed: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise backend.BackendError("npu", f"`{' '.join(command)}` exited with "
                                   f"{done.returncode}: {said[-1] if said else 'no output'}")
    return done.stdout


class NpuBackend(backend.DeviceBackend):
    name = "npu"

    def __init__(self, *, clock: clocks.Clock, command: str = "npu-smi",
                 run: Runner | None = None, device_directory: Path = Path("/dev")) -> None:
        """``run`` and ``device_directory`` are for tests: recorded output, a fake /dev."""
        self._clock = clock
        self._command = command
        self._run = run
        self._device_directory = device_directory
        self._chips: dict[str, tuple[str, str]] = {}  # device name -> (NPU ID, Chip ID)

    def open(self) -> backend.Inventory:
        if self._run is None:
            found = shutil.which(self._command)
            if found is None:
                raise backend.BackendError(
                    "npu", f"{self._command} not found on PATH (is the Ascend driver installed?)")
            self._run = run_command
        try:
            entries = os.listdir(self._device_directory)
        except OSError as error:
            raise backend.BackendError("npu", f"cannot list {self._device_directory}: "
                                       f"{error.strerror}") from error
        physical = sorted(int(match.group(1)) for entry in entries
                          if (match := _DEVICE.fullmatch(entry)))
        if not physical:
            raise backend.BackendError("npu", f"no NPU found: no {self._device_directory}/"
                                       "davinci<N> device")
        devices = []
        self._chips.clear()
        for physical_id in physical:
            command = [self._command, "info", "-t", "phyid-remap", "-p", str(physical_id)]
            fields = parse_fields(self._query(command))
            logic_id = self._number(fields, "Chip Logic ID", command)
            npu, chip = (str(self._number(fields, key, command)) for key in ("NPU ID", "Chip ID"))
            identity = backend.DeviceIdentity(physical_id, logic_id)
            devices.append(identity)
            self._chips[identity.name] = (npu, chip)
        super_pod, server = self._super_pod(*self._chips[devices[0].name])
        return backend.Inventory(tuple(devices), super_pod, server)

    def subscribe(self, events: backend.EventSink, failed: backend.FailureSink) -> bool:
        return False  # npu-smi cannot push; see the module's docstring

    def poll(self) -> backend.Reading:
        present: dict[str, frozenset[str]] = {}
        severity: dict[str, Severity] = {}
        for name, (npu, chip) in self._chips.items():
            command = [self._command, "info", "-t", "health", "-i", npu, "-c", chip]
            codes, level = self._health(parse_fields(self._query(command)), command)
            if codes:
                present[name] = codes
                if level is not None:
                    severity[name] = level
        return backend.Reading(self._clock.wall(), present, severity)

    def close(self) -> None:
        """Nothing is held between calls of the tool."""

    def _query(self, command: Sequence[str]) -> str:
        assert self._run is not None, "open() first"
        return self._run(command)

    @staticmethod
    def _number(fields: Mapping[str, str], key: str, command: Sequence[str]) -> int:
        value = fields.get(key)
        if value is None or not value.isdigit():
            raise backend.BackendError("npu", f"`{' '.join(command)}`: {key}: expected a "
                                       f"number, got {value!r}")
        return int(value)

    @staticmethod
    def _health(fields: Mapping[str, str], command: Sequence[str]
                ) -> tuple[frozenset[str], Severity | None]:
        status = fields.get("Health Status")
        codes = fields.get("Error Code")
        if status is None or codes is None:
            missing = "Health Status" if status is None else "Error Code"
            raise backend.BackendError("npu", f"`{' '.join(command)}`: {missing}: missing from "
                                       "the output")
        if codes.upper() == "NA":
            return frozenset(), None
        found = set()
        for code in re.split(r"[\s,;]+", codes.strip()):
            if not fault_codes.is_code(code):
                raise backend.BackendError("npu", f"`{' '.join(command)}`: Error Code: "
                                           f"{code!r} is not a fault code")
            found.add(code.upper())
        return frozenset(found), _SEVERITY.get(status.upper())

    def _super_pod(self, npu: str, chip: str) -> tuple[int, int]:
        """SuperPodID and ServerIndex; -2 each where the chip cannot say."""
        command = [self._command, "info", "-t", "spod-info", "-i", npu, "-c", chip]
        try:
            fields = parse_fields(self._query(command))
        except backend.BackendError:
            return backend.UNKNOWN, backend.UNKNOWN
        return (backend.super_pod_value(_integer(fields.get("Super Pod ID"))),
                backend.super_pod_value(_integer(fields.get("Server Index"))))


def _integer(text: str | None) -> int | None:
    """A decimal or 0x-hexadecimal number; None for anything else."""
    if text is None:
        return None
    try:
        return int(text[2:], 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None
