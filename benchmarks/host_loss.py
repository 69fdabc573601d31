"""Host-loss benchmark: a whole host of a job across hosts killed (SIGKILL to its launcher and
every worker), on this machine, with the hosts as separate process trees on loopback.

trainguard: ``trainguard controller`` and three ``trainguard run --nnodes 2:3`` hosts of 2
ranks (two hold the job's 4 ranks, one is a spare); the job trains under ``Session.run`` and
snapshots to memory every step. torchrun: three ``torchrun --nnodes 2:3 --rdzv-backend c10d``
agents of 2 ranks, the same script saving with ``torch.save`` every 25 steps and loading at
start, ``--max-restarts 3``, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. torchrun has no spare hosts:
all three agents hold ranks (6), and after the loss it goes on with the two left (4).

For each trial, once rank 0 reaches a random step, host 1 is killed (never the host serving
torchrun's c10d store: torchrun cannot survive that). With ``--fault rank``, only rank 2 (on
host 1) gets SIGKILL instead: the single-host targets must hold across hosts too. Measured
from the job's own timeline (jobs/timeline.py) and the launchers' records:

- detected: fault -> trainguard's fault-detected event / torchrun's first log line about it;
- recovered: fault -> every rank has begun a step in the next attempt;
- steps lost: completed steps the next attempt redid;
- processes restarted: workers started anew (trainguard: the lost host's 2; torchrun: every
  one).

    python -m benchmarks.host_loss --trials 5
    python -m benchmarks.host_loss --trials 5 --fault rank --tools trainguard
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common, recovery
from trainguard import testing

HOSTS = 3
NPROC = 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _job(workdir: Path, steps: int, tool: str) -> list[str]:
    job = [str(common.JOBS / "recovery_job.py"), "--steps", str(steps)]
    if tool == "trainguard":
        return [*job, "--in-process"]
    return [*job, "--checkpoint", str(workdir / "checkpoint.pt")]


def _hosts(tool: str, workdir: Path, *, steps: int, endpoint: str) -> list[common.ProcessGroup]:
    env = {"BENCH_TIMELINE_DIR": str(workdir), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    groups = []
    for node in range(HOSTS):
        if tool == "trainguard":
            command = [sys.executable, "-m", "trainguard", "run", "--nnodes", f"2:{HOSTS}",
                       "--node-rank", str(node), "--nproc-per-node", str(NPROC),
                       "--max-restarts", "3", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench",
                       "--insecure", "--node-name", f"bench-host-{node}", "--run-root",
                       str(workdir / "runs"), "--persist-interval", "1000",
                       *_job(workdir, steps, tool)]
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", f"2:{HOSTS}",
                       "--nproc-per-node", str(NPROC), "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", endpoint, "--rdzv-id", "bench", "--max-restarts",
                       "3", "--log-dir", str(workdir / f"logs-{node}"),
                       *_job(workdir, steps, tool)]
        groups.append(common.ProcessGroup(command, log=workdir / f"host-{node}.log", env=env))
        if node == 0 and tool == "torchrun":
            time.sleep(2.0)  # host 0 first: it serves the c10d store, and is never the one lost
    return groups


def _detected(tool: str, workdir: Path, log: Path, fault_wall: float) -> float | None:
    """Monotonic seconds from the fault to its detection."""
    if tool == "torchrun":
        wall = recovery._detected_torchrun(log, fault_wall)
        return wall - fault_wall if wall is not None else None
    found = testing.recorded_events(workdir / "controller" / "bench", "fault-detected")
    return float(found[0].data["detected_at"]) if found else None


def trial(tool: str, *, fault: str, steps: int, rng: random.Random, root: Path
          ) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{tool}-", dir=root))
    at_step = rng.randrange(40, 120)
    controller = None
    if tool == "trainguard":
        controller = common.ProcessGroup(
            [sys.executable, "-m", "trainguard", "controller", "--listen", "127.0.0.1:0",
             "--insecure", "--run-root", str(workdir / "controller")],
            log=workdir / "controller.log")
        endpoint = common.wait_until(
            "the controller's port", lambda: next(
                (line.split("listening on ")[1].split(";")[0]
                 for line in controller.log.read_text().splitlines() if "listening on" in line),
                None), timeout=60, process=controller.process)
    else:
        endpoint = f"127.0.0.1:{_free_port()}"
    hosts = _hosts(tool, workdir, steps=steps, endpoint=endpoint)
    timeline = common.TimelineReader(workdir)
    try:
        mark = common.wait_until(
            f"rank 0 at step {at_step}",
            lambda: next((m for m in timeline.read() if m["event"] == "begin"
                          and m["rank"] == 0 and m["step"] >= at_step), None),
            timeout=600, process=hosts[0].process)
        starts_before = sum(1 for m in timeline.read() if m["event"] == "start")
        fault_mono, fault_wall = time.monotonic(), time.time()
        if fault == "host":
            hosts[1].stop()  # the host vanishes: SIGKILL to its launcher and every worker
        else:
            victim = next(m for m in reversed(timeline.read()) if m["rank"] == 2)
            os.kill(victim["pid"], signal.SIGKILL)
        back, lost, resumed = recovery.wait_recovered(timeline, attempt=mark["attempt"],
                                                      process=hosts[0].process)
        restarted = sum(1 for m in timeline.read() if m["event"] == "start") - starts_before
        if tool == "trainguard":
            detected_at = common.wait_until(
                "the fault event", lambda: _detected(tool, workdir, hosts[0].log, fault_wall),
                timeout=60, process=hosts[0].process)
            detect_seconds: float | None = detected_at - fault_mono
        else:
            detect_seconds = _detected(tool, workdir, hosts[0].log, fault_wall)
    finally:
        for group in (*hosts, *([controller] if controller is not None else [])):
            group.stop()
    return {"tool": tool, "fault": fault, "at_step": mark["step"],
            "detect_seconds": detect_seconds,
            "recover_seconds": back - fault_mono,
            "steps_lost": lost, "resumed_at": resumed,
            "processes_restarted": restarted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tools", default="trainguard,torchrun")
    parser.add_argument("--fault", choices=("host", "rank"), default="host")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    tools = args.tools.split(",")
    results = common.run_trials(
        tools, trials=args.trials, seed=args.seed,
        trial=lambda tool, rng, root: trial(tool, fault=args.fault, steps=args.steps, rng=rng,
                                            root=root))
    summary: dict[str, dict[str, float | None]] = common.medians_by_tool(
        results, tools, ("detect_seconds", "recover_seconds", "steps_lost",
                         "processes_restarted"))
    common.add_worst(summary, results, ("detect_seconds", "recover_seconds", "steps_lost"))
    name = "host-loss" if args.fault == "host" else "host-rank-kill"
    common.write_trials(
        name, results, summary,
        "DDP MLP (3 x 768x768 Linear, Adam, batch 128) on CPU with gloo, 2 ranks per "
        "host, about 0.1 s per step; hosts are process trees on loopback; "
        f"{'host 1 killed whole' if args.fault == 'host' else 'rank 2 killed'}. "
        "trainguard: 2 hosts + 1 spare, snapshots to memory every "
        "step, Session.run; torchrun: 3 hosts in the job (c10d, --nnodes 2:3), "
        "torch.save every 25 steps, 6 ranks then 4", args.output)


if __name__ == "__main__":
    main()
