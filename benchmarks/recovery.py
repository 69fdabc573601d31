"""Recovery benchmark: kill -9 (crash) or SIGSTOP (hang) one rank of a 4-rank DDP job.

For each trial a fresh job starts; once a random rank reaches a random step, the benchmark
sends it the signal and measures, from the job's own timeline (jobs/timeline.py):

Tools: ``torchrun``; ``trainguard`` (the job-level restart, every process restarted, state from
memory); ``trainguard-in-place`` (strategy recover-in-place: the job runs under Session.run,
only the killed rank gets a new process); ``trainguard-retry`` (strategy retry: instead of a
signal, the rank gets a simulated device memory error 80E01801 inside its step, and every
process stays). For ``trainguard-retry`` the fault's time is when the error was raised.

- detected: fault -> the launcher noticed (trainguard: its fault-detected event; torchrun: the
  first line its elastic agent logs about the failure);
- recovered: fault -> every rank has begun a step in the new attempt;
- steps lost: completed steps before the fault that the new attempt had to redo;
- init group: the longest ``init_process_group`` of a rank in the new attempt.

With ``--fault hang`` each trial stops the rank at a random moment: a random point after it began
a step (within the step, or the snapshot after it), or inside its snapshot (``moment``
``snapshot``: the job stops itself there, jobs/recovery_job.py ``--stop-in-snapshot``).

torchrun runs with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, without which it does not recover at
all on this machine (FINDINGS.md), checkpointing with torch.save every 25 steps as its users do.

    python -m benchmarks.recovery --trials 5            # crash, trainguard and torchrun
    python -m benchmarks.recovery --fault hang --tools trainguard
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import common, snapshot_overhead
from trainguard import testing

_TORCH_LOG = re.compile(r"^[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d+) .*(failed|exitcode|Sending process)")
RANKS = 4  # the job's ranks, under every tool
DEFAULT_WIDTH = 768  # the model's width: about 0.1 s a step, 21 MB of state per rank


def command(tool: str, workdir: Path, *, job_flags: Sequence[str], max_restarts: int,
            trainguard_flags: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The command line and added environment that run jobs/recovery_job.py on ``RANKS`` under
    ``tool`` (a tool of this module), with its timeline in ``workdir``.

    Args:
        tool: ``torchrun`` or one of the trainguard tools.
        workdir: the job's directory: timeline, run root or logs, torchrun's checkpoint.
        job_flags: the job's own arguments (``--steps``, ``--width``, ...).
        max_restarts: the launcher's ``--max-restarts``.
        trainguard_flags: options given to ``trainguard run`` only.
    """
    job = [str(common.JOBS / "recovery_job.py"), *job_flags]
    env = {"BENCH_TIMELINE_DIR": str(workdir)}
    if tool.startswith("trainguard"):
        in_process = ["--in-process"] if tool != "trainguard" else []
        return [sys.executable, "-m", "trainguard", "run", "--nproc-per-node", str(RANKS),
                "--max-restarts", str(max_restarts), "-r", "3", "--run-root",
                str(workdir / "runs"), "--rdzv-id", "bench", *trainguard_flags, *job,
                *in_process], env
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # --standalone: with the static rendezvous, restarted workers read stale addresses even
    # with the variable above and gloo fails to connect (seen here, 4 of 4 restarts).
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(RANKS), "--max-restarts", str(max_restarts), "-r", "3",
            "--log-dir", str(workdir / "logs"), *job, "--checkpoint",
            str(workdir / "checkpoint.pt")], env


def every_rank_stepping(marks: Sequence[dict[str, Any]], *, after_attempt: int) -> float | None:
    """The monotonic time by which every rank had begun a step in an attempt after
    ``after_attempt``, from timeline marks in time order; None while one has not."""
    firsts: dict[int, float] = {}
    for mark in marks:
        if mark["event"] == "begin" and mark["attempt"] > after_attempt:
            firsts.setdefault(mark["rank"], mark["mono"])
    return max(firsts.values()) if len(firsts) == RANKS else None


def wait_recovered(timeline: common.TimelineReader, *, attempt: int,
                   process: subprocess.Popen[bytes]) -> tuple[float, int, int]:
    """Until every rank steps in an attempt after ``attempt`` (``process``: one that must live
    on meanwhile, the job or a host of it): when, the completed steps that attempt redid, and
    the step it resumed at."""
    back: float = common.wait_until(
        "every rank stepping again",
        lambda: every_rank_stepping(timeline.read(), after_attempt=attempt),
        timeout=600, process=process)
    marks = timeline.read()
    done = [m["step"] for m in marks if m["event"] == "end" and m["attempt"] <= attempt]
    resumed = min(m["step"] for m in marks if m["event"] == "begin" and m["attempt"] > attempt)
    return back, max(0, max(done, default=-1) + 1 - resumed), resumed


def _detected_trainguard(workdir: Path) -> tuple[float, float | None] | None:
    """Monotonic time of trainguard's first fault-detected event, and the seconds it took."""
    found = testing.recorded_events(workdir / "runs" / "bench", "fault-detected")
    if not found:
        return None
    took = found[0].data["detect_seconds"]
    return float(found[0].data["detected_at"]), None if took is None else float(took)


def _detected_torchrun(log: Path, after_wall: float) -> float | None:
    """Wall time of the first line torchrun logged about the failure, after the fault."""
    year = datetime.datetime.now(datetime.UTC).year
    for line in log.read_text(errors="replace").splitlines():
        match = _TORCH_LOG.match(line)
        if match is None:
            continue
        stamp = datetime.datetime.strptime(f"{year}{match[1]} {match[2]}", "%Y%m%d %H:%M:%S.%f")
        wall = stamp.replace(tzinfo=datetime.UTC).timestamp()
        if wall >= after_wall - 0.5:
            return wall
    return None


def trial(tool: str, fault: str, *, steps: int, rng: random.Random, root: Path,
          width: int = DEFAULT_WIDTH) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{tool}-", dir=root))
    victim, at_step = rng.randrange(RANKS), rng.randrange(40, 120)
    moment, delay = "crash", 0.0
    if fault == "hang":  # more draws only here: crash trials keep their positions (DLRover's)
        moment = rng.choice(("step", "snapshot")) if tool.startswith("trainguard") else "step"
        delay = rng.uniform(0.0, 0.1)  # a random point of the step (or the snapshot after it)
    in_snapshot = moment == "snapshot"
    stop = ["--stop-in-snapshot", f"{victim}:{at_step}"] if in_snapshot else []
    launch, env = command(tool, workdir, job_flags=["--steps", str(steps), "--width",
                                                    str(width), *stop],
                          max_restarts=3, trainguard_flags=["--persist-interval", "1000"])
    timeline = common.TimelineReader(workdir)
    with common.ProcessGroup(launch, log=workdir / "launcher.log", env=env) as group:
        event = "stopping" if in_snapshot else "begin"
        mark = common.wait_until(
            f"rank {victim} at step {at_step}",
            lambda: next((m for m in timeline.read() if m["event"] == event
                          and m["rank"] == victim and m["step"] >= at_step), None),
            timeout=300, process=group.process)
        if delay:
            time.sleep(delay)
        fault_mono, fault_wall = time.monotonic(), time.time()
        if in_snapshot:  # the job stopped itself inside its snapshot, right after the mark
            fault_mono, fault_wall = mark["mono"], mark["wall"]
        elif tool == "trainguard-retry":
            testing.inject_fault(workdir / "runs" / "bench", rank=victim,
                                 kind=testing.InjectionKind.MEMORY_ERROR)
        else:
            os.kill(mark["pid"], signal.SIGKILL if fault == "crash" else signal.SIGSTOP)
        attempt = mark["attempt"]
        back, lost, resumed = wait_recovered(timeline, attempt=attempt, process=group.process)
        marks = timeline.read()
        begins = [m["mono"] for m in marks if m["event"] == "begin" and m["attempt"] <= attempt
                  and m["rank"] == 0]
        step_seconds = (begins[-1] - begins[-21]) / 20 if len(begins) > 21 else None
        grouped = [m["seconds"] for m in marks if m["event"] == "grouped"
                   and m["attempt"] > attempt]
        if tool.startswith("trainguard"):
            detected = common.wait_until("the fault event", lambda: _detected_trainguard(workdir),
                                         timeout=60, process=group.process)
            if tool == "trainguard-retry" and detected[1] is not None:
                fault_mono = detected[0] - detected[1]  # when the error was raised in the step
            detect_seconds = detected[0] - fault_mono
        else:
            wall = _detected_torchrun(group.log, fault_wall)
            detect_seconds = wall - fault_wall if wall is not None else None
    return {
        "tool": tool, "fault": fault, "moment": moment, "victim_rank": victim,
        "at_step": mark["step"],
        "detect_seconds": detect_seconds, "recover_seconds": back - fault_mono,
        "steps_lost": lost, "resumed_at": resumed,
        "step_seconds": step_seconds,
        "init_group_seconds": max(grouped, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--fault", choices=("crash", "hang"), default="crash")
    parser.add_argument("--tools", default="trainguard-retry,trainguard-in-place,trainguard,"
                                           "torchrun")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH,
                        help="the width of the model's 3 Linear layers (1448: about 75 MB of "
                             "state per rank); a result at another width than the default is "
                             "written as recovery-<fault>-width-<width>")
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    tools = args.tools.split(",")
    results = common.run_trials(
        tools, trials=args.trials, seed=args.seed,
        trial=lambda tool, rng, root: trial(tool, args.fault, steps=args.steps, rng=rng,
                                            root=root, width=args.width))
    summary = common.medians_by_tool(results, tools, (
        "detect_seconds", "recover_seconds", "steps_lost", "step_seconds", "init_group_seconds"))
    common.add_worst(summary, results, ("detect_seconds",))  # a hang target: every trial
    name = f"recovery-{args.fault}" + (
        f"-width-{args.width}" if args.width != DEFAULT_WIDTH else "")
    common.write_trials(
        name, results, summary,
        f"4-rank DDP MLP (3 x {args.width}x{args.width} Linear, Adam, batch 128; "
        f"{snapshot_overhead.state_bytes(args.width) / 1e6:.1f} MB of state per rank) on CPU "
        "with gloo; trainguard snapshots to memory every step, torchrun "
        "saves with torch.save every 25 steps; trainguard = job-level restart "
        "(exit), trainguard-in-place = recover-in-place, trainguard-retry = step "
        "retry after a simulated device memory error", args.output)


if __name__ == "__main__":
    main()
