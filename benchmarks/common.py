"""Shared by the benchmarks: timelines written by the jobs, process groups, result files."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from trainguard import testing

RESULTS = Path(__file__).parent / "results"
JOBS = Path(__file__).parent / "jobs"


class TimelineReader:
    """Reads the marks the benchmark jobs write (jobs/timeline.py), only what is new each time,
    so that polling does not steal the CPU the job is measured on."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._offsets: dict[Path, int] = {}
        self.marks: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        for path in self._directory.glob("timeline-*.jsonl"):
            with path.open("rb") as stream:
                stream.seek(self._offsets.get(path, 0))
                data = stream.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                with contextlib.suppress(ValueError):
                    self.marks.append(json.loads(line))
        self.marks.sort(key=lambda mark: mark["mono"])
        return self.marks


def wait_until(what: str, condition: Callable[[], Any], *, timeout: float,
               process: subprocess.Popen[bytes] | None = None, poll: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the job exited ({process.returncode}) before {what}")
        time.sleep(poll)
    raise TimeoutError(f"no {what} within {timeout} s")


def exit_cleanly_on_sigterm() -> None:
    """Turn SIGTERM (``timeout``, a CI cancel) into SystemExit, so that cleanups run."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


class ProcessGroup:
    """A command in its own session; everything it started dies with it, also the processes
    it put in sessions of their own (torchrun does that with its workers)."""

    def __init__(self, command: Sequence[str], *, log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.log = log
        self._output = log.open("wb")
        self.process = subprocess.Popen(
            list(command), stdout=self._output, stderr=subprocess.STDOUT, cwd=cwd,
            env={**os.environ, **(env or {})}, start_new_session=True)

    def stop(self, *, grace: float = 0.0) -> None:
        """Kill everything; with ``grace``, first SIGTERM the command's group and give it that
        many seconds to stop by itself (a launcher passes it on to its workers)."""
        if grace > 0:
            try:  # noted first: once the launcher is gone its workers are no one's children
                descendants = psutil.Process(self.process.pid).children(recursive=True)
            except psutil.Error:
                descendants = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
            for process in descendants:  # those that outlived their launcher
                with contextlib.suppress(psutil.Error):
                    process.kill()
        testing.end_process_tree(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)
        self._output.close()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_trials(tools: Sequence[str], *, trials: int, seed: int,
               trial: Callable[[str, random.Random, Path], dict[str, Any]]
               ) -> list[dict[str, Any]]:
    """``trial(tool, rng, root)`` ``trials`` times per tool, in order, one random source for
    all (the same seed gives every run the same positions); each result printed as it comes."""
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-") as root:
        for tool in tools:
            for number in range(trials):
                result = trial(tool, rng, Path(root))
                results.append(result)
                print(json.dumps({"trial": number, **result}), flush=True)
    return results


def medians_by_tool(results: Sequence[dict[str, Any]], tools: Sequence[str],
                    keys: Sequence[str]) -> dict[str, dict[str, float | None]]:
    return {tool: {key: median(r[key] for r in results if r["tool"] == tool) for key in keys}
            for tool in tools}


def add_worst(summary: dict[str, dict[str, float | None]], results: Sequence[dict[str, Any]],
              keys: Sequence[str]) -> None:
    """Each tool's ``worst_<key>`` beside its medians (None if any trial has none): a target
    holds in every trial, not only in the median one."""
    for tool, values in summary.items():
        for key in keys:
            found = [r[key] for r in results if r["tool"] == tool]
            values[f"worst_{key}"] = None if None in found else max(found, default=None)


def write_trials(name: str, results: Sequence[dict[str, Any]],
                 summary: dict[str, dict[str, float | None]], setup: str,
                 output: Path | None) -> None:
    """Show a trial benchmark's summary; with ``output``, write its result there (every trial,
    the summary, the set-up)."""
    print(json.dumps(summary, indent=1))
    write_result(name, {"trials": list(results), "medians": summary, "setup": setup}, output)


def ordinal(number: int) -> str:
    """``number`` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 22nd."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(
        number % 10, "th")
    return f"{number}{suffix}"


def median(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "argv": sys.argv}


def recorded_at() -> str:
    """The moment a result is recorded, as every result's ``when`` gives it (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def header(name: str, argv: Sequence[str]) -> dict[str, Any]:
    """What a result starts with: the benchmark, when, and the machine with the command line as
    ``python -m benchmarks.<module>`` runs it (``argv``: its arguments)."""
    return {"benchmark": name, "when": recorded_at(),
            "machine": {**machine(), "argv": [f"benchmarks/{name.replace('-', '_')}.py",
                                              *argv]}}


def write_result(name: str, body: dict[str, Any], output: Path | None) -> None:
    """Write ``body`` as result ``name`` to ``output`` (a file, or a directory to hold
    ``<name>.json``), with when and where it ran; nothing without ``output``."""
    if output is not None:
        _write(name, {"benchmark": name, "when": recorded_at(), "machine": machine(), **body},
               output)


def add_step_job_arguments(parser: argparse.ArgumentParser, *, steps: int) -> None:
    """The options every step-time benchmark shares: ranks, steps, rounds, warm-up, timeout,
    output."""
    parser.add_argument("--nproc-per-node", type=int, default=4)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="the share of each rank's first steps left out")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds one job may take")
    add_output_argument(parser)


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``--output``: a file, or a directory to hold ``<result name>.json`` (the result's name
    may depend on the options, as a fault's)."""
    parser.add_argument("--output", nargs="?", type=Path, const=RESULTS, default=None,
                        help="also write the result here: a file, or a directory for "
                        "<result name>.json (given without a path: benchmarks/results/)")


def run_step_job_benchmark(name: str, parser: argparse.ArgumentParser,
                           run: Callable[[argparse.Namespace, list[str]], dict[str, Any]],
                           argv: Sequence[str] | None) -> int:
    """Parse and check the shared options, run, print the JSON and write it with --output."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    if args.nproc_per_node < 1 or args.steps < 2 or args.rounds < 1 \
            or not 0 <= args.warmup < 1:
        raise SystemExit("--nproc-per-node, --rounds >= 1, --steps >= 2, 0 <= --warmup < 1")
    exit_cleanly_on_sigterm()
    publish(name, run(args, arguments), args.output)
    return 0


def publish(name: str, result: dict[str, Any], output: Path | None) -> None:
    """Print the result as one JSON object, and write it to ``output`` when given."""
    print(json.dumps(result, indent=1))
    if output is not None:
        _write(name, result, output)


def _write(name: str, result: dict[str, Any], output: Path) -> None:
    """Write result ``name`` to ``output``: a file, or a directory to hold ``<name>.json``."""
    path = output / f"{name}.json" if output.is_dir() else output
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[{name}] written to {path}", file=sys.stderr)
