"""The snapshot-overhead benchmark runs at a tiny size: every variant, one JSON object (the full
measurement: ``python -m benchmarks.snapshot_overhead``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common, snapshot_overhead, summary

pytestmark = pytest.mark.e2e


def test_a_tiny_run_measures_the_variants_asked_for_against_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "snapshot-overhead.json"
    asked = ["whole, every step", "shares, every step"]
    assert snapshot_overhead.main(["--nproc-per-node", "2", "--steps", "12", "--sizes", "demo",
                                   "--variants", *asked, "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == result
    [size] = result["sizes"]
    assert size["name"] == "demo"
    assert set(size["median_step_seconds"]) == {snapshot_overhead.BASELINE,
                                                snapshot_overhead.CONTROL, *asked}
    assert set(size["overhead"]) == set(asked)
    assert all(count == 2 * (12 - 1) for count in size["steps_measured"].values())
    assert size["met"] == {name: value <= snapshot_overhead.TARGET
                           for name, value in size["overhead"].items()}
    assert size["state_bytes_per_rank"] == snapshot_overhead.state_bytes(256)
    assert size["floor_copy_seconds"] > 0
    assert size["every_rank_copies_overhead"] == pytest.approx(2 * size["floor_overhead"])
    medians = size["median_step_seconds"]
    assert size["noise"] == pytest.approx(
        medians[snapshot_overhead.CONTROL] / medians[snapshot_overhead.BASELINE] - 1)
    assert set(size["overhead_by_round"]) == {snapshot_overhead.CONTROL, *asked}
    assert all(len(values) == 1 for values in size["overhead_by_round"].values())
    # the summary renders it
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    lines: list[str] = []
    summary._snapshot_overhead(lines)
    text = "\n".join(lines)
    assert "python -m benchmarks.snapshot_overhead --nproc-per-node 2 --steps 12" in text
    assert "| demo (2.4 MB) |" in text
    assert "- demo, shares, every step, at most 5% above no snapshots: " in text
    control = size["overhead_by_round"][snapshot_overhead.CONTROL][0]
    assert f"noise {size['noise']:+.1%}; by round " in text
    assert f"the control by round {control:+.1%})" in text


def test_the_large_size_holds_about_75_megabytes_per_rank() -> None:
    size = next(size for size in snapshot_overhead.SIZES if size.name == "75MB")
    assert 74e6 < snapshot_overhead.state_bytes(size.width) < 76e6
