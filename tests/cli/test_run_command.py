"""``trainguard run`` parses torchrun's command line and trainguard's own options."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from trainguard import launcher
from trainguard.cli import run_command
from trainguard.detect import heartbeat


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return path


def parse(args: list[str]) -> launcher.RunSettings:
    return run_command.build_settings(run_command.parser().parse_args(args))


def test_help_has_a_section_for_torchrun_and_one_for_trainguard(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_command.parser().parse_args(["--help"])
    assert exited.value.code == 0
    torchrun, _, ours = capsys.readouterr().out.partition("trainguard options:")
    assert "torchrun options:" in torchrun
    assert "--nproc-per-node NPROC_PER_NODE, --nproc_per_node NPROC_PER_NODE" in torchrun
    for expected in ("--heartbeat-floor", "TRAINGUARD_HEARTBEAT_FLOOR", "--persist-interval",
                     "--run-root", "--inject"):
        assert expected in ours
    assert "--heartbeat-floor NUMBER\n" not in torchrun


@pytest.mark.parametrize("spelling", ["--nproc-per-node", "--nproc_per_node"])
def test_both_spellings_of_a_torchrun_flag(spelling: str, script: Path) -> None:
    settings = parse([spelling, "3", str(script)])
    assert settings.agent.nproc_per_node == 3


def test_script_arguments_pass_through_even_when_they_look_like_options(script: Path) -> None:
    settings = parse(["--max-restarts", "2", str(script), "--steps", "5", "-m", "x"])
    assert settings.agent.program.args == ("--steps", "5", "-m", "x")
    assert settings.agent.program.mode == "path"
    assert settings.agent.program.target == str(script.resolve())
    assert settings.recovery.max_restarts == 2
    assert settings.agent.max_restarts == 2


def test_module_and_program_modes() -> None:
    settings = parse(["-m", "trainguard.demo.ddp_job", "--steps", "3"])
    assert (settings.agent.program.mode, settings.agent.program.target) == (
        "module", "trainguard.demo.ddp_job")
    assert parse(["--no-python", "echo", "hi"]).agent.program.mode == "exec"


def test_environment_fallbacks(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PET_NPROC_PER_NODE", "2")
    monkeypatch.setenv("PET_STANDALONE", "1")
    monkeypatch.setenv("TRAINGUARD_HEARTBEAT_FLOOR", "3.5")
    monkeypatch.setenv("TRAINGUARD_PRELOAD", "json,csv")
    arguments = run_command.parser().parse_args([str(script)])
    assert arguments.standalone is True
    settings = run_command.build_settings(arguments)
    assert settings.agent.nproc_per_node == 2
    assert settings.heartbeat.floor == 3.5
    assert settings.agent.preload == ("json", "csv")


def test_flag_beats_environment(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_HEARTBEAT_FLOOR", "3.5")
    assert parse(["--heartbeat-floor", "4", str(script)]).heartbeat.floor == 4.0


def test_defaults_come_from_the_settings(script: Path) -> None:
    settings = parse([str(script)])
    assert settings.heartbeat == heartbeat.HeartbeatSettings()
    assert settings.agent.nproc_per_node == 1
    assert settings.recovery.max_restarts == 0  # torchrun's default
    assert settings.agent.output.log_dir == settings.agent.run_dir / "logs"


def test_run_id_names_the_run_directory(script: Path, tmp_path: Path) -> None:
    settings = parse(["--run-root", str(tmp_path / "runs"), "--rdzv-id", "job7", str(script)])
    assert settings.agent.run_id == "job7"
    assert settings.agent.run_dir == tmp_path / "runs" / "job7"
    assert parse(["--run-id", "job8", str(script)]).agent.run_id == "job8"
    fresh = parse([str(script)]).agent.run_id
    assert fresh != "none"
    assert fresh != parse([str(script)]).agent.run_id


def test_fault_plan(script: Path) -> None:
    settings = parse(["--nproc-per-node", "4", "--inject", "crash:1:60,hang:2:150", str(script)])
    assert [(str(f.kind), f.rank, f.step) for f in settings.agent.fault_plan] == [
        ("crash", 1, 60), ("hang", 2, 150)]


def test_redirects_per_rank(script: Path) -> None:
    settings = parse(["--nproc-per-node", "2", "-r", "0:1,1:3", "--tee", "2", str(script)])
    assert settings.agent.output.redirects == {0: 1, 1: 3}
    assert settings.agent.output.tee == 2


def test_ignored_torchrun_flags_warn(script: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        parse(["--rdzv-backend", "c10d", str(script)])
    assert "--rdzv-backend has no effect" in caplog.text


@pytest.mark.parametrize(("args", "expected"), [
    (["--no-such-flag", "x.py"], "unrecognized arguments: --no-such-flag"),
    ([], "the following arguments are required: training_script"),
    (["--max-restarts", "many", "x.py"], "argument --max-restarts/--max_restarts: invalid int"),
    (["--heartbeat-floor", "soon", "x.py"], "--heartbeat-floor: 'soon' is not a duration"),
    (["--monitor-interval", "soon", "x.py"],
     "argument --monitor-interval/--monitor_interval: 'soon' is not a duration"),
])
def test_malformed_command_lines(args: list[str], expected: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_command.parser().parse_args(args)
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(("args", "expected"), [
    (["--nnodes", "2"], "--nnodes 2: a job across nodes needs --rdzv-endpoint"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:29400"], "every node of the job must give the "
                                                      "same --rdzv-id"),
    (["--nnodes", "2", "--rdzv-endpoint", "h", "--rdzv-id", "j", "--insecure"],
     "'h' is not HOST:PORT"),
    (["--nnodes", "2", "--standalone"], "--standalone is a single-node job"),
    (["--nnodes", "1:2"], "--nnodes 1:2: a job across nodes needs --rdzv-endpoint"),
    (["--nnodes", "3:2"], "needs 1 <= MIN <= MAX"),
    (["--nnodes", "two"], "--nnodes 'two'"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "--node-rank", "2",
      "--insecure"], "node-rank must be 0..1, got 2"),
    (["--nnodes", "2:3", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "--node-rank", "3",
      "--insecure"], "node-rank must be 0..2, got 3"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", "j"],
     "the controller is reached over TLS: give --tls-ca"),
    (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", "j", "--insecure",
      "--node-name", "../x"], "--node-name '../x' is not valid: a node name is a DNS-1123"),
    (["--node-rank", "1"], "--node-rank"),
    (["-m", "--no-python"], "--module and --no-python cannot be used together"),
    (["--redirects", "5"], "--redirects: '5' is not one of"),
    (["--tee", "0:9"], "--tee: bad entry '0:9'"),
    (["--inject", "boom:1:2"], "--inject: 'boom:1:2' is not KIND:RANK:STEP"),
    (["--inject", "crash:3:2"], "fault plan names rank 3"),
    (["--nproc-per-node", "zero"], "--nproc-per-node: 'zero'"),
    (["--heartbeat-floor", "5", "--heartbeat-cap", "1"], "heartbeat cap (1.0 s) must be >="),
    (["--keep-checkpoints", "0"], "keep-checkpoints must be >= 1"),
    (["--snapshot-grace", "-1"], "snapshot-grace must be >= 0 seconds"),
    (["--signals-to-handle", "SIGNOPE"], "unknown signal 'SIGNOPE'"),
])
def test_bad_values_name_the_flag(args: list[str], expected: str, script: Path) -> None:
    with pytest.raises(run_command.UsageError) as caught:
        parse([*args, str(script)])
    assert expected in str(caught.value)


def test_missing_script_is_refused(tmp_path: Path) -> None:
    with pytest.raises(run_command.UsageError, match=r"training script '.*missing\.py' does not"):
        parse([str(tmp_path / "missing.py")])


def test_bad_environment_value_names_the_variable(script: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_HEARTBEAT_FLOOR", "soon")
    with pytest.raises(run_command.UsageError, match="TRAINGUARD_HEARTBEAT_FLOOR: 'soon'"):
        parse([str(script)])


# Every numeric flag of `trainguard run`, with a value that cannot mean anything: each is a usage
# error that names the flag, never a traceback later on nor a silent default.
@pytest.mark.parametrize(("args", "expected"), [
    (["--max-restarts", "-1"], "max-restarts must be >= 0, got -1"),
    (["--monitor-interval", "0"], "monitor-interval must be > 0 seconds, got 0.0"),
    (["--monitor-interval", "nan"], "monitor-interval must be > 0 seconds, got nan"),
    (["--shutdown-timeout", "-3"], "shutdown-timeout must be > 0 seconds, got -3.0"),
    (["--shutdown-timeout", "0"], "shutdown-timeout must be > 0 seconds, got 0.0"),
    (["--master-port", "-5"], "master-port must be 1..65535, got -5"),
    (["--master-port", "70000"], "master-port must be 1..65535, got 70000"),
    (["--metrics-port", "-1"], "metrics-port must be 0 to 65535, got -1"),
    (["--crash-loop-repeats", "0"], "crash-loop-repeats must be >= 1, got 0"),
    (["--metrics-port", "70000"], "metrics-port must be 0 to 65535, got 70000"),
    (["--node-rank", "-1"], "--node-rank"),
    (["--nproc-per-node", "0"], "--nproc-per-node: '0' is not a positive number"),
    (["--nproc-per-node", "-2"], "--nproc-per-node: '-2' is not a positive number"),
    (["--heartbeat-floor", "0"], "heartbeat floor must be > 0 seconds, got 0.0"),
    (["--heartbeat-cap", "-1"], "heartbeat cap (-1.0 s) must be >="),
    (["--heartbeat-factor", "0.5"], "heartbeat factor must be >= 1, got 0.5"),
    (["--heartbeat-window", "0"], "heartbeat window must be >= 1 interval, got 0"),
    (["--heartbeat-startup-timeout", "0"], "heartbeat-startup-timeout must be > 0 seconds"),
    (["--heartbeat-busy-timeout", "-1"], "heartbeat-busy-timeout must be > 0 seconds"),
    (["--heartbeat-idle-timeout", "0"], "heartbeat-idle-timeout must be > 0 seconds"),
    (["--heartbeat-exit-timeout", "-2"], "heartbeat-exit-timeout must be > 0 seconds"),
    (["--heartbeat-busy-floor", "0"], "heartbeat-busy-floor must be > 0 seconds"),
    (["--heartbeat-stopped-timeout", "-1"], "heartbeat-stopped-timeout must be > 0 seconds"),
    (["--keep-checkpoints", "-1"], "keep-checkpoints must be >= 1, got -1"),
    (["--persist-interval", "-1"], "persist-interval must be >= 0 seconds, got -1.0"),
    (["--persist-bandwidth", "-1"], "persist-bandwidth must be >= 0, got -1"),
    (["--fault-retry-times", "-1"], "fault-retry-times must be >= 0, got -1"),
    (["--crash-loop-window", "-1"], "crash-loop-window must be >= 0 seconds, got -1.0"),
    (["--crash-loop-settle", "-1"], "crash-loop-settle must be >= 0 seconds, got -1.0"),
    (["--snapshot-grace", "nan"], "snapshot-grace must be >= 0 seconds, got nan"),
    (["--recover-timeout", "0"], "recover-timeout must be > 0 seconds, got 0.0"),
    (["--snapshot-memory", "-1"], "snapshot-memory must be >= 0 bytes, got -1"),
    (["--progress-interval", "-1"], "progress-interval must be >= 0 seconds, got -1.0"),
    (["--fault-config-interval", "0"], "fault-config-interval must be > 0 seconds, got 0.0"),
    (["--dp-size", "0"], "dp-size must be >= 1, got 0"),
    (["--dp-size", "-1"], "dp-size must be >= 1, got -1"),
    (["--spare-devices", "-1"], "spare-devices must be >= 0, got -1"),
    (["--leave-timeout", "-1"], "leave-timeout must be > 0 seconds, got -1.0"),
    (["--leave-timeout", "0"], "leave-timeout must be > 0 seconds, got 0.0"),
    (["--bmc-period", "0"], "bmc-period must be > 0 seconds, got 0.0"),
    (["--snapshot-every", "0"], "snapshot-every must be 'auto' or a number of steps >= 1, "
                                "got '0'"),
    (["--snapshot-every", "often"], "snapshot-every must be 'auto' or a number of steps"),
    (["--snapshot-share", "0"], "snapshot-share must be > 0 and < 1, got 0.0"),
    (["--snapshot-share", "1"], "snapshot-share must be > 0 and < 1, got 1.0"),
    (["--snapshot-share", "nan"], "snapshot-share must be > 0 and < 1, got nan"),
    (["--device-failure-interval", "0"], "device-failure-interval must be > 0 seconds"),
])
def test_meaningless_numbers_are_refused(args: list[str], expected: str, script: Path) -> None:
    with pytest.raises(run_command.UsageError) as caught:
        parse([*args, str(script)])
    assert expected in str(caught.value)


def test_every_numeric_flag_is_in_the_sweep() -> None:
    """A numeric flag added later must join the table above."""
    source = Path(__file__).read_text()
    numeric = [action.option_strings[0] for action in run_command.parser()._actions
               if action.option_strings and action.type in (int, float)]
    numeric += [action.option_strings[0] for action in run_command.parser()._actions
                if action.metavar in ("N", "NUMBER", "DURATION")]
    assert {"--max-restarts", "--snapshot-memory", "--leave-timeout"} <= set(numeric)
    missing = [flag for flag in numeric if f'["{flag}", ' not in source]
    assert not missing


def test_shutdown_timeout_defaults_to_the_settings(script: Path) -> None:
    assert parse([str(script)]).agent.shutdown_timeout == 30.0
    assert parse(["--shutdown-timeout", "5", str(script)]).agent.shutdown_timeout == 5.0


def test_directory_as_script_is_refused_as_a_directory(tmp_path: Path) -> None:
    with pytest.raises(run_command.UsageError, match="is a directory; name a file, or use -m"):
        parse([str(tmp_path)])


@pytest.mark.parametrize("flag", ["--run-root", "--log-dir", "--checkpoint-dir"])
def test_a_file_where_a_directory_belongs_is_refused(flag: str, script: Path,
                                                     tmp_path: Path) -> None:
    with pytest.raises(run_command.UsageError, match=f"{flag} '.*train.py' is a file; name a"):
        parse([flag, str(script), str(script)])
    with pytest.raises(run_command.UsageError, match=f"{flag} '.*' is inside '.*train.py', a "):
        parse([flag, str(script / "sub"), str(script)])


def test_fault_config_dir_must_be_a_directory(script: Path, tmp_path: Path) -> None:
    with pytest.raises(run_command.UsageError, match=r"--fault-config-dir '.*' is not a direc"):
        parse(["--fault-config-dir", str(tmp_path / "missing"), str(script)])


@pytest.mark.parametrize("run_id", ["../../x", "/tmp/x", "a/b", ".hidden", "..", "a b",
                                    "x" * 129])
def test_run_ids_that_are_not_one_plain_name_are_refused(run_id: str, script: Path) -> None:
    with pytest.raises(run_command.UsageError,
                       match=r"a job id is 1 to 128 letters, digits, '[.]', '_' or '-', starting"):
        parse(["--run-id", run_id, str(script)])


@pytest.mark.parametrize("run_id", ["job7", "2026-12-01_a.b", "x" * 128])
def test_plain_run_ids_are_kept(run_id: str, script: Path, tmp_path: Path) -> None:
    settings = parse(["--run-root", str(tmp_path), "--run-id", run_id, str(script)])
    assert settings.agent.run_dir == tmp_path / run_id


@pytest.mark.parametrize("args", [["--snapshot-memory", "-1"], ["--run-id", "../../x"]])
def test_usage_errors_exit_2_with_the_flag(args: list[str], script: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_command.main([*args, str(script)])
    assert exited.value.code == 2
    assert args[0].lstrip("-").split("/")[0] in capsys.readouterr().err


@pytest.mark.parametrize(("args", "expected"), [
    (["--heartbeat-flor", "3", "x.py"],
     "unrecognized arguments: --heartbeat-flor (did you mean --heartbeat-floor?)"),
    (["--nproc-per-nod=2", "x.py"],
     "unrecognized arguments: --nproc-per-nod=2 (did you mean --nproc-per-node?)"),
    (["--max_restart", "2", "x.py"], "(did you mean --max_restarts?)"),
])
def test_an_unknown_flag_suggests_the_closest(args: list[str], expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_command.parser().parse_args(args)
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err


def test_an_unknown_flag_far_from_any_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_command.parser().parse_args(["--zzzzzzzz", "x.py"])
    assert capsys.readouterr().err.rstrip().endswith("unrecognized arguments: --zzzzzzzz")


def test_snapshot_every_takes_auto_or_steps_from_flag_environment_or_file(
        script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse([str(script)]).agent.snapshot_interval == 1
    assert parse(["--snapshot-every", "auto", str(script)]).agent.snapshot_interval is None
    config = tmp_path / "trainguard.toml"
    config.write_text('snapshot-every = "auto"\nsnapshot-share = 0.1\n')
    settings = parse(["--config", str(config), str(script)]).agent
    assert (settings.snapshot_interval, settings.snapshot_share) == (None, 0.1)
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_EVERY", "25")
    assert parse(["--config", str(config), str(script)]).agent.snapshot_interval == 25
    assert parse(["--snapshot-every", "4", str(script)]).agent.snapshot_interval == 4


def test_torchruns_multi_node_command_line_joins_a_controller(script: Path) -> None:
    settings = parse(["--nnodes", "2:3", "--nproc-per-node", "2", "--rdzv-endpoint",
                      "ctrl:29400", "--rdzv-id", "job7", "--node-rank", "1", "--rdzv-conf",
                      "join_timeout=5,controller_wait=7", "--insecure", "--node-name",
                      "rack-1.node-7", str(script)])
    cluster = settings.cluster
    assert cluster is not None
    assert (cluster.endpoint, cluster.nnodes, cluster.max_nodes, cluster.node_rank) == (
        "ctrl:29400", 2, 3, 1)
    assert (cluster.node_name, cluster.security.insecure) == ("rack-1.node-7", True)
    assert (cluster.join_timeout, cluster.controller_wait) == (5.0, 7.0)
    assert (settings.agent.nnodes, settings.agent.world_size) == (2, 4)


def test_with_the_c10d_backend_the_controller_assigns_the_node_rank(script: Path) -> None:
    settings = parse(["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "ctrl:1",
                      "--rdzv-id", "j", "--insecure", str(script)])
    assert settings.cluster is not None
    assert settings.cluster.node_rank is None


def test_one_node_has_no_controller(script: Path) -> None:
    assert parse([str(script)]).cluster is None


def test_workers_get_torchs_huge_page_allocator_and_one_thread_unless_told_otherwise() -> None:
    defaults = launcher.base_environment(4, {"PATH": "/bin"})
    assert defaults == {"PATH": "/bin", "OMP_NUM_THREADS": "1", "THP_MEM_ALLOC_ENABLE": "1"}
    assert "OMP_NUM_THREADS" not in launcher.base_environment(1, {})
    told = launcher.base_environment(4, {"OMP_NUM_THREADS": "2", "THP_MEM_ALLOC_ENABLE": "0"})
    assert told == {"OMP_NUM_THREADS": "2", "THP_MEM_ALLOC_ENABLE": "0"}
