"""The event records of device faults (the seed's table 6)."""

from __future__ import annotations

from trainguard.detect.devices import fault_notices
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent
from trainguard.faults.device.fault_codes import Severity, default_table
from trainguard.faults.levels import Level


def _notice(event: DeviceFaultEvent) -> fault_notices.FaultNotice:
    return fault_notices.fault_notice(event, table=default_table(), node="node-1",
                                      device="Ascend910-2", instance="trainguard-agent-node-1")


def test_an_occurrence_is_a_warning_with_its_level_as_action() -> None:
    notice = _notice(DeviceFaultEvent("device-2", "80E01801", Assertion.OCCUR, 1744167455.784))
    assert notice.to_data() == {
        "type": "Warning", "reason": "Occur", "action": "RestartBusiness",
        "message": "node node-1, device Ascend910-2: fault 80E01801 occurred, level "
                   "RestartBusiness",
        "source": {"host": "node-1"}, "eventTime": "2025-04-09T02:57:35.784Z",
        "reportingComponent": "device-plugin", "reportingInstance": "trainguard-agent-node-1"}


def test_recovery_notice_and_the_level_of_codes_the_table_does_not_know() -> None:
    recovered = _notice(DeviceFaultEvent("device-2", "81078603", Assertion.RECOVER, 0.0))
    assert (recovered.reason, recovered.action) == (fault_notices.Reason.RECOVERY,
                                                   Level.NOT_HANDLE_FAULT)
    minor = _notice(DeviceFaultEvent("device-2", "12345678", Assertion.ONCE, 0.0,
                                     Severity.MINOR))
    assert (minor.reason, minor.action) == (fault_notices.Reason.NOTICE, Level.NOT_HANDLE_FAULT)
    unknown = _notice(DeviceFaultEvent("device-2", "12345678", Assertion.OCCUR, 0.0))
    assert unknown.action is Level.SEPARATE_NPU
    assert "fault 12345678 occurred, level SeparateNPU" in unknown.message
