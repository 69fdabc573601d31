"""How a worker process comes to be: its attempt directory, its environment, its output pumps,
the standby process it is forked from, and the device it gets.

A rank runs on the device of its local rank until it is moved off a failed one (strategy
recover, or a job-level restart after its device was isolated): it then gets one of the spare
devices, numbered after the job's own, and is forked from the spare standby process, which
stands for the spare node. The device is given to the worker as ``TRAINGUARD_DEVICE`` (the job's
device number) and through the device visibility variables (:mod:`.device_visibility`), so that
a script that indexes devices by ``LOCAL_RANK`` uses it.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping

from trainguard import clock as clocks
from trainguard import owner_only
from trainguard.agent import device_visibility, standby_client, worker_output, workers
from trainguard.agent.settings import AgentSettings
from trainguard.faults import process
from trainguard.ipc import messages

__all__ = ["WorkerLauncher"]


class WorkerLauncher:
    def __init__(self, settings: AgentSettings, *, base_env: Mapping[str, str],
                 clock: clocks.Clock, startup_timeout: float,
                 on_exit: Callable[[int, int], None], on_lost: Callable[[str], None],
                 log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.settings = settings
        self._base_env = dict(base_env)
        self.profiling_dir = settings.profiling_root / (
            self._base_env.get("MINDX_TASK_ID") or settings.run_id)
        """The task's folder of profiling records: the job's own task id (``MINDX_TASK_ID``,
        as the original's), else the job's id."""
        self.profiling = settings.profiling_switch
        """The lightweight-profiling marks the ranks record: a new process's from its start."""
        self._clock = clock
        self._startup_timeout = startup_timeout
        self._on_exit = on_exit
        self._on_lost = on_lost
        self._log = log
        self._standby: standby_client.StandbyProcess | None = None
        self._spare_standby: standby_client.StandbyProcess | None = None
        offset = settings.ranks.start
        self._devices = {rank: rank - offset for rank in settings.ranks}
        self._retired: list[int] = []  # devices ranks were moved off
        self._spares = iter(range(settings.nproc_per_node,
                                  settings.nproc_per_node + settings.spare_devices))
        self.spares_left = settings.spare_devices
        self.agent_address = ""
        self._tracebacks = settings.run_dir / "tracebacks"

    def take(self, settings: AgentSettings) -> None:
        """Run the ranks of ``settings`` from now on (a spare host taking a lost host's):
        each on the device of its local rank."""
        self.settings = settings
        offset = settings.ranks.start
        self._devices = {rank: rank - offset for rank in settings.ranks}

    async def start(self, agent_address: str) -> None:
        """Raises: standby_client.StandbyError."""
        self.agent_address = agent_address
        # Tracebacks are printed once per job (trainguard.tracebacks): forget an earlier run's.
        shutil.rmtree(self._tracebacks, ignore_errors=True)
        await self._ensure_standby()
        if self.settings.spare_devices:
            self._spare_standby = await self._start_standby("spare standby")

    async def _ensure_standby(self) -> standby_client.StandbyProcess:
        if self._standby is None or not self._standby.alive:
            self._standby = await self._start_standby("standby")
        return self._standby

    async def _start_standby(self, what: str) -> standby_client.StandbyProcess:
        standby = standby_client.StandbyProcess(
            preload=self.settings.preload, env=self._base_env, on_exit=self._on_exit,
            on_lost=self._on_lost)
        await standby.start(timeout=self._startup_timeout)
        self._log.info("%s process %s ready (preloaded: %s)", what, standby.pid,
                       ", ".join(standby.preloaded) or "nothing")
        return standby

    def move_to_spare(self, rank: int) -> None:
        """From now on ``rank`` runs on a spare device.

        Raises:
            process.RecoveryError: no spare device is left.
        """
        device = next(self._spares, None)
        if device is None:
            raise process.RecoveryError(f"no spare device left for rank {rank}")
        self._retired.append(self._devices[rank])
        self._devices[rank] = device
        self.spares_left -= 1

    def prepare(self, generation: workers.Generation, rank: int) -> workers.WorkerState:
        settings = self.settings
        local_rank = rank - settings.ranks.start
        attempt = settings.run_dir / f"attempt_{generation.number}" / str(rank)
        owner_only.make_dir(attempt)
        error_file = attempt / "error.json"
        error_file.unlink(missing_ok=True)

        def pump(stream: worker_output.Std) -> worker_output.StreamPump:
            return worker_output.StreamPump.for_worker(
                settings.output, stream=stream, rank=rank, local_rank=local_rank,
                role=settings.role, run_id=settings.run_id, generation=generation.number)

        return workers.WorkerState(
            rank=rank, local_rank=local_rank, error_file=error_file,
            stdout=pump(worker_output.Std.OUT), stderr=pump(worker_output.Std.ERR),
            started_at=self._clock.monotonic(), device=self._devices[rank])

    async def spawn(self, generation: workers.Generation, ranks: Iterable[int]) -> None:
        """Start the processes of ``ranks`` (prepared in ``generation``), a rank on a spare
        device from the spare standby process. Workers that cannot be started (the standby
        process is gone and cannot be restarted) make the generation's outcome fatal rather
        than raise."""
        ranks = list(ranks)
        try:
            for rank in ranks:
                on_spare = self._devices[rank] >= self.settings.nproc_per_node
                standby = self._spare_standby if on_spare else await self._ensure_standby()
                if standby is None:
                    raise standby_client.StandbyError("the job has no spare standby process")
                await self._spawn(standby, generation, generation.workers[rank],
                                  starting=len(ranks))
        except (standby_client.StandbyError, ValueError) as error:  # ValueError: visibility
            generation.settle(process.GenerationOutcome(
                process.OutcomeKind.FATAL, detail=f"workers could not be started: {error}"))

    async def _spawn(self, standby: standby_client.StandbyProcess,
                     generation: workers.Generation, worker: workers.WorkerState, *,
                     starting: int) -> None:
        """Start ``worker``'s process, one of ``starting`` that this host starts together
        (every rank at a generation's start, the replaced ones in a recovery in place): its
        session reads its restore ahead only where that leaves it a core (session.py)."""
        settings = self.settings
        env = workers.worker_environment(
            self._base_env, rank=worker.rank, local_rank=worker.local_rank,
            world_size=settings.world_size, local_world_size=settings.nproc_per_node,
            node_rank=settings.node_rank, nnodes=settings.nnodes,
            role=settings.role, master_addr=generation.master_addr,
            master_port=generation.master_port, restart_count=generation.restart_count,
            max_restarts=settings.max_restarts, run_id=settings.run_id,
            error_file=worker.error_file, agent_socket=self.agent_address,
            generation=generation.number)
        env["TRAINGUARD_DEVICE"] = str(self._devices[worker.rank])
        env["TRAINGUARD_TRACEBACKS"] = str(self._tracebacks)
        env[messages.STARTING_VARIABLE] = str(starting)
        # The session's replicas are the agent's: a script's own dp_size must agree.
        env["TRAINGUARD_DP_SIZE"] = str(settings.dp_size or settings.world_size)
        env["TRAINGUARD_PROFILING_DIR"] = str(self.profiling_dir.parent)
        env["MINDX_TASK_ID"] = self.profiling_dir.name
        worker.profiling = self.profiling
        env["TRAINGUARD_PROFILING"] = self.profiling.to_json()
        env.update(self.visibility())
        worker.secret = secrets.token_hex(16)
        env[messages.WORKER_SECRET_VARIABLE] = worker.secret
        launch = standby_client.WorkerLaunch(
            mode=settings.program.mode, target=settings.program.target,
            args=settings.program.args, env=env, cwd=os.getcwd())
        stdout = await worker_output.open_pump(worker.stdout)
        stderr = await worker_output.open_pump(worker.stderr)
        try:
            worker.pid = await standby.spawn(launch, stdout=stdout, stderr=stderr)
        finally:
            os.close(stdout)
            os.close(stderr)
        worker.started_at = self._clock.monotonic()

    def visibility(self) -> dict[str, str]:
        """The device visibility variables every worker gets for the current placement.

        Raises:
            ValueError: the user's visibility list is shorter than the job's devices.
        """
        settings = self.settings
        return device_visibility.visible_devices(
            self._base_env, placement=[self._devices[r] for r in settings.ranks],
            devices=settings.nproc_per_node + settings.spare_devices, retired=self._retired)

    async def close(self) -> None:
        for standby in (self._standby, self._spare_standby):
            if standby is not None:
                await standby.close()


