"""Without matplotlib (the ``report`` extra) the timeline is refused with how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainguard.report import api, plot


def test_a_missing_matplotlib_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    report = api.RunReport(job="j", started="", outcome=None, reason="", wall_seconds=None,
                           steps_completed=None, step_seconds=None, training_seconds=None,
                           goodput=None, faults=(), rates=())
    with pytest.raises(api.ReportError, match=r"needs matplotlib: pip install "
                                              r"'trainguard\[report\]'"):
        plot.draw(report, tmp_path / "timeline.png")
    assert not (tmp_path / "timeline.png").exists()
