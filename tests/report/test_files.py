"""The page and the timeline of a run that failed before any progress was sampled: nothing
is left out, and nothing breaks on an empty rate."""

from __future__ import annotations

from pathlib import Path

from tests.report.recording import Recording, decision, fault, started
from trainguard.job import events
from trainguard.report import files, timeline


def test_a_failed_run_without_samples_still_gets_its_page_and_timeline(tmp_path: Path) -> None:
    recording = Recording()
    recording.add(started(0), at=500.0)
    recording.add(fault(rank=3, detected_at=500.5, detect_seconds=0.1, last_step=0), at=500.5)
    recording.add(decision("fail"), at=500.6)
    recording.add(events.JobFinished(job="j", outcome=events.JobOutcome.FAILED,
                                     reason="the same failure 3 times", generations=1,
                                     restarts_used=0, exit_code=1, wall_seconds=0.7),
                  at=500.7)
    page, picture = files.write(timeline.build(recording.stored), tmp_path / "out")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert "| outcome | failed: the same failure 3 times |" in text
    assert "| 1 | 0.4 s | 3 | crash | 0 | fail | 0.10 s | no | - | - |" in text
    assert "![timeline: steps per second, faults, detection and recovery](timeline.png)" in text
