"""The workers of one generation: their environment, their state as observed, their outcome.

A *generation* is one start of every rank; a job-level restart starts the next generation with a
fresh rendezvous port, so no process of an old generation can ever reach the new one's store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from trainguard.agent import checkpoint_memory, worker_output
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import profiling_switch
from trainguard.proto import versioned, worker_codec

__all__ = [
    "Generation",
    "ProgramSpec",
    "WorkerState",
    "error_excerpt",
    "worker_environment",
]


@dataclasses.dataclass(frozen=True)
class ProgramSpec:
    """The training program: a script path, a module (``-m``) or a program (``--no-python``)."""

    mode: str
    target: str
    args: tuple[str, ...] = ()


def worker_environment(
    base: Mapping[str, str],
    *,
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    node_rank: int,
    nnodes: int,
    role: str,
    master_addr: str,
    master_port: int,
    restart_count: int,
    max_restarts: int,
    run_id: str,
    error_file: Path,
    agent_socket: str,
    generation: int,
) -> dict[str, str]:
    """The environment torchrun gives a worker, plus how to reach its agent."""
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": role,
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "WORLD_SIZE": str(world_size),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # the agent hosts the store: rendezvous_stores
        "TORCHELASTIC_ERROR_FILE": str(error_file),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "TRAINGUARD_AGENT_SOCKET": agent_socket,
        "TRAINGUARD_GENERATION": str(generation),
    })
    return env


def error_excerpt(error_file: Path, stderr_tail: str) -> str:
    """The worker's error: from its torchrun error file when it wrote one, else its stderr."""
    try:
        body = json.loads(error_file.read_text())
    except (OSError, ValueError):
        return stderr_tail
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, dict):
        text = str(message.get("message", ""))
        callstack = str(message.get("extraInfo", {}).get("py_callstack", ""))
        lines = callstack.rstrip("\n").splitlines()[-12:]
        return "\n".join([*lines, text] if text not in lines[-1:] else lines)
    return str(message) if message is not None else stderr_tail


@dataclasses.dataclass
class WorkerState:
    rank: int
    local_rank: int
    error_file: Path
    stdout: worker_output.StreamPump
    stderr: worker_output.StreamPump
    started_at: float
    pid: int | None = None
    returncode: int | None = None
    exited_at: float | None = None
    stopping: bool = False  # the agent ended it: its exit is not a fault
    profiling: profiling_switch.ProfilingSwitch = dataclasses.field(
        default_factory=profiling_switch.ProfilingSwitch)  # what its environment switched on
    link: asyncio.StreamWriter | None = None
    disconnected: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    begun_step: int | None = None
    completed_step: int | None = None
    committed_step: int | None = None  # the step of its newest snapshot (the step to resume at)
    injected: messages.FaultInjected | None = None
    finished_at: float | None = None  # its session closed: the work is done
    ended_after_finishing: bool = False  # it hung on its way out and the agent ended it
    in_process: bool = False  # it trains under Session.run: it can leave and rejoin generations
    left: messages.LeftGeneration | None = None  # it left the generation and awaits orders
    device: int = 0  # the device it runs on (TRAINGUARD_DEVICE)
    secret: str = dataclasses.field(default="", repr=False)  # its process's Hello.secret

    def carry_over(self) -> None:
        """The process joins the next generation: forget what belonged to the last one."""
        self.begun_step = self.completed_step = None
        self.injected = None
        self.left = None
        self.stopping = False

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 or self.ended_after_finishing

    @property
    def alive(self) -> bool:
        return self.pid is not None and self.returncode is None

    def excerpt(self) -> str:
        if self.left is not None and self.left.error:
            return self.left.error
        return error_excerpt(self.error_file, self.stderr.tail())

    def fault(self, kind: process.ProcessFaultKind, *, detected_at: float,
              detail: str = "") -> process.ProcessFault:
        """This worker's fault as observed; an injected one carries when it struck."""
        injected = self.injected
        return process.ProcessFault(
            rank=self.rank, pid=self.pid or 0, kind=kind, detected_at=detected_at,
            returncode=self.returncode,
            last_step=injected.step if injected else self.begun_step,
            occurred_at=injected.time if injected else None,
            injected=str(injected.kind) if injected else None, detail=detail)

    def send(self, message: messages.Message) -> bool:
        """Queue a message to the worker's session; False when it has none."""
        if self.link is None or self.link.is_closing():
            return False
        self.link.write(versioned.frame(worker_codec.encode(message)))
        return True


class Generation:
    def __init__(
        self,
        *,
        number: int,
        restart_count: int,
        master_port: int,
        started_at: float,
        restore: checkpoint_memory.RestoreChoice,
        plan_seconds: float = 0.0,
        kept: int = 0,
        master_addr: str = "127.0.0.1",
    ) -> None:
        self.number = number
        self.master_addr = master_addr  # the host serving this generation's rendezvous store
        self.kept = kept  # processes carried over from the previous generation
        self.plan_seconds = plan_seconds
        self.restart_count = restart_count
        self.master_port = master_port
        self.started_at = started_at
        self.restore = restore
        self.workers: dict[int, WorkerState] = {}
        loop = asyncio.get_running_loop()
        self.outcome: asyncio.Future[process.GenerationOutcome] = loop.create_future()
        self.all_stepping: asyncio.Future[float] = loop.create_future()
        self._first_begin: dict[int, float] = {}
        self._exited = asyncio.Event()

    def settle(self, outcome: process.GenerationOutcome) -> None:
        """The first outcome wins; later ones (the other ranks' exits) are only observations."""
        if not self.outcome.done():
            self.outcome.set_result(outcome)

    def begun(self, rank: int, at: float) -> None:
        self._first_begin.setdefault(rank, at)
        if len(self._first_begin) == len(self.workers) and not self.all_stepping.done():
            self.all_stepping.set_result(max(self._first_begin.values()))

    def by_pid(self, pid: int) -> WorkerState | None:
        return next((w for w in self.workers.values() if w.pid == pid), None)

    def exited(self) -> None:
        self._exited.set()

    async def wait_all_exited(self, timeout: float) -> bool:
        """True once no worker is alive; False if ``timeout`` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(worker.alive for worker in self.workers.values()):
            self._exited.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._exited.wait(), remaining)
            except TimeoutError:
                return False
        return True

    @property
    def completed_step(self) -> int | None:
        """The highest step any rank completed in this generation."""
        steps = [w.completed_step for w in self.workers.values() if w.completed_step is not None]
        return max(steps, default=None)
