"""The GPU check where there is no GPU: it says so and fails, and its CPU path runs every check
that applies (the CUDA-only parts, NCCL and page-locking, need the GPU machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check

_SCRIPT = Path(gpu_check.__file__).with_name("gpu_check.sh")


def test_without_a_gpu_the_script_fails_and_says_why() -> None:
    finished = subprocess.run(["bash", str(_SCRIPT)], capture_output=True, text=True,
                              env={**os.environ, "PYTHON": sys.executable}, timeout=300,
                              check=False)
    assert finished.returncode == 2
    assert "gpu_check: no GPU: torch" in finished.stderr
    assert "pass --device cpu" in finished.stderr
    assert finished.stdout == ""


def test_a_python_without_torch_is_named(tmp_path: Path) -> None:
    bare = tmp_path / "python"
    bare.write_text("#!/bin/sh\nexit 1\n")
    bare.chmod(0o755)
    finished = subprocess.run(["bash", str(_SCRIPT)], capture_output=True, text=True,
                              env={**os.environ, "PYTHON": str(bare)}, timeout=60, check=False)
    assert finished.returncode == 2
    assert f"gpu_check: {bare} cannot import torch" in finished.stderr


@pytest.mark.e2e
def test_the_cpu_path_measures_the_stall_and_recovers_a_kill_and_injected_faults(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "gpu-check.json"
    assert gpu_check.main(["--device", "cpu", "--state-mb", "4", "--repeats", "2",
                           "--steps", "40", "--width", "16", "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == result
    assert result["environment"]["device"] == "cpu"
    assert "nccl_abort" not in result  # CUDA only
    stall = result["snapshot"]
    assert stall["state_bytes"] == 4 * 2**20
    assert stall["restored_bitwise"]
    assert stall["restored_on"] == ["cpu"]
    assert stall["snapshot_seconds"] > 0
    assert stall["slot_page_locked"] is False  # CPU tensors: nothing to register for
    assert stall["raw_copy_seconds"] > 0
    recovery = result["recovery"]
    assert recovery["backend"] == "gloo"
    assert recovery["steps_lost"] == 0
    assert recovery["survivor_kept"]
    assert recovery["resumed_at"] >= 10
    assert recovery["job_exit_code"] == 0
    faults = result["injected_faults"]
    assert faults["backend"] == "gloo"  # NCCL on a GPU
    assert [(f["kind"], f["at_step"]) for f in faults["faults"]] == [("memory-error", 10),
                                                                     ("crash", 20)]
    assert all(f["steps_lost"] == 0 and f["restored_from"] == ["memory"]
               for f in faults["faults"])
    assert [f["process_kept"] for f in faults["faults"]] == [True, False]
    assert faults["ok"]
    assert result["ok"]
