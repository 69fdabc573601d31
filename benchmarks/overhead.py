"""Step-time overhead of trainguard without faults, against torchrun on the same script.

One job (jobs/overhead_job.py: a DDP MLP on CPU, gloo) runs ``--steps`` steps on
``--nproc-per-node`` ranks under each launcher, and each rank writes its own step times (from
one step's start to the next's). Variants:

- ``torchrun``: ``python -m torch.distributed.run --standalone``, the unmodified script (the
  baseline);
- ``trainguard``: ``trainguard run``, the unmodified script;
- ``trainguard-session``: the script with ``Session.step`` around each step, no snapshots;
- ``trainguard-session-run``: the same under ``Session.run``;
- each trainguard variant again with ``--metrics-port 0`` (``+metrics``), when this
  trainguard has that flag (else reported as not measured).

Measured: the median step time over every rank's steps after the first ``--warmup`` share,
and its overhead against torchrun's (target: under 2% each). ``--rounds`` runs every variant
that many times, interleaved, so that a machine that slows down over time slows each alike;
the medians pool the rounds. Prints one JSON object; ``--output`` also writes it
(default when given without a path: benchmarks/results/overhead.json).

    python -m benchmarks.overhead --output              # 4 ranks, 500 steps
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import common

__all__ = ["TARGET", "VARIANTS", "Variant", "has_metrics_flag", "main", "rank_step_times",
           "step_times"]

NAME = "overhead"
TARGET = 0.02  # the overhead each variant must stay under


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    launcher: str  # torchrun or trainguard
    mode: str  # the job's --mode: plain, session or run
    metrics: bool = False


VARIANTS = (
    Variant("torchrun", "torchrun", "plain"),
    Variant("trainguard", "trainguard", "plain"),
    Variant("trainguard-session", "trainguard", "session"),
    Variant("trainguard-session-run", "trainguard", "run"),
    Variant("trainguard+metrics", "trainguard", "plain", metrics=True),
    Variant("trainguard-session+metrics", "trainguard", "session", metrics=True),
    Variant("trainguard-session-run+metrics", "trainguard", "run", metrics=True),
)


def has_metrics_flag() -> bool:
    """Whether this trainguard serves metrics (``--metrics-port``)."""
    shown = subprocess.run([sys.executable, "-m", "trainguard", "run", "--help"],
                           capture_output=True, text=True, timeout=120, check=False)
    return "--metrics-port" in shown.stdout


def _command(variant: Variant, workdir: Path, args: argparse.Namespace) -> list[str]:
    job = [str(common.JOBS / "overhead_job.py"), "--steps", str(args.steps), "--width",
           str(args.width), "--batch", str(args.batch), "--mode", variant.mode]
    ranks = ["--nproc-per-node", str(args.nproc_per_node)]
    if variant.launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", *ranks, *job]
    metrics = ["--metrics-port", "0"] if variant.metrics else []
    return [sys.executable, "-m", "trainguard", "run", *ranks, "--run-root",
            str(workdir / "runs"), "--rdzv-id", "bench", *metrics, *job]


def trial(variant: Variant, args: argparse.Namespace, root: Path) -> list[float]:
    """Every rank's step times after the warm-up, from one run of the job."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{variant.name}-", dir=root))
    return step_times(variant.name, _command(variant, workdir, args), workdir=workdir,
                      ranks=args.nproc_per_node, skip=max(1, int(args.steps * args.warmup)),
                      timeout=args.timeout)


def step_times(name: str, command: list[str], *, workdir: Path, ranks: int, skip: int,
               timeout: float, env: dict[str, str] | None = None) -> list[float]:
    """Run one job of jobs/overhead_job.py in ``workdir`` (``env`` added to the environment);
    every rank's step times but its first ``skip``."""
    return [seconds for per_rank in rank_step_times(
        name, command, workdir=workdir, ranks=ranks, timeout=timeout, env=env)
        for seconds in per_rank[skip:]]


def rank_step_times(name: str, command: list[str], *, workdir: Path, ranks: int,
                    timeout: float, env: dict[str, str] | None = None) -> list[list[float]]:
    """Like :func:`step_times`, each rank's step times apart and all of them, in step order
    (item ``i``: from step ``i``'s start to the next's)."""
    with common.ProcessGroup(command, log=workdir / "launcher.log",
                             env={**(env or {}), "BENCH_OUTPUT_DIR": str(workdir)}) as group:
        try:
            code = group.process.wait(timeout)
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"{name} did not end within {timeout} s; see "
                               f"{group.log}") from error
    if code != 0:
        raise RuntimeError(f"{name} exited with {code}:\n"
                           + group.log.read_text(errors="replace")[-3000:])
    seconds = []
    for rank in range(ranks):
        path = workdir / f"steps-{rank}.json"
        if not path.exists():
            raise RuntimeError(f"{name}: rank {rank} wrote no step times ({path})")
        seconds.append(json.loads(path.read_text()))
    return seconds


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    metrics = has_metrics_flag()
    chosen = {"torchrun", *(args.variants or (v.name for v in VARIANTS))}
    measured = [v for v in VARIANTS if (metrics or not v.metrics) and v.name in chosen]
    times: dict[str, list[float]] = {variant.name: [] for variant in measured}
    with tempfile.TemporaryDirectory(prefix="trainguard-overhead-") as root:
        for number in range(args.rounds):
            for variant in measured:
                times[variant.name] += trial(variant, args, Path(root))
                print(f"[overhead] round {number + 1}: {variant.name} done", file=sys.stderr,
                      flush=True)
    baseline = statistics.median(times["torchrun"])
    results = []
    for variant in VARIANTS:
        entry: dict[str, Any] = {**dataclasses.asdict(variant), "measured": variant in measured}
        if variant in measured:
            median = statistics.median(times[variant.name])
            overhead = median / baseline - 1
            entry.update(median_step_seconds=median, steps_measured=len(times[variant.name]),
                         overhead=overhead,
                         met=None if variant.launcher == "torchrun" else overhead < TARGET)
        elif variant.name not in chosen:
            entry["why"] = "not asked for (--variants)"
        else:
            entry["why"] = "this trainguard has no --metrics-port"
        results.append(entry)
    return {
        **common.header(NAME, argv),
        "setup": f"{args.nproc_per_node}-rank DDP MLP (3 x {args.width}x{args.width} Linear, "
                 f"Adam, batch {args.batch}) on CPU with gloo, {args.steps} steps, "
                 f"{args.rounds} round(s); no snapshots; step times written by each rank, "
                 f"the first {args.warmup:.0%} of each rank's steps left out",
        "target": TARGET, "variants": results,
    }


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_step_job_arguments(result, steps=500)
    result.add_argument("--width", type=int, default=768)
    result.add_argument("--batch", type=int, default=128)
    result.add_argument("--variants", nargs="+", choices=[v.name for v in VARIANTS],
                        help="measure only these (torchrun, the baseline, always); default: all")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return common.run_step_job_benchmark(NAME, parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
