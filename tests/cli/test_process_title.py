"""Workers carry a process title that ps and pgrep find: ``trainguard: rank 1 train.py``."""

from __future__ import annotations

from pathlib import Path

from tests.agent.test_agent_standby import Harness, base_env, run_with_standby, worker_env
from trainguard.agent import standby
from trainguard.agent.standby_client import WorkerLaunch


def test_a_forked_worker_is_titled_with_its_rank_and_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(open('/proc/self/cmdline').read().rstrip('\\0'))\n"
                      "print(open('/proc/self/comm').read().strip())\n")
    launch = WorkerLaunch(mode="path", target=str(script), args=(),
                          env=worker_env(RANK="1"), cwd=str(tmp_path))

    async def use(harness: Harness) -> bytes:
        pid, stdout, _ = await harness.spawn(launch)
        assert await harness.exits.wait(pid) == 0
        return await stdout.all()

    cmdline, comm = run_with_standby(base_env(), use).decode().splitlines()
    assert cmdline == "trainguard: rank 1 train.py"
    assert comm.startswith("trainguard")  # what plain `pgrep trainguard` matches


def test_a_module_worker_is_titled_with_its_module() -> None:
    request = standby.SpawnRequest(id=1, mode="module", target="pkg.train", args=[],
                                   env={"RANK": "3"}, cwd="/")
    assert standby.worker_title(request) == "trainguard: rank 3 pkg.train"
