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


def test_help_prose_is_wrapped_to_the_terminal_not_to_the_source() -> None:
    """A docstring wrapped at the source's width once came out ragged (a line of a few words
    after each full one); each paragraph must reach rich as one line."""
    commands = [main.app]
    while commands:
        group = commands.pop()
        commands.extend(g.typer_instance for g in group.registered_groups if g.typer_instance)
        for command in group.registered_commands:
            assert command.help, command.name
            for paragraph in command.help.split("\n\n"):
                assert "\n" not in paragraph, (command.name, paragraph)
    status = CliRunner().invoke(main.app, ["status", "--help"], terminal_width=80).output
    lines = [line.strip() for line in status.splitlines()]
    assert "run. With --controller: the jobs across hosts that controller runs." in lines
