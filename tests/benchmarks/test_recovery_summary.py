"""The summary's section for the recovery benchmark at another width (``--width``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common, summary


def result(in_place: float, lost: int) -> dict[str, object]:
    medians = {"trainguard-in-place": {"detect_seconds": 0.06, "recover_seconds": in_place,
                                       "steps_lost": lost},
               "trainguard": {"detect_seconds": 0.05, "recover_seconds": 0.45, "steps_lost": 0}}
    return {"when": "2026-12-03T16:12:18Z", "setup": "3 x 1448x1448", "medians": medians,
            "trials": [{}] * 10,
            "machine": {"argv": ["benchmarks/recovery.py", "--width", "1448"]}}


@pytest.mark.parametrize(("in_place", "lost", "verdict"), [
    (0.40, 0, "met"), (0.65, 0, "**not met**"), (0.40, 1, "**not met**")])
def test_each_tool_is_shown_and_the_target_holds_for_the_slowest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: float, lost: int,
        verdict: str) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "recovery-crash-width-1448.json").write_text(json.dumps(result(in_place, lost)))
    lines: list[str] = []
    summary._recovery(lines)
    text = "\n".join(lines)
    assert "`python -m benchmarks.recovery --width 1448` (10 trials in all; medians)" in text
    assert f"| trainguard-in-place | 0.06 s | {in_place:.2f} s | {lost} |" in text
    assert "| trainguard | 0.05 s | 0.45 s | 0 |" in text
    assert text.endswith(f"every tool (the target at 75 MB per rank): {verdict}\n")
