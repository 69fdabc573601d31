"""Goodput under faults: useful steps per second with a kill -9 every minute, beside torchrun.

The job is the recovery benchmark's (jobs/recovery_job.py: a 4-rank DDP MLP on CPU with gloo,
3 x 1448x1448 Linear + Adam, batch 128, about 75 MB of state per rank), run for ``--minutes``
under each tool in turn, launched as benchmarks/recovery.py launches it:

- ``trainguard``: ``trainguard run`` with its defaults (a snapshot in memory after every step,
  persisted to disk every 30 s); a killed rank restarts the whole job (job-level restart), which
  resumes from the newest snapshot;
- ``torchrun``: ``torch.distributed.run --standalone``, the job saving with ``torch.save`` every
  25 steps and loading that file when it starts.

Every ``--kill-every`` seconds after the job's start (none at its end) the benchmark SIGKILLs one
rank drawn with ``--seed``: the same times and ranks for both tools. A kill waits until its rank
is stepping in an attempt after the previous kill's (a recovery longer than the interval delays
it); a kill that cannot happen before the next one is due is left out, and counted. Both
launchers get enough restarts for every kill. When the time is up the job is stopped (SIGTERM to
its group, then SIGKILL), and from the job's timeline up to that moment:

- useful steps: the steps every rank had completed in the newest attempt (a rank yet to complete
  one there counts where the attempt resumed): the progress the job kept;
- useful steps per second: useful steps over the seconds from the job's start to the end,
  start-up and every recovery included;
- steps executed: each attempt's steps that some rank completed, redone ones included; steps
  redone: those completed before a kill that the next attempt began again;
- recovery: seconds from each kill to every rank beginning a step in a later attempt;
- the ratio of trainguard's useful steps per second to torchrun's (target: above 1).

Prints one JSON object; ``--output`` also writes it (default when given without a path:
benchmarks/results/kill-goodput.json).

    python -m benchmarks.kill_goodput --output       # 10 minutes per tool, about 21 in all
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import common, recovery, snapshot_overhead

__all__ = ["JOB", "TARGET", "TOOLS", "Kill", "PlannedKill", "goodput", "kill_plan", "main",
           "parser", "report"]

NAME = "kill-goodput"
TOOLS = ("trainguard", "torchrun")
TARGET = 1.0  # trainguard's useful steps per second must be above this share of torchrun's
JOB = next(size for size in snapshot_overhead.SIZES if size.name == "75MB")
STEPS = 10**9  # the job never ends by itself: it is stopped when the time is up
STOP_GRACE = 10.0  # seconds the job gets to stop after SIGTERM before it is killed


@dataclasses.dataclass(frozen=True)
class PlannedKill:
    at: float  # seconds after the job's start
    victim: int  # the rank


@dataclasses.dataclass(frozen=True)
class Kill:
    at: float  # monotonic time, right after the signal
    victim: int  # the rank
    attempt: int  # the attempt its process belonged to


def kill_plan(*, seconds: float, every: float, ranks: int, seed: int) -> list[PlannedKill]:
    """A kill every ``every`` seconds of a run of ``seconds``, none at its end, each of a rank
    drawn from ``seed``: the same plan for every tool."""
    rng = random.Random(seed)
    return [PlannedKill(every * number, rng.randrange(ranks))
            for number in range(1, math.ceil(seconds / every))]


def _attempts(marks: Sequence[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Each attempt that restored its state, oldest first: the step it resumed at, and the step
    after the last one some rank completed in it (where it resumed, if none)."""
    starts: dict[int, int] = {}
    for mark in marks:
        if mark["event"] == "restored":
            starts[mark["attempt"]] = min(mark["step"], starts.get(mark["attempt"], mark["step"]))
    reached = dict(starts)
    for mark in marks:
        if mark["event"] == "end" and mark["attempt"] in reached:
            reached[mark["attempt"]] = max(reached[mark["attempt"]], mark["step"] + 1)
    return {attempt: (starts[attempt], reached[attempt]) for attempt in sorted(starts)}


def _median_step_seconds(marks: Sequence[dict[str, Any]]) -> float | None:
    """Rank 0's median interval from one step's begin to the next's in the same attempt
    (the snapshot or checkpoint between them included)."""
    begins = [mark for mark in marks if mark["event"] == "begin" and mark["rank"] == 0]
    return common.median(later["mono"] - earlier["mono"]
                         for earlier, later in itertools.pairwise(begins)
                         if later["attempt"] == earlier["attempt"]
                         and later["step"] == earlier["step"] + 1)


def goodput(marks: Sequence[dict[str, Any]], kills: Sequence[Kill], *, began: float,
            ended: float, ranks: int) -> dict[str, Any]:
    """The figures of one tool's run from its timeline marks (time order, up to ``ended``).

    Args:
        marks: the job's timeline marks (jobs/timeline.py), in time order.
        kills: the kills done, in time order.
        began: the monotonic time the job was started.
        ended: the monotonic time the run ended; no mark is later.
        ranks: the job's ranks.
    """
    attempts = _attempts(marks)
    useful, recovering = 0, bool(kills)
    if attempts:
        newest = max(attempts)
        completed = dict.fromkeys(range(ranks), attempts[newest][0])
        for mark in marks:
            if mark["event"] == "end" and mark["attempt"] == newest:
                completed[mark["rank"]] = max(completed[mark["rank"]], mark["step"] + 1)
        # a kill of the newest attempt not yet recovered from: what the job keeps is unknown,
        # at least where that attempt resumed
        recovering = bool(kills) and kills[-1].attempt >= newest
        useful = attempts[newest][0] if recovering else min(completed.values())
    order = list(attempts)
    redone = {earlier: max(0, attempts[earlier][1] - attempts[later][0])
              for earlier, later in itertools.pairwise(order)}
    done = []
    for kill in kills:
        back = recovery.every_rank_stepping(marks, after_attempt=kill.attempt)
        done.append({"at_seconds": kill.at - began, "victim_rank": kill.victim,
                     "attempt": kill.attempt,
                     "recover_seconds": None if back is None else back - kill.at,
                     "steps_redone": redone.get(kill.attempt)})
    seconds = ended - began
    return {
        "useful_steps": useful, "seconds": seconds, "useful_steps_per_second": useful / seconds,
        "recovering_at_end": recovering, "kills": len(kills),
        "steps_executed": sum(reached - start for start, reached in attempts.values()),
        "steps_redone": sum(redone.values()),
        "median_recover_seconds": common.median(kill["recover_seconds"] for kill in done),
        "median_step_seconds": _median_step_seconds(marks), "kills_done": done,
    }


def _wait_for_time(what: str, when: float, group: common.ProcessGroup) -> None:
    """Until the monotonic time ``when``, or an error if the job exits before."""
    common.wait_until(what, lambda: time.monotonic() >= when,
                      timeout=when - time.monotonic() + 1, process=group.process, poll=0.2)


def _stepping(timeline: common.TimelineReader, victim: int, *, after_attempt: int,
              until: float, group: common.ProcessGroup) -> dict[str, Any] | None:
    """The victim's newest begin mark in an attempt after ``after_attempt``, once there is one;
    None if there is none by ``until``."""
    try:
        mark: dict[str, Any] = common.wait_until(
            f"rank {victim} stepping",
            lambda: next((mark for mark in reversed(timeline.read()) if mark["event"] == "begin"
                          and mark["rank"] == victim and mark["attempt"] > after_attempt),
                         None),
            timeout=until - time.monotonic(), process=group.process, poll=0.05)
    except TimeoutError:
        return None
    return mark


def _run(tool: str, plan: Sequence[PlannedKill], args: argparse.Namespace,
         root: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"{tool}-", dir=root))
    launch, env = recovery.command(
        tool, workdir, max_restarts=len(plan) + 2,
        job_flags=["--steps", str(STEPS), "--width", str(args.width), "--batch", str(JOB.batch)])
    timeline = common.TimelineReader(workdir)
    seconds = args.minutes * 60
    kills: list[Kill] = []
    began = time.monotonic()
    group = common.ProcessGroup(launch, log=workdir / "launcher.log", env=env)
    try:
        for number, planned in enumerate(plan):
            _wait_for_time(f"the kill at {planned.at:g} s", began + planned.at, group)
            due = plan[number + 1].at if number + 1 < len(plan) else seconds
            mark = _stepping(timeline, planned.victim, until=began + due, group=group,
                             after_attempt=kills[-1].attempt if kills else -1)
            if mark is None:
                continue
            try:
                os.kill(mark["pid"], signal.SIGKILL)
            except ProcessLookupError:  # it was ending already: not this benchmark's kill
                continue
            kills.append(Kill(time.monotonic(), planned.victim, mark["attempt"]))
        ended = began + seconds
        _wait_for_time("the end", ended, group)
        marks = [mark for mark in timeline.read() if mark["mono"] <= ended]
    except RuntimeError as error:
        log = group.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{tool}: {error}; its log ends:\n{log}") from error
    finally:
        group.stop(grace=STOP_GRACE)
    return goodput(marks, kills, began=began, ended=ended, ranks=recovery.RANKS)


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    plan = kill_plan(seconds=args.minutes * 60, every=args.kill_every, ranks=recovery.RANKS,
                     seed=args.seed)
    tools = {}
    with tempfile.TemporaryDirectory(prefix="trainguard-kill-goodput-") as root:
        for tool in TOOLS:
            tools[tool] = result = _run(tool, plan, args, Path(root))
            print(f"[{NAME}] {tool}: {result['useful_steps_per_second']:.2f} useful steps/s, "
                  f"{result['kills']} kills", file=sys.stderr, flush=True)
    result = report(args, arguments=argv, plan=plan, tools=tools)
    shown = "-" if result["ratio"] is None else f"{result['ratio']:.3f}x"
    print(f"[{NAME}] trainguard / torchrun: {shown} (target: above {TARGET:g}x: "
          f"{'met' if result['met'] else 'not met'})", file=sys.stderr, flush=True)
    return result


def report(args: argparse.Namespace, *, arguments: Sequence[str], plan: Sequence[PlannedKill],
           tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's JSON object, from each tool's figures (:func:`goodput`)."""
    theirs = tools["torchrun"]["useful_steps_per_second"]
    ratio = tools["trainguard"]["useful_steps_per_second"] / theirs if theirs else None
    nbytes = snapshot_overhead.state_bytes(args.width)
    return {
        **common.header(NAME, arguments),
        "setup": f"{recovery.RANKS}-rank DDP MLP (3 x {args.width}x{args.width} Linear, Adam, "
                 f"batch {JOB.batch}; {nbytes / 1e6:.1f} MB of state per rank) on CPU with "
                 f"gloo, {args.minutes:g} min under each tool, one after the other; a kill -9 "
                 f"of a random rank every {args.kill_every:g} s (seed {args.seed}), the same "
                 "for both; trainguard: `trainguard run` defaults (a memory snapshot after "
                 "every step), job-level restart; torchrun: torch.save every 25 steps; useful "
                 "steps: the steps every rank had completed by the end, over the seconds from "
                 "the job's start",
        "minutes": args.minutes, "kill_every_seconds": args.kill_every, "seed": args.seed,
        "width": args.width, "state_bytes_per_rank": nbytes,
        "kill_plan": [dataclasses.asdict(kill) for kill in plan],
        "tools": tools, "ratio": ratio, "target": TARGET,
        "met": None if ratio is None else ratio > TARGET,
    }


def _above_zero(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a finite number above 0, else a usage error naming the flag."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="python -m benchmarks.kill_goodput",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--minutes", type=_above_zero(float), default=10.0,
                        help="how long each tool runs the job (default 10)")
    result.add_argument("--kill-every", type=_above_zero(float), default=60.0,
                        help="seconds between kills (default 60)")
    result.add_argument("--seed", type=int, default=1, help="draws the killed ranks")
    result.add_argument("--width", type=_above_zero(int), default=JOB.width,
                        help=f"the model's width (default {JOB.width}: about 75 MB of state "
                             "per rank)")
    common.add_output_argument(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(arguments)
    common.exit_cleanly_on_sigterm()
    common.publish(NAME, run(args, arguments), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
