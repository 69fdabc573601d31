"""A fault a step retry may clear is hidden from its job while the retry runs (NOTES §4.6).

For a job that retries steps (SPEC H5), the memory error ``80E01801`` and the HCCL retry error
``8C1F860B`` (``device_health.RETRY_CODES``) on one of its devices are hidden, as in the
original's retry processor:

* for 10 s after the fault (``JobReportRecoverTimeout``): the job has that long to say it is
  recovering;
* if the job reported its recovery within those 10 s, until 30 s after that report
  (``JobReportCompleteTimeout``), and for good if the job reported the retry complete within
  those 30 s: the retry cleared the fault, and the job goes on without a restart.

Otherwise the fault is shown to the job, which then handles it as any fault of its level. A
report older than the fault by more than 10 s belongs to an earlier fault and hides nothing
after the first 10 s.
"""

from __future__ import annotations

import dataclasses

__all__ = ["REPORT_COMPLETE_TIMEOUT", "REPORT_RECOVER_TIMEOUT", "RecoveryReport",
           "retry_hidden"]

REPORT_RECOVER_TIMEOUT = 10.0
"""Seconds a job has, after the fault, to report that it is recovering."""
REPORT_COMPLETE_TIMEOUT = 30.0
"""Seconds a job has, after reporting its recovery, to report it complete."""


@dataclasses.dataclass(frozen=True)
class RecoveryReport:
    """What a job said of its retry on a device: when it began recovering and, if it said so,
    when the retry completed (seconds)."""

    recover_time: float
    complete_time: float | None = None


def retry_hidden(fault_time: float, now: float, report: RecoveryReport | None) -> bool:
    """Whether a retry fault raised at ``fault_time`` is hidden from its job at ``now``."""
    if fault_time >= now - REPORT_RECOVER_TIMEOUT:
        return True
    if report is None or fault_time < report.recover_time - REPORT_RECOVER_TIMEOUT:
        return False
    if now <= report.recover_time + REPORT_COMPLETE_TIMEOUT:
        return True
    complete = report.complete_time
    return (complete is not None and complete >= fault_time
            and report.recover_time <= complete <= report.recover_time
            + REPORT_COMPLETE_TIMEOUT)
