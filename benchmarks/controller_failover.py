"""Controller-failover benchmark: a recovery whose controller is killed in the middle of it,
against the same recovery with no controller lost.

Two ``trainguard controller`` share a store (a SQLite file): one leads, one stands by. Three
``trainguard run --nnodes 2:3`` hosts of 2 ranks (two hold the job's 4 ranks, one is a spare)
name both in ``--rdzv-endpoint``; the job trains under ``Session.run`` and snapshots to memory
every step (host_loss.py's job). Once rank 0 reaches a random step, rank 2 (on host 1) gets
SIGKILL. ``no-loss``: nothing else. ``leader-killed``: the leading controller gets SIGKILL as
soon as it has printed its decision, so the standby must finish the recovery. Measured from
the job's timeline (jobs/timeline.py):

- recovered: rank 2 killed -> every rank has begun a step in a later attempt;
- steps lost: completed steps the next attempt redid;
- takeover: the leader killed -> the standby listens (leader-killed only).

    python -m benchmarks.controller_failover --trials 5
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common, host_loss, recovery
from trainguard.testing.etcd_cluster import free_ports

VARIANTS = ("no-loss", "leader-killed")


def _controller(workdir: Path, name: str, port: int) -> common.ProcessGroup:
    return common.ProcessGroup(
        [sys.executable, "-m", "trainguard", "controller", "--listen", f"127.0.0.1:{port}",
         "--run-root", str(workdir / name), "--store", f"sqlite://{workdir}/store.db",
         "--leader-ttl", "2", "--insecure"], log=workdir / f"{name}.log")


def _says(group: common.ProcessGroup, text: str) -> bool:
    return text in group.log.read_text(errors="replace")


def trial(variant: str, *, steps: int, rng: random.Random, root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    at_step = rng.randrange(40, 120)
    ports = free_ports(2)
    leader = _controller(workdir, "controller-a", ports[0])
    common.wait_until("the leader", lambda: _says(leader, "listening on"), timeout=60,
                      process=leader.process)
    standby = _controller(workdir, "controller-b", ports[1])
    common.wait_until("the standby", lambda: _says(standby, "standing by"), timeout=60,
                      process=standby.process)
    hosts = host_loss._hosts("trainguard", workdir, steps=steps,
                             endpoint=f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}")
    timeline = common.TimelineReader(workdir)
    takeover = None
    try:
        mark = common.wait_until(
            f"rank 0 at step {at_step}",
            lambda: next((m for m in timeline.read() if m["event"] == "begin"
                          and m["rank"] == 0 and m["step"] >= at_step), None),
            timeout=600, process=hosts[0].process)
        victim = next(m for m in reversed(timeline.read()) if m["rank"] == 2)
        fault_mono = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        if variant == "leader-killed":
            common.wait_until("the leader's decision", lambda: _says(leader, "decision:"),
                              timeout=60, process=leader.process)
            leader.stop()
            killed = time.monotonic()
            common.wait_until("the standby to lead", lambda: _says(standby, "listening on"),
                              timeout=60, process=standby.process, poll=0.02)
            takeover = time.monotonic() - killed
        back, lost, resumed = recovery.wait_recovered(timeline, attempt=mark["attempt"],
                                                      process=hosts[0].process)
        how = ("taken over" if _says(standby, "took over generation")
               else "restarted" if _says(standby, "restarted generation") else "")
    finally:
        for group in (*hosts, leader, standby):
            group.stop()
    return {"tool": variant, "at_step": mark["step"], "recover_seconds": back - fault_mono,
            "steps_lost": lost, "resumed_at": resumed,
            "takeover_seconds": takeover, "successor": how}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    results = common.run_trials(
        VARIANTS, trials=args.trials, seed=args.seed,
        trial=lambda variant, rng, root: trial(variant, steps=args.steps, rng=rng, root=root))
    summary = common.medians_by_tool(results, VARIANTS,
                                     ("recover_seconds", "steps_lost", "takeover_seconds"))
    common.add_worst(summary, results, ("recover_seconds", "steps_lost", "takeover_seconds"))
    common.write_trials(
        "controller-failover", results, summary,
        "host_loss.py's DDP MLP on CPU with gloo, 2 ranks per host, 2 hosts + 1 spare on "
        "loopback, two controllers sharing a SQLite store (--leader-ttl 2); rank 2 killed; "
        "leader-killed: the leading controller killed once it has decided", args.output)


if __name__ == "__main__":
    main()
