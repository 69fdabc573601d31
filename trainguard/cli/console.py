"""What ``trainguard run`` shows: where things are, each event as it happens, and a summary."""

from __future__ import annotations

import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from trainguard.agent import step_statistics
from trainguard.faults import events
from trainguard.launcher import RunReport

__all__ = ["ConsoleObserver", "render_summary"]

_STYLES = {
    events.FaultDetected.KIND: "bold red",
    events.DecisionMade.KIND: "yellow",
    events.RecoveryCompleted.KIND: "bold green",
    events.CheckpointRejected.KIND: "bold yellow",
    events.JobFinished.KIND: "bold",
}


class ConsoleObserver:
    """Prints to stderr, so the workers' stdout stays theirs."""

    def __init__(self, console: Console | None = None, *, verbose_checkpoints: bool = False
                 ) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self._started = time.monotonic()
        self._verbose_checkpoints = verbose_checkpoints

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
        if isinstance(event, events.StepProgress | events.RunMeasured):
            return  # shown by progress() and by the summary
        summary = event.summary().replace("[", "\\[")
        self._line(summary, _STYLES.get(event.KIND, ""))
        if isinstance(event, events.FaultDetected) and event.error_excerpt and (
                event.fault_kind in ("exited", "raised")):
            last = event.error_excerpt.strip().splitlines()[-1].replace("[", "\\[")
            self._line(f"  error: {last}", "red")

    def progress(self, progress: step_statistics.Progress) -> None:
        if progress.step is None:
            return
        rate = f", {progress.steps_per_second:.1f} steps/s" if progress.steps_per_second else ""
        self._line(f"[dim]step {progress.step}{rate} (generation {progress.generation})[/dim]")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render_summary(report: RunReport, console: Console) -> None:
    result = report.result
    if result.faults:
        table = Table(title="Faults and recoveries", title_justify="left",
                      caption="*: injected. in-place: recover-in-place. detected: fault -> "
                              "seen; recovered: fault -> every rank stepping again; lost: "
                              "completed steps redone; +peer: a rank's state came from a "
                              "data-parallel replica",
                      caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      padding=(0, 1), collapse_padding=True, show_edge=False)
        for column in ("rank", "fault", "step", "strategy", "detected", "recovered", "lost",
                       "restored"):
            table.add_column(column, justify="left" if column in ("fault", "strategy")
                             else "right", no_wrap=True)
        for record in result.faults:
            fault, recovery = record.fault, record.recovery
            what = f"{fault.injected}*" if fault.injected else str(fault.kind)
            table.add_row(
                str(fault.rank), what, "-" if fault.last_step is None else str(fault.last_step),
                str(recovery.strategy if recovery else record.decision.strategy).replace(
                    "recover-in-place", "in-place"),
                _seconds(fault.detect_seconds),
                _seconds(recovery.recover_seconds) if recovery else "no",
                str(recovery.steps_lost) if recovery else "-",
                f"{recovery.restore_source.replace(' and peers', '+peer')}@"
                f"{recovery.restore_step}" if recovery else "-")
        console.print(table)
    totals = Table(title="Job", title_justify="left", show_header=False)
    totals.add_column("what")
    totals.add_column("value", justify="right")
    totals.add_row("outcome", f"{result.outcome}: {result.reason}")
    totals.add_row("steps completed", str(result.resume_step))
    totals.add_row("restarts used", str(result.restarts_used))
    totals.add_row("wall time", _seconds(result.wall_seconds))
    totals.add_row("step time (median)", _seconds(report.step_seconds))
    totals.add_row("snapshot stall (median)", _seconds(report.snapshot_seconds))
    if report.goodput is not None:
        totals.add_row("goodput", f"{report.goodput:.1%}")
    totals.add_row("events", f"trainguard events --run-dir {report.run_dir}")
    console.print(totals)
    if result.errors:
        console.print("[bold red]Worker errors (root cause first):[/bold red]")
        console.print(result.errors, markup=False, highlight=False)
