"""Recovery benchmark for DLRover: kill -9 one rank of a 4-rank DDP job under dlrover-run.

The same measurement as benchmarks/recovery.py, on DLRover 0.6.1: dlrover-run --standalone
(its own local master) with 4 ranks of jobs/dlrover_job.py, which trains what
jobs/recovery_job.py trains and saves with DLRover's flash checkpoint, to shared memory after
every step and to disk every 25 steps. For each trial a fresh job starts; once a random rank
reaches a random step in 40..119 the benchmark SIGKILLs it and measures, from the job's own
timeline (jobs/timeline.py, time.monotonic on this host):

- recovered: fault -> every rank has begun a step in a process started after the fault;
- steps lost: completed steps before the fault that the new processes had to redo.

detect_seconds is left null: DLRover records no detection event with a monotonic time, only
its agent's "The worker fails" log line, stamped to the millisecond on the wall clock.

DLRover needs an environment of its own (its pins are not trainguard's). Set it up once:

    python3.11 -m venv /tmp/dlrover-venv
    /tmp/dlrover-venv/bin/pip install torch==2.13.0
    /tmp/dlrover-venv/bin/pip install torch==2.13.0 "dlrover[k8s,torch]==0.6.1"

(torch 2.13.0 as the CPU build; where pip does not find that one, add
``--index-url https://download.pytorch.org/whl/cpu`` to the first install.) dlrover-run itself
does not start on torch 2.13; jobs/dlrover_launch.py says why and starts it anyway.

    python -m benchmarks.dlrover_recovery --python /tmp/dlrover-venv/bin/python --trials 5

Every process a trial starts is killed at its end, also on failure or SIGTERM: the launcher's
process group, the workers and the local master (sessions of their own, tracked while the
trial runs), DLRover's shared memory (/dev/shm) and sockets (/tmp/ckpt_sock), and the empty
/tmp/dlrover its agent makes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks import common

SOCKETS = Path("/tmp/ckpt_sock")  # DLRover 0.6.1's sockets, a path it does not let one change
AGENT_DIR = Path("/tmp/dlrover")  # made by its agent for a parallelism config, also fixed
SHARED_MEMORY = Path("/dev/shm")


class Leftovers:
    """What one dlrover-run job leaves behind once its launcher is killed.

    dlrover-run puts its local master and its workers in sessions of their own, so killing the
    launcher's process group misses them, and once the launcher is gone they are no longer its
    children; so the launcher's descendants are noted while the trial runs (at most once a
    second, not to take CPU from the job) and killed at the end. The shared memory and the
    sockets are named after the job, which the benchmark names (ELASTIC_JOB_NAME); the two
    fixed directories are removed when the trial made them and they are empty.
    """

    def __init__(self, launcher: int, job_name: str) -> None:
        self._launcher = launcher
        self._job_name = job_name
        self._processes: dict[int, psutil.Process] = {}
        self._noted = 0.0
        self._made = [path for path in (SOCKETS, AGENT_DIR) if not path.exists()]

    def note(self, *, now: bool = False) -> None:
        if not now and time.monotonic() - self._noted < 1.0:
            return
        self._noted = time.monotonic()
        with contextlib.suppress(psutil.Error):
            for process in psutil.Process(self._launcher).children(recursive=True):
                self._processes.setdefault(process.pid, process)

    def clean(self) -> None:
        processes = list(self._processes.values())
        for process in processes:
            with contextlib.suppress(psutil.Error):  # also refuses a pid reused since
                process.kill()
        psutil.wait_procs(processes, timeout=10)
        for segment in SHARED_MEMORY.glob(f"{self._job_name}_*"):
            segment.unlink(missing_ok=True)
        shutil.rmtree(SOCKETS / self._job_name, ignore_errors=True)
        for path in self._made:
            with contextlib.suppress(OSError):
                path.rmdir()  # only if empty: another job may be using it


def _command(python: str, workdir: Path, steps: int) -> list[str]:
    return [python, str(common.JOBS / "dlrover_launch.py"), "--standalone",
            "--nproc_per_node=4", "--max_restarts=3", "--log_dir", str(workdir / "logs"),
            str(common.JOBS / "dlrover_job.py"), "--steps", str(steps),
            "--checkpoint-every", "25", "--checkpoint-dir", str(workdir / "checkpoints")]


def trial(python: str, *, number: int, steps: int, rng: random.Random,
          root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="dlrover-", dir=root))
    victim, at_step = rng.randrange(4), rng.randrange(40, 120)
    job_name = f"trainguard_bench_{os.getpid()}_{number}"
    env = {"BENCH_TIMELINE_DIR": str(workdir), "ELASTIC_JOB_NAME": job_name,
           "DLROVER_EVENT_FILE_DIR": str(workdir / "events"), "PYTHONUNBUFFERED": "1"}
    timeline = common.TimelineReader(workdir)
    group = common.ProcessGroup(_command(python, workdir, steps), log=workdir / "launcher.log",
                                env=env)
    leftovers = Leftovers(group.process.pid, job_name)
    try:
        def victim_at_step() -> dict[str, Any] | None:
            leftovers.note()
            return next((m for m in timeline.read() if m["event"] == "begin"
                         and m["rank"] == victim and m["step"] >= at_step), None)

        mark = common.wait_until(f"rank {victim} at step {at_step}", victim_at_step,
                                 timeout=300, process=group.process)
        fault_mono = time.monotonic()
        os.kill(mark["pid"], signal.SIGKILL)
        # The processes of the failed attempt: every worker has marked its start long before.
        before = {m["pid"] for m in timeline.read()}

        def recovered() -> float | None:
            leftovers.note()
            firsts: dict[int, float] = {}
            for item in timeline.read():
                if item["event"] == "begin" and item["pid"] not in before:
                    firsts.setdefault(item["rank"], item["mono"])
            return max(firsts.values()) if len(firsts) == 4 else None

        back = common.wait_until("every rank stepping again", recovered, timeout=600,
                                 process=group.process)
        marks = timeline.read()
        done = [m["step"] for m in marks if m["event"] == "end" and m["pid"] in before]
        resumed = min(m["step"] for m in marks
                      if m["event"] == "begin" and m["pid"] not in before)
    except BaseException:
        print(f"trial {number} failed; the launcher's log ends:\n"
              + "\n".join(group.log.read_text(errors="replace").splitlines()[-30:]), flush=True)
        raise
    finally:
        leftovers.note(now=True)
        group.stop()
        leftovers.clean()
    return {
        "tool": "dlrover", "fault": "crash", "victim_rank": victim, "at_step": mark["step"],
        "detect_seconds": None, "recover_seconds": back - fault_mono,
        "steps_lost": max(0, max(done, default=-1) + 1 - resumed), "resumed_at": resumed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="/tmp/dlrover-venv/bin/python",
                        help="the Python of the DLRover environment (see above)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-") as root:
        for number in range(args.trials):
            result = trial(args.python, number=number, steps=args.steps, rng=rng,
                           root=Path(root))
            results.append(result)
            print(json.dumps({"trial": number, **result}), flush=True)
    summary = {"dlrover": {key: common.median(r[key] for r in results)
                           for key in ("detect_seconds", "recover_seconds", "steps_lost")}}
    common.write_trials(
        "recovery-dlrover", results, summary,
        "4-rank DDP MLP (3 x 768x768 Linear, Adam, batch 128) on CPU with gloo, "
        "about 0.1 s per step, under dlrover-run --standalone (DLRover 0.6.1, "
        "torch 2.13.0); DLRover's flash checkpoint saves to shared memory every "
        "step and to disk every 25 steps", args.output)


if __name__ == "__main__":
    main()
