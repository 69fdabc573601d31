"""``trainguard demo`` (what ``make run`` runs): the main job, with faults, then the proof.

A 4-rank DDP job on CPU gets a crash (SIGKILL), a simulated device memory error, a hang
(SIGSTOP), the same memory error again on the same device, and a simulated device fault,
injected at fixed steps; trainguard detects each and recovers it live at the finest level that
works: the crashed and the hung rank get a new process while the others keep theirs
(recover-in-place), the first memory error is retried in the step by every process (retry). The
second one within a day raises the device to ManuallySeparateNPU (the original's default
FaultFrequency rule: twice in 24 h), so its rank moves to a spare device with its state from a
replica (recover), as does the faulty device's. Its report (``trainguard report``) is written
into its run directory. The same job then runs again without faults, and the two runs' final
parameters are compared bit for bit. Last, the job runs across three local hosts (two with two
ranks each, one spare) and one host is killed whole (:mod:`.demo_hosts`); its final parameters
must be the same again.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trainguard import launcher
from trainguard.agent import (
    checkpoint_memory,
    fault_injection,
    node_agent,
    worker_output,
    workers,
)
from trainguard.cli import console as console_output
from trainguard.cli import demo_hosts, report_command
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.controller import policy
from trainguard.ipc import messages
from trainguard.report import api as report_api

__all__ = ["demo"]

_JOB = "trainguard.demo.ddp_job"


def _settings(*, run_root: Path, run_id: str, nproc: int, steps: int, width: int,
              faults: tuple[fault_injection.PlannedFault, ...]) -> launcher.RunSettings:
    run_dir = run_root / run_id
    program = workers.ProgramSpec("module", _JOB, (
        "--steps", str(steps), "--width", str(width), "--batch", "128",
        "--output", str(run_dir / "final-parameters.sha256")))
    output = worker_output.OutputSettings(redirects=worker_output.Std.ALL,
                                          log_dir=run_dir / "logs")
    return launcher.RunSettings(
        agent=node_agent.AgentSettings(
            nproc_per_node=nproc, program=program, run_id=run_id, run_dir=run_dir,
            max_restarts=len(faults) + 2, output=output, fault_plan=faults, spare_devices=2),
        checkpoint=checkpoint_memory.CheckpointSettings(persist_interval=10.0),
        recovery=policy.RecoverySettings(max_restarts=len(faults) + 2),
        progress_interval=5.0)


def _digest(report: launcher.RunReport) -> str | None:
    path = report.run_dir / "final-parameters.sha256"
    return path.read_text().strip() if path.exists() else None


def _write_report(run_dir: Path, console: Console) -> None:
    """The faulted run's report; a missing matplotlib is said, not fatal: the demo goes on."""
    try:
        page, picture = report_command.write_report(run_dir)
    except report_api.ReportError as error:
        console.print(f"[yellow]no report: {error}[/yellow]")
        return
    console.print(f"report of this run: {page} (timeline: {picture})")


def demo(
    *,
    steps: Annotated[int, typer.Option(help="Training steps.")] = 500,
    nproc: Annotated[int, typer.Option("--nproc-per-node", help="Ranks.")] = 4,
    width: Annotated[int, typer.Option(
        help="Width of the MLP; 768 makes a step take about 0.1 s on two cores.")] = 768,
    run_root: Annotated[Path, typer.Option(envvar="TRAINGUARD_RUN_ROOT",
                                           help="Where run directories go.")] = DEFAULT_RUN_ROOT,
    reference: Annotated[bool, typer.Option(
        help="Run the job again without faults and compare the final parameters.")] = True,
    hosts: Annotated[bool, typer.Option(
        help="Then run it across 3 local hosts (2 + 1 spare), kill one host whole, and "
             "compare again (with --reference and --nproc-per-node 4).")] = True,
) -> None:
    """The main job: faults injected into a DDP job and recovered live, then a bitwise check."""
    console = Console(stderr=True, highlight=False)
    if steps < 50 or nproc < 2:
        raise typer.BadParameter("the demo needs --steps >= 50 and --nproc-per-node >= 2")
    faults = (
        fault_injection.PlannedFault(messages.InjectionKind.CRASH, 1, steps // 6),
        fault_injection.PlannedFault(messages.InjectionKind.MEMORY_ERROR, 0, steps * 2 // 6),
        fault_injection.PlannedFault(messages.InjectionKind.HANG, nproc - 2, steps * 3 // 6),
        fault_injection.PlannedFault(messages.InjectionKind.MEMORY_ERROR, 0, steps * 4 // 6),
        fault_injection.PlannedFault(messages.InjectionKind.DEVICE_ERROR, nproc - 1,
                                     steps * 5 // 6),
    )
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    console.rule("[bold]trainguard demo")
    console.print(f"A {nproc}-rank DDP job on CPU (gloo), {steps} steps, a snapshot in memory "
                  "after every step. Faults to inject:")
    for fault in faults:
        console.print(f"  - {fault.kind} in rank {fault.rank} at step {fault.step}")
    faulty = asyncio.run(launcher.run(
        _settings(run_root=run_root, run_id=f"demo-{stamp}", nproc=nproc, steps=steps,
                  width=width, faults=faults),
        observer=console_output.ConsoleObserver(console)))
    console_output.render_summary(faulty, console)
    _write_report(faulty.run_dir, console)
    if faulty.result.exit_code != 0:
        raise typer.Exit(faulty.result.exit_code)
    if not reference:
        return
    console.rule("[bold]the same job without faults")
    clean = asyncio.run(launcher.run(
        _settings(run_root=run_root, run_id=f"demo-{stamp}-reference", nproc=nproc,
                  steps=steps, width=width, faults=()),
        observer=console_output.ConsoleObserver(console)))
    with_faults, without = _digest(faulty), _digest(clean)
    console.print(f"final parameters with {len(faults)} faults: sha256 {with_faults}")
    console.print(f"final parameters without faults:  sha256 {without}")
    if with_faults is None or with_faults != without:
        console.print("[bold red]MISMATCH: the recovered run did not end where the "
                      "uninterrupted one did[/bold red]")
        raise typer.Exit(1)
    console.print("[bold green]bitwise identical: every fault was recovered without changing "
                  "the result[/bold green]")
    if not hosts or nproc != 4:
        return
    console.rule("[bold]the same job across 3 hosts, one lost whole")
    across = asyncio.run(demo_hosts.run(run_root=run_root, job=f"demo-{stamp}-hosts",
                                        steps=steps, width=width, console=console))
    console.print(f"final parameters across hosts, a host lost: sha256 {across}")
    if across != without:
        console.print("[bold red]MISMATCH: the job across hosts did not end where the "
                      "uninterrupted one did[/bold red]")
        raise typer.Exit(1)
    console.print("[bold green]bitwise identical: the lost host's ranks went on from their "
                  "replicas' memory on the spare host[/bold green]")
