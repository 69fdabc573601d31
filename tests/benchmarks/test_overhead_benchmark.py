"""The overhead benchmark runs at tiny sizes: every launcher, the same job, one JSON object
(the full measurement: ``python -m benchmarks.overhead``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common, overhead, summary_costs

pytestmark = pytest.mark.e2e


def test_a_tiny_run_measures_the_variants_asked_for_against_torchrun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "overhead.json"
    asked = ["trainguard-session-run", "trainguard-session-run+metrics"]
    assert overhead.main(["--nproc-per-node", "2", "--steps", "20", "--width", "32",
                          "--variants", *asked, "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == result
    variants = {variant["name"]: variant for variant in result["variants"]}
    assert list(variants) == [variant.name for variant in overhead.VARIANTS]
    metrics = overhead.has_metrics_flag()
    for variant in variants.values():
        wanted = variant["name"] in ("torchrun", *asked)
        assert variant["measured"] is (wanted and (metrics or not variant["metrics"]))
        if variant["measured"]:
            assert variant["steps_measured"] == 2 * (20 - 2)  # 2 ranks, warm-up left out
            assert variant["median_step_seconds"] > 0
            assert variant["met"] is (None if variant["name"] == "torchrun"
                                      else variant["overhead"] < overhead.TARGET)
        else:
            assert variant["why"] == ("this trainguard has no --metrics-port" if wanted
                                      else "not asked for (--variants)")
    assert variants["torchrun"]["overhead"] == 0
    # the summary renders it
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    lines: list[str] = []
    summary_costs.overhead(lines)
    text = "\n".join(lines)
    assert "python -m benchmarks.overhead --nproc-per-node 2 --steps 20" in text
    assert "| trainguard-session-run |" in text
