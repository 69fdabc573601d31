"""GPUs are counted through NVML's client, an optional extra: without it, ``gpu`` says how to
install it and ``auto`` says it falls back to the CPUs."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

from trainguard.cli import run_command


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return path


@pytest.fixture
def without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it raises ImportError


def parse(args: list[str]) -> int:
    settings = run_command.build_settings(run_command.parser().parse_args(args))
    return settings.agent.nproc_per_node


@pytest.mark.usefixtures("without_nvml")
def test_gpu_without_the_nvidia_extra_says_how_to_install_it(script: Path) -> None:
    with pytest.raises(run_command.UsageError,
                       match=r"--nproc-per-node gpu: counting GPUs needs NVIDIA's NVML client, "
                             r"which is not installed: pip install 'trainguard\[nvidia\]'"):
        parse(["--nproc-per-node", "gpu", str(script)])


@pytest.mark.usefixtures("without_nvml")
def test_auto_without_the_nvidia_extra_warns_and_uses_the_cpus(
        script: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert parse(["--nproc-per-node", "auto", str(script)]) == (os.cpu_count() or 1)
    assert "pip install 'trainguard[nvidia]'; one worker per CPU instead" in caplog.text
