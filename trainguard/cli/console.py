"""What ``trainguard run`` shows: where things are, each event as it happens, and a summary."""

from __future__ import annotations

import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainguard.agent import step_statistics
from trainguard.controller import job_controller, policy
from trainguard.faults import levels
from trainguard.job import events
from trainguard.launcher import RunReport

__all__ = ["ConsoleObserver", "render_summary"]

_STYLES = {
    events.FaultDetected.KIND: "bold red",
    events.DecisionMade.KIND: "yellow",
    events.RecoveryCompleted.KIND: "bold green",
    events.CheckpointRejected.KIND: "bold yellow",
    events.ReplicasDiffer.KIND: "bold yellow",
    events.JobFinished.KIND: "bold",
    events.SnapshotIntervalChosen.KIND: "cyan",
}


def _shown(strategy: str) -> str:
    return policy.Strategy(strategy).shown


def describe(event: events.Event) -> str:
    """An event's line for people: strategies as what they do, device levels in plain words
    beside the original's; the recorded event keeps the original's names."""
    if isinstance(event, events.DecisionMade):
        return (f"decision: {_shown(event.strategy)} ({event.reason}; "
                f"{event.restarts_left} restarts left)")
    if isinstance(event, events.RecoveryFailed):
        return f"{_shown(event.strategy)} failed after {event.seconds:.2f} s: {event.reason}"
    if isinstance(event, events.DeviceFaultGraded):
        level = event.level
        return event.summary().replace(f"-> {level} (", f"-> {levels.health(level)} ({level}, ",
                                       1)
    if isinstance(event, events.DeviceLevelChanged):
        before, level = event.before, event.level
        return event.summary().replace(
            f"{before} -> {level} (",
            f"{levels.health(before)} ({before}) -> {levels.health(level)} ({level}, ", 1)
    return event.summary()


class ConsoleObserver:
    """Prints to stderr, so the workers' stdout stays theirs."""

    def __init__(self, console: Console | None = None, *, verbose_checkpoints: bool = False,
                 devices: bool = True) -> None:
        """``devices``: the host has devices (GPUs, NPUs). Without, a device's level changing
        with time concerns only simulated faults, and is left to ``trainguard events``."""
        self.console = console or Console(stderr=True, highlight=False)
        self._started = time.monotonic()
        self._verbose_checkpoints = verbose_checkpoints
        self._devices = devices

    def _line(self, text: str, style: str = "") -> None:
        elapsed = time.monotonic() - self._started
        self.console.print(f"[dim]trainguard {elapsed:7.1f}s[/dim] {text}", style=style,
                           markup=True, soft_wrap=True)

    def started(self, *, run_dir: Path, store_path: Path, checkpoint_dir: Path) -> None:
        self._line(f"run directory {run_dir}; state store {store_path}; "
                   f"checkpoints {checkpoint_dir}")

    def event(self, event: events.Event) -> None:
        if isinstance(event, events.CheckpointPersisted) and not self._verbose_checkpoints:
            return
        if isinstance(event, events.DeviceLevelChanged) and not self._devices:
            return
        if isinstance(event, events.StepProgress | events.RunMeasured):
            return  # shown by progress() and by the summary
        summary = describe(event).replace("[", "\\[")
        self._line(summary, _STYLES.get(event.KIND, ""))
        if isinstance(event, events.FaultDetected) and event.error_excerpt and (
                event.fault_kind in ("exited", "raised")):
            last = event.error_excerpt.strip().splitlines()[-1].replace("[", "\\[")
            self._line(f"  error: {last}", "red")

    def serving_metrics(self, *, url: str) -> None:
        self._line(f"metrics on {url}")

    def progress(self, progress: step_statistics.Progress) -> None:
        if progress.step is None:
            return
        rate = f", {progress.steps_per_second:.1f} steps/s" if progress.steps_per_second else ""
        self._line(f"[dim]step {progress.step}{rate} (generation {progress.generation})[/dim]")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _recovered(record: job_controller.FaultRecord, *, steps_reported: bool) -> str:
    """How long until every rank stepped again; for a script that reports no steps, whether its
    job was restarted (which is all that can be known)."""
    if record.recovery is not None:
        return _seconds(record.recovery.recover_seconds)
    if not steps_reported and record.decision.strategy is not policy.Strategy.FAIL:
        return "restarted"
    return "no"


def render_summary(report: RunReport, console: Console) -> None:
    result = report.result
    # Step marks come from trainguard.train; a script without it never sends one.
    steps_reported = report.training_seconds is not None
    if result.faults:
        used = [policy.Strategy(record.recovery.strategy if record.recovery
                                else record.decision.strategy) for record in result.faults]
        # The table is narrow: the strategies' labels there, the original's names below.
        aliases = "".join(sorted({f"; {s.label}: {s} in the original" for s in used
                                  if s.value not in s.label}))
        table = Table(title="Faults and recoveries", title_justify="left",
                      caption="*: injected. detected: fault -> seen; recovered: fault -> every "
                              "rank stepping again; lost: completed steps redone; +peer: a "
                              f"rank's state came from a data-parallel replica{aliases}",
                      caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      padding=(0, 1), collapse_padding=True, show_edge=False)
        for column in ("rank", "fault", "step", "strategy", "detected", "recovered", "lost",
                       "restored"):
            table.add_column(column, justify="left" if column in ("fault", "strategy")
                             else "right", no_wrap=column != "strategy")
        for record, strategy in zip(result.faults, used, strict=True):
            fault, recovery = record.fault, record.recovery
            what = f"{fault.injected}*" if fault.injected else str(fault.kind)
            table.add_row(
                str(fault.rank), what, "-" if fault.last_step is None else str(fault.last_step),
                strategy.label,
                _seconds(fault.detect_seconds),
                _recovered(record, steps_reported=steps_reported),
                str(recovery.steps_lost) if recovery else "-",
                f"{recovery.restore_source.replace(' and peers', '+peer')}@"
                f"{recovery.restore_step}" if recovery else "-")
        console.print(table)
    totals = Table(title="Job", title_justify="left", show_header=False)
    totals.add_column("what")
    totals.add_column("value", justify="right")
    # Reasons quote errors, whose brackets ([pair.cc:152]) are not markup.
    totals.add_row("outcome", Text(f"{result.outcome}: {result.reason}"))
    totals.add_row("steps completed", str(result.resume_step) if steps_reported else
                   "not reported (the script does not use trainguard.train)")
    totals.add_row("restarts used", str(result.restarts_used))
    totals.add_row("wall time", _seconds(result.wall_seconds))
    totals.add_row("step time (median)", _seconds(report.step_seconds))
    totals.add_row("snapshot stall (median)", _seconds(report.snapshot_seconds))
    if steps_reported:
        every = report.snapshot_every
        totals.add_row("snapshots", "every step" if every == 1 else
                       f"every {every} steps (a fault loses up to {every - 1})")
    if report.goodput is not None:
        totals.add_row("goodput", f"{report.goodput:.1%}")
    totals.add_row("events", Text(f"trainguard events --run-dir {report.run_dir}"))
    console.print(totals)
    _render_checkpoint_lag(report, console)
    if result.errors:
        console.print("[bold red]Worker errors (root cause first):[/bold red]")
        console.print(result.errors, markup=False, highlight=False)


def _render_checkpoint_lag(report: RunReport, console: Console) -> None:
    """Say that a resume from disk would redo steps: the checkpoint directory let us down."""
    lag = report.checkpoint_lag
    if lag is None:
        return
    disk = "no checkpoint" if lag.disk_step is None else f"the newest is step {lag.disk_step}"
    why = f" (writing failed: {lag.error})" if lag.error else ""
    console.print(
        f"checkpoint on disk is {lag.steps} steps behind: {disk}, memory reached step "
        f"{lag.memory_step}{why}; checkpoints: {report.checkpoint_dir}; exit code "
        f"{report.exit_code}", style="bold red", markup=False, highlight=False, soft_wrap=True)
