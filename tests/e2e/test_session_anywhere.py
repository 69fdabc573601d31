"""End to end: one Session script under plain python, torchrun and trainguard run, stopped and
run again, resumes at the step of the newest checkpoint with the final state of a run that was
never stopped; each launcher resumes from the checkpoints another wrote (one on-disk format)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.jobs import SCRIPTS, Job, Start
from trainguard import testing

pytestmark = pytest.mark.e2e

SCRIPT = str(SCRIPTS / "anywhere_job.py")
TIMEOUT = 180.0
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
PYTHON = [sys.executable]
NO_AGENT = "no agent (not started by `trainguard run`)"


def launch(launcher: list[str], *script_args: str, cwd: Path, checkpoints: Path
           ) -> tuple[int, str]:
    """Run the script without trainguard; returns (exit code, output)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRAINGUARD_")}
    env.update(TRAINGUARD_CHECKPOINT_EVERY="5", TRAINGUARD_CHECKPOINT_DIR=str(checkpoints))
    process = subprocess.Popen([*launcher, SCRIPT, *script_args], cwd=cwd, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        testing.end_process_tree(process.pid)
        output, _ = process.communicate()
        pytest.fail(f"{launcher} did not end within {TIMEOUT} s:\n{output}")
    return process.returncode, output


def complete_steps(checkpoints: Path) -> list[int]:
    return sorted(int(json.loads(manifest.read_text())["step"])
                  for manifest in checkpoints.glob("step-*/manifest.json"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final parameters of a plain python run that was never stopped."""
    root = tmp_path_factory.mktemp("reference")
    code, output = launch(PYTHON, "--output", str(root / "sha"), cwd=root,
                          checkpoints=root / "checkpoints")
    assert code == 0, output
    return (root / "sha").read_text()


@pytest.mark.parametrize("launcher", [PYTHON, TORCHRUN], ids=["python", "torchrun"])
def test_a_stopped_run_resumes_from_its_newest_checkpoint(
        launcher: list[str], reference: str, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    code, output = launch(launcher, "--crash-after", "17", cwd=tmp_path, checkpoints=checkpoints)
    assert code != 0, output
    assert output.count(NO_AGENT) == 1, output  # once, from rank 0
    assert complete_steps(checkpoints) == [5, 10, 15]  # every 5 steps, the newest 3 kept
    ranks = 2 if launcher is TORCHRUN else 1
    newest = checkpoints / "step-000000015"
    assert sorted(p.name for p in newest.iterdir()) == [
        "manifest.json", *(f"rank-{rank:05d}.tgsnap" for rank in range(ranks))]
    assert not list(checkpoints.glob("*.partial-*"))

    code, output = launch(launcher, "--output", str(tmp_path / "sha"), cwd=tmp_path,
                          checkpoints=checkpoints)
    assert code == 0, output
    for rank in range(ranks):
        assert f"rank {rank} restored step 15 from disk" in output
    assert (tmp_path / "sha").read_text() == reference
    assert complete_steps(checkpoints) == [20, 25, 30]


def test_trainguard_run_resumes_from_what_torchrun_wrote(
        reference: str, tmp_path: Path, run_job: Start) -> None:
    checkpoints = tmp_path / "checkpoints"
    code, output = launch(TORCHRUN, "--crash-after", "12", cwd=tmp_path, checkpoints=checkpoints)
    assert code != 0, output
    job: Job = run_job("--nproc-per-node", "2", "--checkpoint-dir", str(checkpoints), SCRIPT,
                       "--output", str(tmp_path / "sha"))
    assert job.wait() == 0, job.output()
    assert "rank 0 restored step 10 from disk" in job.output()
    assert NO_AGENT not in job.output()
    assert (tmp_path / "sha").read_text() == reference


def test_under_trainguard_run_a_stopped_job_resumes_from_its_newest_checkpoint(
        reference: str, tmp_path: Path, run_job: Start) -> None:
    checkpoints = tmp_path / "checkpoints"
    first = run_job("--nproc-per-node", "2", "--checkpoint-dir", str(checkpoints),
                    "--persist-interval", "0", SCRIPT, "--crash-after", "17", run_id="first")
    assert first.wait() != 0, first.output()
    newest = complete_steps(checkpoints)[-1]
    assert 1 <= newest <= 17
    second = run_job("--nproc-per-node", "2", "--checkpoint-dir", str(checkpoints), SCRIPT,
                     "--output", str(tmp_path / "sha"), run_id="second")
    assert second.wait() == 0, second.output()
    assert f"rank 1 restored step {newest} from disk" in second.output()
    assert (tmp_path / "sha").read_text() == reference


def test_plain_python_resumes_from_what_trainguard_run_wrote(
        reference: str, tmp_path: Path, run_job: Start) -> None:
    checkpoints = tmp_path / "checkpoints"
    job = run_job("--nproc-per-node", "1", "--checkpoint-dir", str(checkpoints),
                  "--persist-interval", "0", SCRIPT, "--crash-after", "8")
    assert job.wait() != 0, job.output()
    newest = complete_steps(checkpoints)[-1]
    code, output = launch(PYTHON, "--output", str(tmp_path / "sha"), cwd=tmp_path,
                          checkpoints=checkpoints)
    assert code == 0, output
    assert f"rank 0 restored step {newest} from disk" in output
    assert (tmp_path / "sha").read_text() == reference
