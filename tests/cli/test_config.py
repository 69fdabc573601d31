"""A configuration file for `trainguard run`, the TRAINGUARD_* environment, durations with units,
and `trainguard config show`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard import launcher
from trainguard.cli import config_file, durations, main, run_command


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "trainguard.toml"
    path.write_text('heartbeat-floor = "3s"\nkeep-checkpoints = 5\n'
                    'preload = ["json", "csv"]\nleave-timeout = 20\n')
    return path


def parse(args: list[str], environ: dict[str, str] | None = None) -> launcher.RunSettings:
    return run_command.build_settings(run_command.parser().parse_args(args),
                                      environ=environ or {})


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30.0), ("1.5", 1.5), ("500ms", 0.5), ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0),
    (" 2 h ", 7200.0), ("-1s", -1.0), ("1e3ms", 1.0),
])
def test_durations_take_units(text: str, seconds: float) -> None:
    assert durations.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "10 minutes", "5w", "m", "1h30m", ""])
def test_a_duration_that_is_not_one_is_named(text: str) -> None:
    with pytest.raises(ValueError, match=f"{text!r} is not a duration"):
        durations.parse_duration(text)


def test_durations_everywhere_seconds_are_asked_for(script: Path) -> None:
    settings = parse(["--heartbeat-floor", "500ms", "--heartbeat-cap", "10m",
                      "--persist-interval", "2h", "--monitor-interval", "250ms",
                      "--shutdown-timeout", "1m", "--leave-timeout", "30s", str(script)],
                     {"TRAINGUARD_RECOVER_TIMEOUT": "1m"})
    assert settings.heartbeat.floor == 0.5
    assert settings.heartbeat.cap == 600.0
    assert settings.checkpoint.persist_interval == 7200.0
    assert settings.agent.monitor_interval == 0.25
    assert settings.agent.shutdown_timeout == 60.0
    assert settings.agent.leave_timeout == 30.0
    assert settings.recovery.recover_timeout == 60.0


def test_a_count_is_not_a_duration(script: Path) -> None:
    with pytest.raises(SystemExit):
        run_command.parser().parse_args(["--heartbeat-factor", "2s", str(script)])
    with pytest.raises(SystemExit):
        run_command.parser().parse_args(["--keep-checkpoints", "2s", str(script)])


def test_help_says_which_options_are_durations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_command.parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--heartbeat-floor", "--persist-interval", "--leave-timeout",
                 "--monitor-interval", "--shutdown-timeout"):
        assert f"{flag} DURATION" in text
    assert "--heartbeat-factor NUMBER" in text
    assert "--config FILE" in text


def test_the_file_sets_options(config: Path, script: Path) -> None:
    settings = parse(["--config", str(config), str(script)])
    assert settings.heartbeat.floor == 3.0
    assert settings.checkpoint.keep_checkpoints == 5
    assert settings.agent.preload == ("json", "csv")
    assert settings.agent.leave_timeout == 20.0


@pytest.mark.parametrize(("environ", "args", "expected"), [
    ({}, [], 3.0),
    ({"TRAINGUARD_HEARTBEAT_FLOOR": "4"}, [], 4.0),
    ({"TRAINGUARD_HEARTBEAT_FLOOR": "4"}, ["--heartbeat-floor", "5"], 5.0),
    ({}, ["--heartbeat-floor", "5"], 5.0),
])
def test_file_then_environment_then_flag(environ: dict[str, str], args: list[str],
                                         expected: float, config: Path, script: Path) -> None:
    assert parse(["--config", str(config), *args, str(script)], environ).heartbeat.floor == (
        expected)


def test_the_file_can_come_from_the_environment(config: Path, script: Path) -> None:
    settings = parse([str(script)], {"TRAINGUARD_CONFIG": str(config)})
    assert settings.checkpoint.keep_checkpoints == 5


def test_run_root_and_inject_from_the_file(tmp_path: Path, script: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'run-root = "{tmp_path / "runs"}"\ninject = "crash:0:3"\n')
    settings = parse(["--config", str(config), "--run-id", "j", str(script)])
    assert settings.agent.run_dir == tmp_path / "runs" / "j"
    assert [(str(f.kind), f.rank, f.step) for f in settings.agent.fault_plan] == [
        ("crash", 0, 3)]
    flagged = parse(["--config", str(config), "--run-root", str(tmp_path / "other"),
                     "--run-id", "j", str(script)], {"TRAINGUARD_INJECT": "hang:0:1"})
    assert flagged.agent.run_dir == tmp_path / "other" / "j"
    assert [str(f.kind) for f in flagged.agent.fault_plan] == ["hang"]


def test_a_strategy_from_the_file_that_cannot_work_is_refused(tmp_path: Path,
                                                              script: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('recover-strategy = ["move-to-spare"]\n')
    with pytest.raises(run_command.UsageError, match=r"move to spare \(recover\) moves failed"):
        parse(["--config", str(config), str(script)])


@pytest.mark.parametrize(("text", "expected"), [
    ("heartbeat-flor = 3\n", "unknown key 'heartbeat-flor' (did you mean heartbeat-floor?)"),
    ("max-restarts = 3\n", "unknown key 'max-restarts'"),
    ("[heartbeat]\nfloor = 3\n", "unknown key 'heartbeat'"),
    ("heartbeat-floor = = 3\n", "not TOML"),
    ('heartbeat-floor = "soon"\n', ": heartbeat-floor: 'soon' is not a duration"),
    ("keep-checkpoints = 0\n", "keep-checkpoints must be >= 1, got 0"),
])
def test_a_bad_file_is_named(text: str, expected: str, tmp_path: Path, script: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(run_command.UsageError) as caught:
        parse(["--config", str(config), str(script)])
    assert expected in str(caught.value)


def test_a_missing_file_is_named(tmp_path: Path, script: Path) -> None:
    with pytest.raises(run_command.UsageError, match=r"--config '.*nope.toml': cannot read it"):
        parse(["--config", str(tmp_path / "nope.toml"), str(script)])


def test_a_misspelled_variable_is_named_with_the_closest(script: Path) -> None:
    with pytest.raises(run_command.UsageError) as caught:
        parse([str(script)], {"TRAINGUARD_HEARTBEAT_FLOR": "3"})
    assert str(caught.value) == (
        "environment variable TRAINGUARD_HEARTBEAT_FLOR is not one of trainguard's (did you "
        "mean TRAINGUARD_HEARTBEAT_FLOOR?); unset it or fix its name")


@pytest.mark.parametrize("variable", [
    "TRAINGUARD_AGENT_SOCKET", "TRAINGUARD_DEVICE", "TRAINGUARD_GENERATION",
    "TRAINGUARD_RUN_ROOT", "TRAINGUARD_LOG_LEVEL", "TRAINGUARD_LOG_FORMAT",
    "TRAINGUARD_INJECT", "TRAINGUARD_CHECKPOINT_EVERY", "TRAINGUARD_WORKER_SECRET",
    "TRAINGUARD_CHECKPOINT_DIR", "TRAINGUARD_SNAPSHOT_SHARES",
])
def test_variables_trainguard_sets_or_reads_are_known(variable: str, script: Path,
                                                      tmp_path: Path) -> None:
    value = {"TRAINGUARD_INJECT": "", "TRAINGUARD_RUN_ROOT": str(tmp_path),
             "TRAINGUARD_CHECKPOINT_DIR": str(tmp_path)}.get(variable, "1")
    parse([str(script)], {variable: value})


def test_every_variable_in_the_tree_is_known() -> None:
    """A TRAINGUARD_* variable added anywhere must be known here, or `run` refuses it."""
    import re  # noqa: PLC0415 - only this test reads the tree

    root = Path(run_command.__file__).parents[1]
    found = {name for path in root.rglob("*.py")
             for name in re.findall(r"TRAINGUARD_[A-Z0-9_]*[A-Z0-9]", path.read_text())}
    known = run_command.known_environment() | config_file.WORKER_VARIABLES
    assert found, "no variable found: the scan is broken"
    assert found <= known


def test_config_show_names_each_source(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_KEEP_CHECKPOINTS", "7")
    result = CliRunner().invoke(main.app, ["config", "show", "--config", str(config)])
    assert result.exit_code == 0, result.output
    lines = {line.split("=")[0].strip(): line for line in result.output.splitlines()
             if "=" in line and not line.startswith("#")}
    assert lines["heartbeat-floor"].split("#")[-1].strip() == "file"
    assert lines["heartbeat-floor"].startswith("heartbeat-floor = 3.0 ")
    assert lines["keep-checkpoints"].startswith("keep-checkpoints = 7 ")
    assert lines["keep-checkpoints"].endswith("# env")
    assert lines["heartbeat-cap"].endswith("# default")
    assert lines["preload"].startswith('preload = ["json", "csv"]')
    assert "# checkpoint-dir is not set" in result.output


def test_config_show_output_is_a_configuration_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main.app, ["config", "show"])
    assert result.exit_code == 0, result.output
    seeded = tmp_path / "seeded.toml"
    seeded.write_text(result.output)
    assert run_command.load_config(seeded, {})["heartbeat-floor"] == 2.0


def test_config_show_refuses_a_misspelled_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("keep-checkpoint = 2\n")
    result = CliRunner().invoke(main.app, ["config", "show", "--config", str(config)])
    assert result.exit_code == 2
    assert "unknown key 'keep-checkpoint' (did you mean keep-checkpoints?)" in result.output
