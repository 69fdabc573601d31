"""A BMC whose power supply fails (IPMI event 08000001), for tests and benchmarks of the node
detector: an ``ipmitool`` on PATH that prints the alarm's SEL record once it has failed, and a
NodeDConfiguration.json that grades the code SeparateFault, so the node is UnHealthy."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FakeBmc"]

SEL = """SEL Record ID          : 0002
 Record Type           : 02
 Timestamp             : 03/02/2026 09:40:51
 Generator ID          : 0020
 EvM Revision          : 04
 Sensor Type           : Power Supply
 Sensor Number         : 51
 Event Type            : Sensor-specific Discrete
 Event Direction       : Assertion Event
 Event Data            : 01ffff
 Description           : Failure detected
"""


class FakeBmc:
    def __init__(self, directory: Path, *, failed: bool = True) -> None:
        """The tool and the configuration under ``directory``; ``failed``: the alarm is there
        from the start (else from :meth:`fail` on)."""
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        self._flag = directory / "power-supply-failed"
        ipmitool = bin_dir / "ipmitool"
        ipmitool.write_text(f"#!/bin/sh\n[ -e {self._flag} ] || exit 0\n"
                            f"cat <<'SEL'\n{SEL}SEL\n")
        ipmitool.chmod(0o755)
        self.path = f"{bin_dir}:{os.environ['PATH']}"
        """PATH with the tool first."""
        self.config = directory / "fault-config"
        """A --fault-config-dir with the NodeDConfiguration.json."""
        self.config.mkdir()
        (self.config / "NodeDConfiguration.json").write_text(json.dumps({"FaultTypeCode": {
            "NotHandleFaultCodes": [], "PreSeparateFaultCodes": [],
            "SeparateFaultCodes": ["08000001"]}}))
        if failed:
            self.fail()

    def fail(self) -> None:
        """The power supply fails: the next read of the BMC finds the alarm."""
        self._flag.touch()
