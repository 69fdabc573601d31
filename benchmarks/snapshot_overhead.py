"""Step-time cost of a memory snapshot every step, against the same job without snapshots.

The job is jobs/overhead_job.py under ``trainguard run`` with ``Session.step`` around each step
(``--mode session``), at two sizes: the demo's model (3 x 256x256 Linear, batch 64) and about
75 MB of state per rank (3 x 1448x1448 Linear + Adam, batch 128). Each size runs without
snapshots, with ``Session.checkpoint`` after every step writing every rank's whole state
(``TRAINGUARD_SNAPSHOT_SHARES=0``), and the same with shares (the default: each replica writes
its 1/dp share of the replicated state, once); each of those two
as trainguard does by default (the optimizer's tensors,
from 16 MiB on, copied while the next step computes: train/copy_behind.py) and copied at once
(``TRAINGUARD_SNAPSHOT_COPY_BEHIND=0``); ``--rounds`` times interleaved, so that a machine that
slows down over time slows each alike.

Measured: the median step time over every rank's steps after the first ``--warmup`` share, and
each snapshot variant's overhead against the job without (target: at most 5%); and the median
CPU time of a ``Session.checkpoint`` on the training thread (what the job times with
``time.thread_time``; a copy behind, on its own thread, is not in it). Beside it, the
floor: one replica's state copied once per step at this machine's memory bandwidth (measured
here on one thread, into memory reserved beforehand, as the snapshot does; the fastest of 11),
as a share of the step without snapshots; every rank of a data-parallel group copying its
whole state costs ``ranks`` times that. And the noise: the job without snapshots run a second
time in each round, against the first (an overhead within it is not resolved here); and each
round's overheads against that round's run without snapshots, since two runs of one job differ
more than the steps within a run do (how 4 ranks share 2 cores settles differently each time).
Then the paired estimate, which that difference between runs does not reach: one more job
per round with a snapshot every ``--paired-every``-th step (shares, as by default), in which
each snapshot's two steps (the one it is taken in, and the next, which a copy behind or a
cache it left cold slows) are set against the two steps after them, in the same run on the
same rank: the median of those differences is what one snapshot costs, and against a step
away from snapshots it is the overhead a snapshot every step would have. And the blocks
estimate, which sets the same job with and without snapshots in one run: one more job per
round that snapshots after every step of every second run of ``--block-steps`` steps; the
median step of those runs against the median step of the runs between them (the first step of
each run left out: it carries the switch, a snapshot's copy still behind or none yet), each
round on its own; and each run with snapshots against the mean of the two runs on either side
of it, whose mean over every round and its 95% interval (bootstrap) decide: met when the
interval lies at or under the target, not met when it lies above, else not resolved. It
answers the question of the target (a snapshot every step against none)
without the difference between runs (two identical runs' medians differed by -10.0% and
+11.7% in two rounds of one recording here, more than the target) and without the order in
which a round's runs go (which is turned by one at each round). What it leaves out is what
a run with snapshots pays in its steps without any (the persister, the agent's loop), measured
only across runs. Beside it, the same estimate for a job whose steps in those runs only build
the tree a snapshot starts from (each state's ``state_dict()`` and the random generators'
states, :func:`trainguard.train.state_backend.saved_tree`) and drop it: the floor under any
snapshot made of state dicts, however it is copied, which at the demo's step is not the copy's
bytes. And the same estimate for a job whose snapshots in those runs hold no state
(``Session.checkpoint`` of an empty state: the step and the random states alone, the parts a
snapshot keeps per rank in any scheme): what every snapshot pays whatever the model's size,
the floor under a design in which not every rank writes the replicated state every step.
And the same estimate with a snapshot after every N-th step of those runs only
(``--blocks-every``, default 2: what ``--snapshot-every auto`` takes on the demo's job here), N
steps in a row taken as one, each group holding one snapshot: whether snapshotting less often
brings the cost within the target (a snapshot taken more rarely runs colder). Prints one JSON
object; ``--output`` also writes it (default when given without a path:
benchmarks/results/snapshot-overhead.json).

    python -m benchmarks.snapshot_overhead --output  # 4 ranks, 200 steps (the demo: 2000)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks import common, overhead

__all__ = ["BASELINE", "BLOCK_MIN_STEPS", "CONTROL", "PAIRED_MIN_EVERY", "PER_RANK",
           "SIZES", "STATE_DICTS", "TARGET", "VARIANTS", "RankTimes", "Size", "block_cost",
           "block_differences", "checkpoint_cpu", "copy_seconds", "main", "mean_interval",
           "paired_cost", "state_bytes"]

RankTimes = list[list[float]]
"""One run's step times: each rank's, in step order."""

NAME = "snapshot-overhead"
TARGET = 0.05  # a snapshot variant's median step may be at most this much slower
PAIRED_MIN_EVERY = 4
"""The paired estimate's fewest steps between snapshots: the two steps compared against a
snapshot's two must hold none."""
BLOCK_MIN_STEPS = 2
"""The blocks estimate's shortest run of steps: its first step is left out."""
BASELINE = "no snapshots"
CONTROL = "no snapshots, again"
"""The baseline run a second time in each round: how far two identical runs differ here (the
noise), printed beside every verdict. On a shared machine it can be as large as the target."""
STATE_DICTS = "state dicts alone"
"""The blocks estimate's job building only the tree a snapshot starts from."""
PER_RANK = "per-rank parts alone"
"""The blocks estimate's job snapshotting no state: the step and the random states alone."""
_AT_ONCE = {"TRAINGUARD_SNAPSHOT_COPY_BEHIND": "0"}
VARIANTS = {  # name -> (snapshot every N steps, environment)
    BASELINE: (0, {}),
    CONTROL: (0, {}),
    "whole, every step": (1, {"TRAINGUARD_SNAPSHOT_SHARES": "0"}),
    "shares, every step": (1, {"TRAINGUARD_SNAPSHOT_SHARES": "1"}),
    "whole, copied at once": (1, {"TRAINGUARD_SNAPSHOT_SHARES": "0", **_AT_ONCE}),
    "shares, copied at once": (1, {"TRAINGUARD_SNAPSHOT_SHARES": "1", **_AT_ONCE}),
}


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    width: int
    batch: int
    steps_scale: int = 1
    """Its jobs run ``--steps`` times this many steps: the demo's steps are about 15 times
    shorter than the 75 MB job's, and at the same count its runs lasted 3 s, its paired
    estimate rested on under 40 snapshots a rank and moved by 11 points between rounds."""

    def steps(self, args: argparse.Namespace) -> int:
        return int(args.steps) * self.steps_scale


SIZES = (Size("demo", 256, 64, steps_scale=10), Size("75MB", 1448, 128))


def state_bytes(width: int) -> int:
    """Bytes of the job's state (model + Adam after its first step) on one rank."""
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width),
                          nn.ReLU(), nn.Linear(width, width))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.zeros(1, width)).sum().backward()
    optimizer.step()
    tensors = [*model.state_dict().values()]
    for entry in optimizer.state_dict()["state"].values():
        tensors += [value for value in entry.values() if isinstance(value, torch.Tensor)]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def copy_seconds(nbytes: int, *, repeats: int = 11) -> float:
    """Seconds to copy ``nbytes`` into memory reserved beforehand, on one thread as a worker
    copies (``OMP_NUM_THREADS=1``): the fastest of ``repeats``, the floor a copy can reach on
    a machine others share."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        source = torch.ones(nbytes, dtype=torch.uint8)
        target = torch.empty_like(source)
        target.copy_(source)  # touch every page once, as the slot's MAP_POPULATE does
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            target.copy_(source)
            times.append(time.perf_counter() - began)
    finally:
        torch.set_num_threads(threads)
    return min(times)


def paired_cost(per_rank: Sequence[Sequence[float]], *, every: int,
                skip: int) -> tuple[float, float, int]:
    """What one snapshot costs, from one run with a snapshot after every ``every``-th step
    (``per_rank``: each rank's step times, in step order; the first ``skip`` left out): the
    median over snapshots of (its step + the next) - (the two after those), the median step
    of those two, and how many snapshots were compared. Raises ValueError: ``every`` below
    :data:`PAIRED_MIN_EVERY`, or no snapshot to compare."""
    if every < PAIRED_MIN_EVERY:
        raise ValueError(f"--paired-every must be at least {PAIRED_MIN_EVERY}, got {every}")
    first = skip + (-(skip + 1)) % every  # the first step left in with a snapshot taken in it
    differences: list[float] = []
    clean: list[float] = []
    for seconds in per_rank:
        for index in range(first, len(seconds) - 3, every):
            differences.append(seconds[index] + seconds[index + 1]
                               - seconds[index + 2] - seconds[index + 3])
            clean += seconds[index + 2 : index + 4]
    if not differences:
        raise ValueError("no snapshot with three steps after it: more --steps")
    return statistics.median(differences), statistics.median(clean), len(differences)


def block_cost(per_rank: Sequence[Sequence[float]], *, block: int, skip: int,
               every: int = 1) -> tuple[float, float, int]:
    """The median step with a snapshot after every ``every``-th step and the median step
    without, from one run that snapshots so in every second run of ``block`` steps (steps
    ``block`` to ``2 * block - 1``, ...; ``per_rank``: each rank's step times in step order),
    over the whole runs after the first ``skip`` steps, the first step of each left out (it
    has its own snapshot but not the copy of one before it, or that copy but no snapshot of
    its own); and how many runs with snapshots were compared. With ``every`` above 1 a "step"
    is the mean of ``every`` steps in a row, each such group holding one snapshot: the median
    of single steps would stand on those without. Raises ValueError: ``block`` below
    :data:`BLOCK_MIN_STEPS` or leaving no group of ``every``, or no run of either kind."""
    if block < BLOCK_MIN_STEPS:
        raise ValueError(f"--block-steps must be at least {BLOCK_MIN_STEPS}, got {block}")
    if not 1 <= every < block:
        raise ValueError(f"a snapshot every {every} steps needs runs of more than {every} "
                         f"steps, got {block}")
    with_snapshots: list[float] = []
    without: list[float] = []
    runs = 0
    for seconds in per_rank:
        for index, steps in _runs(seconds, block=block, skip=skip, every=every):
            if index % 2:
                with_snapshots += steps
                runs += 1
            else:
                without += steps
    if not with_snapshots or not without:
        raise ValueError("no whole run of steps with snapshots and one without after the "
                         "warm-up: more --steps")
    return statistics.median(with_snapshots), statistics.median(without), runs


def _runs(seconds: Sequence[float], *, block: int, skip: int,
          every: int = 1) -> Iterator[tuple[int, list[float]]]:
    """Each whole run of ``block`` steps after the first ``skip`` (the runs with an odd number
    hold snapshots), by its number: its steps after the first, as the means of ``every`` in
    a row (a last group that is not whole left out)."""
    for start in range(-(-skip // block) * block, len(seconds) - block + 1, block):
        steps = seconds[start + 1 : start + block]
        yield start // block, [statistics.fmean(steps[first : first + every])
                               for first in range(0, len(steps) - every + 1, every)]


def block_differences(per_rank: Sequence[Sequence[float]], *, block: int, skip: int,
                      every: int = 1) -> list[float]:
    """From the same run as :func:`block_cost`: each run of steps with snapshots against the
    two runs without on either side of it, its median step over the mean of theirs, minus 1.
    Neighbours only, so that a machine that slows down for seconds slows both sides of a
    difference alike. The ranks step together (DDP), so each step's time is the median of the
    ranks' (each run's first step left out, and ``every`` steps in a row taken as one, as
    there)."""
    steps = [statistics.median(times) for times in zip(*per_rank, strict=False)]
    medians = {index: statistics.median(run)
               for index, run in _runs(steps, block=block, skip=skip, every=every)}
    return [medians[index] / ((medians[index - 1] + medians[index + 1]) / 2) - 1
            for index in sorted(medians)
            if index % 2 and index - 1 in medians and index + 1 in medians]


def mean_interval(values: Sequence[float], *, resamples: int = 4000,
                  seed: int = 0) -> tuple[float, float]:
    """The 95% interval of the mean of ``values``, by resampling them (the bootstrap's
    percentiles; a fixed seed, so that a recording renders the same every time): the noise
    here is neither normal nor steady, so no distribution is assumed."""
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values, got {len(values)}")
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values)))
                   for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def checkpoint_cpu(workdir: Path, *, ranks: int, warmup: float) -> list[float]:
    """The CPU seconds of each ``Session.checkpoint`` on each rank's training thread, as the
    job wrote them, after the first ``warmup`` share of each rank's (none: the job took no
    snapshots)."""
    seconds = []
    for rank in range(ranks):
        path = workdir / f"checkpoint-cpu-{rank}.json"
        if path.exists():
            values = json.loads(path.read_text())
            seconds += values[int(len(values) * warmup):]
    return seconds


def _command(size: Size, snapshots: Sequence[str], workdir: Path,
             args: argparse.Namespace) -> list[str]:
    """The job's command line; ``snapshots``: its flags that say after which steps."""
    return [sys.executable, "-m", "trainguard", "run", "--nproc-per-node",
            str(args.nproc_per_node), "--run-root", str(workdir / "runs"), "--rdzv-id", "bench",
            str(common.JOBS / "overhead_job.py"), "--steps", str(size.steps(args)), "--width",
            str(size.width), "--batch", str(size.batch), "--mode", "session", *snapshots]


def _measure(size: Size, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    chosen = {BASELINE, CONTROL, *(args.variants or VARIANTS)}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS if name in chosen}
    by_round: dict[str, list[float]] = {name: [] for name in times}  # each run's median
    skip = max(1, int(size.steps(args) * args.warmup))
    # Each estimate made within one run: the job's flags for it, and what it makes of each
    # round's step times (each rank's, in step order).
    estimates: dict[str, tuple[list[str], Callable[[list[RankTimes]], dict[str, Any]]]] = {
        name: spec for name, spec, wanted in (
            ("paired", (["--snapshot-every", str(args.paired_every)],
                        functools.partial(_paired, every=args.paired_every, skip=skip)),
             args.paired_every),
            ("blocks", (["--snapshot-blocks", str(args.block_steps)],
                        functools.partial(_blocks, block=args.block_steps, skip=skip)),
             args.block_steps),
            ("state_dicts", (["--snapshot-blocks", str(args.block_steps), "--state-dicts-only"],
                             functools.partial(_blocks, block=args.block_steps, skip=skip,
                                               variant=STATE_DICTS)),
             args.block_steps),
            ("per_rank", (["--snapshot-blocks", str(args.block_steps), "--per-rank-only"],
                          functools.partial(_blocks, block=args.block_steps, skip=skip,
                                            variant=PER_RANK)),
             args.block_steps),
            ("blocks_every", (["--snapshot-blocks", str(args.block_steps), "--snapshot-every",
                               str(args.blocks_every)],
                              functools.partial(_blocks, block=args.block_steps, skip=skip,
                                                every=args.blocks_every)),
             args.block_steps and args.blocks_every)) if wanted}
    within: dict[str, list[RankTimes]] = {name: [] for name in estimates}
    cpu: dict[str, list[float]] = {name: [] for name in [*times, *estimates]}  # checkpoint_cpu
    names = list(times)
    for number in range(args.rounds):
        turn = number % len(names)
        for name in names[turn:] + names[:turn]:
            every, env = VARIANTS[name]
            workdir = Path(tempfile.mkdtemp(prefix=f"{size.name}-", dir=root))
            measured = overhead.step_times(
                f"{size.name}, {name}", _command(size, ["--snapshot-every", str(every)],
                                                 workdir, args),
                workdir=workdir, ranks=args.nproc_per_node, skip=skip, timeout=args.timeout,
                env=env)
            times[name] += measured
            by_round[name].append(statistics.median(measured))
            cpu[name] += checkpoint_cpu(workdir, ranks=args.nproc_per_node, warmup=args.warmup)
            print(f"[snapshot-overhead] round {number + 1}: {size.name}, {name} done",
                  file=sys.stderr, flush=True)
        for name, (flags, _) in estimates.items():
            workdir = Path(tempfile.mkdtemp(prefix=f"{size.name}-{name}-", dir=root))
            within[name].append(overhead.rank_step_times(
                f"{size.name}, {name}", _command(size, flags, workdir, args), workdir=workdir,
                ranks=args.nproc_per_node, timeout=args.timeout))
            cpu[name] += checkpoint_cpu(workdir, ranks=args.nproc_per_node, warmup=args.warmup)
    medians = {name: statistics.median(values) for name, values in times.items()}
    baseline = medians[BASELINE]
    overheads = {name: median / baseline - 1 for name, median in medians.items()
                 if name not in (BASELINE, CONTROL)}
    nbytes = state_bytes(size.width)
    floor = copy_seconds(nbytes)
    return {
        **dataclasses.asdict(size), "steps": size.steps(args), "state_bytes_per_rank": nbytes,
        "median_step_seconds": medians,
        "steps_measured": {name: len(values) for name, values in times.items()},
        "overhead": overheads, "met": {name: value <= TARGET for name, value in overheads.items()},
        "noise": medians[CONTROL] / baseline - 1,
        "overhead_by_round": {
            name: [median / base - 1 for median, base in zip(values, by_round[BASELINE],
                                                              strict=True)]
            for name, values in by_round.items() if name != BASELINE},
        "checkpoint_cpu_seconds": {name: statistics.median(values)
                                   for name, values in cpu.items() if values},
        "floor_copy_seconds": floor, "floor_overhead": floor / baseline,
        "every_rank_copies_overhead": args.nproc_per_node * floor / baseline,
        **{name: summarize(within[name]) for name, (_, summarize) in estimates.items()},
    }


def _paired(rounds: list[RankTimes], *, every: int, skip: int) -> dict[str, Any]:
    """The paired estimate over every round (each round's median cost against its own clean
    step), and each round's."""
    costs = [paired_cost(times, every=every, skip=skip) for times in rounds]
    overheads = [cost / step for cost, step, _ in costs]
    overhead_ = statistics.median(overheads)
    return {
        "every": every, "snapshots_compared": sum(count for _, _, count in costs),
        "snapshot_seconds": statistics.median(cost for cost, _, _ in costs),
        "clean_step_seconds": statistics.median(step for _, step, _ in costs),
        "overhead": overhead_, "overhead_by_round": overheads, "met": overhead_ <= TARGET,
    }


def _blocks(rounds: list[RankTimes], *, block: int, skip: int, every: int = 1,
            variant: str | None = None) -> dict[str, Any]:
    """The blocks estimate: each round's overhead within its run, and their median; and over
    every round, each run with snapshots (``variant``'s, after every ``every``-th step; by
    default trainguard's shares, named by how often) against its neighbours
    (:func:`block_differences`), with the 95% interval of their mean, which decides: met when
    it lies at or under the target, not met when above it, else not resolved by this
    recording."""
    variant = variant or ("shares, every step" if every == 1 else f"shares, every {every} steps")
    costs = [block_cost(times, block=block, skip=skip, every=every) for times in rounds]
    overheads = [with_snapshots / without - 1 for with_snapshots, without, _ in costs]
    differences = [value for times in rounds
                   for value in block_differences(times, block=block, skip=skip, every=every)]
    low, high = mean_interval(differences)
    return {
        "steps": block, "every": every, "runs_compared": sum(count for _, _, count in costs),
        "median_step_seconds": {
            variant: statistics.median(value for value, _, _ in costs),
            BASELINE: statistics.median(value for _, value, _ in costs)},
        "overhead_by_round": overheads, "median_of_rounds": statistics.median(overheads),
        "neighbours_compared": len(differences), "overhead": statistics.fmean(differences),
        "interval": [low, high], "met": high <= TARGET,
        "verdict": "met" if high <= TARGET else "not met" if low > TARGET else "not resolved",
    }


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    if args.block_steps and args.blocks_every >= args.block_steps:
        raise SystemExit(f"--blocks-every {args.blocks_every} needs --block-steps above it, "
                         f"got {args.block_steps}")
    chosen = [size for size in SIZES if size.name in args.sizes]
    with tempfile.TemporaryDirectory(prefix="trainguard-snapshot-overhead-") as root:
        sizes = [_measure(size, args, Path(root)) for size in chosen]
    return {
        **common.header(NAME, argv),
        "setup": f"{args.nproc_per_node}-rank DDP MLP (3 Linear layers, Adam) on CPU with gloo "
                 f"under `trainguard run` and Session.step, {args.steps} steps (the demo's model: "
                 f"{args.steps * SIZES[0].steps_scale}), {args.rounds} "
                 f"round(s); the snapshot (Session.checkpoint after each step) is inside the "
                 f"timed step; the first {args.warmup:.0%} of each rank's steps left out; floor: "
                 "one replica's state copied once per step at memory bandwidth, measured after the "
                 "jobs" + (f"; paired: one more job a round with a snapshot every "
                           f"{common.ordinal(args.paired_every)} step, each snapshot's two "
                           "steps against the next two on the same rank"
                           if args.paired_every else "")
                 + (f"; blocks: one more job a round with a snapshot after every step of every "
                    f"second run of {args.block_steps} steps, its steps in those runs against "
                    "its steps in the others (the first of each left out); state dicts alone: "
                    "the same, its steps in those runs building only the tree a snapshot starts "
                    "from (state dicts, random states) and dropping it; per-rank parts alone: the "
                    "same, its snapshots in those runs holding no state (the step and the "
                    "random states)"
                    + (f"; every {args.blocks_every} steps: the same with a snapshot after "
                       f"every {common.ordinal(args.blocks_every)} step of those runs, "
                       f"{args.blocks_every} steps in a row taken as one"
                       if args.blocks_every else "")
                    if args.block_steps else "")
                 + "; the runs of a round in another order each round",
        "target": TARGET, "sizes": sizes,
    }


def _zero_or_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number, 0 (off) or at least ``minimum``."""
    def number(text: str) -> int:
        value = int(text)
        if value != 0 and value < minimum:
            raise argparse.ArgumentTypeError(f"must be 0 or at least {minimum}, got {value}")
        return value
    return number


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_step_job_arguments(result, steps=200)
    result.add_argument("--sizes", nargs="+", choices=[size.name for size in SIZES],
                        default=[size.name for size in SIZES])
    result.add_argument("--variants", nargs="+",
                        choices=[name for name in VARIANTS if name not in (BASELINE, CONTROL)],
                        help=f"measure only these ({BASELINE!r}, the baseline, and {CONTROL!r}, "
                             "the noise, always); default: all")
    result.add_argument("--paired-every", type=_zero_or_at_least(PAIRED_MIN_EVERY),
                        default=PAIRED_MIN_EVERY, metavar="N",
                        help="also run each size once a round with a snapshot every N-th step "
                             f"(N >= {PAIRED_MIN_EVERY}) and compare, within the run, each "
                             "snapshot's two steps with the next two (0: not)")
    result.add_argument("--block-steps", type=_zero_or_at_least(BLOCK_MIN_STEPS), default=10,
                        metavar="K",
                        help="also run each size once a round with a snapshot after every step "
                             "of every second run of K steps (K >= "
                             f"{BLOCK_MIN_STEPS}) and compare, within the run, its steps in "
                             "those runs with its steps in the others; and once more building "
                             "only the state dicts and random states there (0: neither)")
    result.add_argument("--blocks-every", type=_zero_or_at_least(2), default=2, metavar="N",
                        help="also run each size once a round as for --block-steps, a snapshot "
                             "after every N-th step of those runs only (what --snapshot-every "
                             "auto takes where a snapshot every step costs too much; 0: not)")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return common.run_step_job_benchmark(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
