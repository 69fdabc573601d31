"""The `trainguard` command itself: --version, shell completion, help that leads on."""

from __future__ import annotations

from typer.testing import CliRunner

from trainguard import __version__
from trainguard.cli import main


def test_version_flag() -> None:
    result = CliRunner().invoke(main.app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"trainguard {__version__}\n"


def test_shell_completion_is_offered() -> None:
    result = CliRunner().invoke(main.app, ["--help"])
    assert "--install-completion" in result.output
    assert "--show-completion" in result.output


def test_fault_and_faults_point_to_each_other() -> None:
    fault = " ".join(CliRunner().invoke(main.app, ["fault", "--help"]).output.split())
    faults = " ".join(CliRunner().invoke(main.app, ["faults", "--help"]).output.split())
    assert "explain a fault code or replay a device's history: trainguard faults" in fault
    assert "To inject a fault into a running job: trainguard fault." in faults
