"""``trainguard report`` refuses a run it cannot find with a usage error naming it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.main import app


def test_a_run_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "no-such-run", "--run-root", str(tmp_path)])
    assert result.exit_code == 2
    assert "'no-such-run' is neither a run directory nor a run id" in result.output

