"""The golden test: ``trainguard run`` parses torchrun's flags exactly as torchrun 2.13 does."""

from __future__ import annotations

import argparse

import pytest

from trainguard.cli import run_command, torchrun_flags

torch_run = pytest.importorskip("torch.distributed.run")


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions
            if action.option_strings and action.dest != "help"}


def test_every_torchrun_flag_is_accepted_with_its_spellings() -> None:
    ours = _options(run_command.parser())
    for dest, action in _options(torch_run.get_args_parser()).items():
        assert dest in ours, f"torchrun flag {action.option_strings} is missing"
        assert set(action.option_strings) <= set(ours[dest].option_strings), dest


def test_no_torchrun_lookalike_that_torchrun_lacks() -> None:
    theirs = _options(torch_run.get_args_parser())
    for flag in torchrun_flags.FLAGS:
        assert flag.dest in theirs, f"{flag.names} is not a torchrun flag"
        extra = set(flag.names) - set(theirs[flag.dest].option_strings)
        assert extra <= {"--run-id"}, extra


def test_flags_take_values_as_torchrun_does() -> None:
    theirs = _options(torch_run.get_args_parser())
    ours = _options(run_command.parser())
    for dest, action in theirs.items():
        assert (action.nargs == 0) == (ours[dest].nargs == 0), dest


def test_same_parse_for_a_typical_launch_line() -> None:
    line = ["--nproc_per_node", "4", "--max-restarts", "3", "--rdzv-id", "j1", "--standalone",
            "--redirects", "3", "--tee", "1", "--master-port", "29501", "train.py", "--lr", "1"]
    theirs = vars(torch_run.get_args_parser().parse_args(line))
    ours = vars(run_command.parser().parse_args(line))
    for dest in ("nproc_per_node", "max_restarts", "rdzv_id", "standalone", "redirects", "tee",
                 "master_port", "training_script", "training_script_args", "nnodes",
                 "monitor_interval", "master_addr", "role", "module", "no_python"):
        assert ours[dest] == theirs[dest], dest


def test_defaults_match_torchrun() -> None:
    theirs = _options(torch_run.get_args_parser())
    for flag in torchrun_flags.FLAGS:
        assert flag.default == theirs[flag.dest].default, flag.names[0]
        assert flag.env == f"PET_{flag.dest.upper()}"
