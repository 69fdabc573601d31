"""The node agent: starts each generation's workers, watches them, serves their requests.

It sees a worker exit the moment the standby process reaps it, a hang when a rank's heartbeat
deadline passes (:mod:`trainguard.detect.heartbeat`), and reports the first fault of a generation
as its outcome (:mod:`.attribution` says whose). What to do about it is the controller's
decision; the agent then carries it out: stop every worker and start the next generation, form
the next generation from the survivors and replacements (:meth:`NodeAgent.recover`), or stop
gracefully with a dying checkpoint. How a worker process is started is :mod:`.worker_launcher`'s.

Why one module past 500 lines: every method here reads or changes the one current generation
(its workers' states, its outcome future, the change event its waits wake on), from the
controller's commands and from the workers' messages alike, on one event loop. What could be
decided or done elsewhere already is (attribution, the launcher, the watchdog, fault injection,
checkpoint memory, the rendezvous stores); splitting the commands from the message handling would
hand that mutable generation across modules and make each side's invariants the other's. The
controller reaches it only through :mod:`.controller_link` (commands with ids, reports). Across
hosts it grew by the commands a host needs (serve a store, leave, take a lost host's ranks,
persist the step ordered) and took restore steps and donors from the controller instead of
choosing them. The workers' message handling (``worker_message``, about 130 lines) stays: each
message changes the current generation's workers and wakes the waits above, through the same
detector, statistics, attribution and checkpoint memory; a handler of its own would take all of
them, the agent in all but name. Its wire format is already apart (:mod:`trainguard.proto.
worker_codec`). Asking the ranks to write a lost rank's share again (``_complete_shares``) is
here too: it is a step of letting the generation's ranks finish their snapshots, and its
answers arrive among their messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import itertools
import json
import logging
import math
import os
import signal
import socket
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from trainguard import clock as clocks
from trainguard import owner_only
from trainguard.agent import (
    attribution,
    checkpoint_memory,
    fault_injection,
    ipc_server,
    rendezvous_stores,
    signal_delivery,
    snapshot_slots,
    step_statistics,
    watchdog,
    worker_launcher,
    workers,
)
from trainguard.agent.settings import AgentSettings
from trainguard.detect import heartbeat
from trainguard.faults import process
from trainguard.faults.device.device_events import Assertion
from trainguard.ipc import checkpoint_layout, messages
from trainguard.job import events, profiling_switch, replicas

__all__ = ["AGENT_FILE", "AgentSettings", "NodeAgent"]

logger = logging.getLogger(__name__)

AGENT_FILE = "agent.json"
_SNAPSHOT_POLL_SECONDS = 0.02  # how often the slot headers are read while snapshots finish
LEFT_GRACE = 2.0
"""Seconds a graceful stop still waits once a rank left the generation with an error (its
dying checkpoint may be under way), before the workers are ended."""


def free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


STACKS_WAIT = 0.5
"""The most seconds a stuck worker has to write its stacks before it is ended: it is ended as
soon as it is seen to have written them (:mod:`.signal_delivery`), else after this."""


class NodeAgent:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        detector: heartbeat.HangDetector,
        checkpoints: checkpoint_memory.CheckpointMemory,
        clock: clocks.Clock,
        base_env: Mapping[str, str],
        on_injection: Callable[[int, messages.InjectionKind, int | None], None],
        record: Callable[[events.Event], object],
    ) -> None:
        self.settings = settings
        self._record = record
        self._log = logging.LoggerAdapter(logger, {"job": settings.run_id,
                                                   "node": socket.gethostname()})
        self._detector = detector
        self._checkpoints = checkpoints
        self._clock = clock
        self._ipc = ipc_server.IpcServer(self)
        self._stores = rendezvous_stores.RendezvousStores(address=settings.master_addr,
                                                          env=base_env)
        self._launcher = worker_launcher.WorkerLauncher(
            settings, base_env=base_env, clock=clock,
            startup_timeout=detector.settings.startup_timeout, on_exit=self._on_exit,
            on_lost=self._on_standby_lost, log=self._log)
        self._attribution = attribution.FaultAttribution(clock)
        self.layout = replicas.ReplicaLayout(settings.world_size,
                                             settings.dp_size or settings.world_size)
        self.replicas_differ = ""
        """Set once the ranks found replicas of the layout holding different state (its
        detail): from then on no replica stands in for another."""
        self._generation: workers.Generation | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._injector = fault_injection.FaultInjector(
            settings.fault_plan, clock=clock, on_injection=on_injection)
        self.device_injector: Callable[[int, str, Assertion], str] | None = None
        """Gives a simulated device a fault event (``trainguard fault inject --device``);
        raises fault_injection.InjectionError. None: the host's devices are not watched."""
        self._watchdog = watchdog.Watchdog(
            detector=detector, clock=clock, interval=settings.monitor_interval,
            end=lambda worker: self._signal(worker, signal.SIGKILL), log=self._log)
        self._changed = asyncio.Event()  # a worker committed a snapshot or exited
        self._request_ids = itertools.count(1)
        self._completions: dict[tuple[int, int], asyncio.Future[messages.ControlReply]] = {}
        self.statistics = step_statistics.StepStatistics()
        self.snapshot_every = settings.snapshot_interval or 1  # auto starts at every step

    @property
    def address(self) -> str:
        return self._ipc.address

    @property
    def generation(self) -> workers.Generation | None:
        return self._generation

    @property
    def spares_left(self) -> int:
        return self._launcher.spares_left

    async def start(self) -> None:
        await self._ipc.start()
        with os.fdopen(owner_only.create(self.settings.run_dir / AGENT_FILE), "w") as agent_file:
            agent_file.write(json.dumps({"pid": os.getpid(), "address": self.address,
                                         "run_id": self.settings.run_id}))
        await asyncio.gather(self._launcher.start(self.address), self._stores.start())
        self._checkpoints.start()

    # --- generations -------------------------------------------------------------------------

    def take_ranks(self, node_rank: int) -> None:
        """A spare host takes the ranks of node ``node_rank`` (a lost host's); its next
        generation starts them.

        Raises:
            process.RecoveryError: this host is no spare, or cannot write the node's
                checkpoints.
        """
        if not self.settings.spare or self._generation is not None:
            raise process.RecoveryError(f"host of node {self.settings.node_rank} is no spare: "
                                        f"it cannot take node {node_rank}'s ranks")
        settings = dataclasses.replace(self.settings, node_rank=node_rank, spare=False)
        try:
            self._checkpoints.take(settings.ranks, node=node_rank)
        except checkpoint_layout.CheckpointError as error:
            raise process.RecoveryError(f"this spare host cannot take node {node_rank}'s "
                                        f"ranks: {error}") from error
        self.settings = settings
        self._launcher.take(self.settings)
        self._log.warning("this spare host takes node %d's ranks %s", node_rank,
                          list(self.settings.ranks))

    def held_steps(self, rank: int) -> list[int]:
        """Every step this host's memory holds of ``rank``, newest first."""
        return self._checkpoints.held_steps(rank)

    async def host_store(self) -> tuple[str, int]:
        """Serve the rendezvous store of a generation about to start on several hosts, on a
        fresh port of this host; returns its address and port.

        Raises:
            rendezvous_stores.RendezvousError: it cannot be served.
        """
        port = free_port(self.settings.master_addr)
        await self._stores.host(port)
        return self.settings.master_addr, port

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = (),
                               rendezvous: tuple[str, int] | None = None,
                               restore_step: int | None = None,
                               peers: Mapping[int, int] | None = None) -> workers.Generation:
        """Plan the restore, then start every rank, the ranks in ``move`` on spare devices
        (their devices are out of use).

        ``rendezvous``: the store another host serves for this generation (several hosts;
        None: this agent serves one). ``restore_step``: the step every host restores (chosen
        by the controller; None: the newest this host can); ``peers``: rank -> the replica on
        another host that sends it that step.

        Workers that cannot be started (the standby process is gone and cannot be restarted)
        make the generation's outcome fatal rather than raise.

        Raises:
            process.RecoveryError: fewer spare devices are left than ranks to move, or
                ``restore_step`` cannot be restored here (nothing has been started).
        """
        if len(move) > self.spares_left:
            raise process.RecoveryError(
                f"{self.spares_left} spare devices left for {len(move)} ranks to move")
        for rank in sorted(move):
            self._launcher.move_to_spare(rank)
        restore, plan_seconds = await self._plan_restore(lost=(), step=restore_step, peers=peers)
        if self._generation is not None and restore.source is messages.RestoreSource.MEMORY:
            redone = checkpoint_memory.redone_steps(
                {w.rank: w.committed_step for w in self._generation.workers.values()}, restore.step)
            if redone:
                self._log.warning("generation %d: %s", number, redone)
        settings = self.settings
        address, port = rendezvous or (settings.master_addr, (
            settings.master_port if number == 0 and settings.master_port
            else free_port(settings.master_addr)))
        generation = workers.Generation(number=number, restart_count=restart_count,
                                        master_addr=address, master_port=port,
                                        started_at=self._clock.monotonic(),
                                        restore=restore, plan_seconds=plan_seconds)
        await self._enter(generation, host=rendezvous is None)
        for rank in settings.ranks:
            generation.workers[rank] = self._launcher.prepare(generation, rank)
        await self._spawn(generation, settings.ranks)
        return generation

    async def _plan_restore(self, *, lost: Collection[int], step: int | None,
                            peers: Mapping[int, int] | None
                            ) -> tuple[checkpoint_memory.RestoreChoice, float]:
        """The restore plan of the next generation, and the seconds it took. A replica on this
        host stands in for a rank of this host without its own snapshot of the step: the rank
        reads it from memory itself (a new process may, before any process group exists), in
        tens of milliseconds, where sending it over the new process group takes about 0.5 s
        at 75 MB (gloo on loopback). A replica on another host sends it."""
        planning = self._clock.monotonic()
        if peers and self.replicas_differ:
            raise process.RecoveryError(
                f"no replica can send a rank its state: the replicas differ "
                f"({self.replicas_differ})")
        restore = (await self._checkpoints.plan_restore(
            lost=lost, layout=self.trusted_layout, step=step, peers=peers)
        ).read_locally(self.settings.ranks)
        return restore, self._clock.monotonic() - planning

    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        """The replica layout while a replica may stand in for another; None once the ranks
        found the replicas different."""
        return None if self.replicas_differ else self.layout

    async def _enter(self, generation: workers.Generation, *, host: bool) -> None:
        """Make ``generation`` the current one, watched from now on; ``host``: this agent
        serves its rendezvous store (else another host does, or this one already)."""
        await self._stop_monitor()
        self._generation = generation
        try:
            if host:
                await self._stores.host(generation.master_port)
            await self._stores.keep_only(generation.master_port)
        except rendezvous_stores.RendezvousError as error:
            generation.settle(process.GenerationOutcome(process.OutcomeKind.FATAL,
                                                        detail=str(error)))
        self.statistics.new_generation()
        self._monitor = asyncio.create_task(self._watchdog.watch(generation), name="watchdog")

    async def _spawn(self, generation: workers.Generation, ranks: Collection[int]) -> None:
        await self._launcher.spawn(generation, ranks)
        for rank in ranks:
            worker = generation.workers[rank]
            if worker.pid is not None:
                self._detector.start(rank, at=worker.started_at)

    async def leave(self, *, replace: Collection[int]) -> None:
        """The first half of :meth:`recover`, which a job on several hosts does on every host
        before the next generation's store exists: end the processes of ``replace`` (and any
        that died), and have every survivor leave the current generation (cut its
        communicator and wait). A survivor that does not leave in time is ended too (after
        writing its threads' stacks): :meth:`recover` restarts it on its own device from its
        own snapshots, as any process replaced in place, rather than the job restarting.

        Raises:
            process.RecoveryError: a survivor exited by itself meanwhile, or an ended process
                did not exit.
        """
        old = self._current()
        replace = set(replace) | {w.rank for w in old.workers.values() if not w.alive}
        survivors = [w for w in old.workers.values() if w.rank not in replace]
        for worker in old.workers.values():
            if worker.rank in replace:
                self._signal(worker, signal.SIGKILL)
            elif worker.left is None:
                worker.send(messages.Abort(old.number))
        await self._await_leaving(old, survivors)

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool, rendezvous: tuple[str, int] | None = None,
                      restore_step: int | None = None,
                      peers: Mapping[int, int] | None = None) -> workers.Generation:
        """Form generation ``number`` from the surviving processes and new ones for
        ``replace`` (on spare devices when ``to_spares``: their memory is then not used).

        The survivors are told to leave the current generation (:meth:`leave`; at once if they
        have already); then every rank is told (or started) to join the new one on a fresh
        port, or at ``rendezvous`` when another host serves its store. ``restore_step`` and
        ``peers``: as for :meth:`start_generation`.

        Raises:
            process.RecoveryError: a survivor did not leave in time, or is gone; or no saved
                state is left to restore while the survivors' state is past step 0 (they
                would keep it beside new ranks starting afresh); or ``restore_step`` cannot be
                restored here.
        """
        old = self._current()
        moved = set(replace) if to_spares else set()
        if self.spares_left < len(moved):
            raise process.RecoveryError(
                f"{self.spares_left} spare devices left for {len(moved)} ranks")
        await self.leave(replace=replace)
        # Restarted here as well as ``replace``: any that died or were ended while leaving (the
        # ranks of this host another host's leave ended, too). Only ``moved`` loses its memory.
        restart = set(replace) | {w.rank for w in old.workers.values() if not w.alive}
        survivors = [w for w in old.workers.values() if w.rank not in restart]
        restore, plan_seconds = await self._plan_restore(lost=moved, step=restore_step,
                                                         peers=peers)
        if restore.source is messages.RestoreSource.NONE and survivors and (
                old.completed_step is not None):
            raise process.RecoveryError(
                f"no saved state to resume from ({restore.note or 'none in memory or on disk'}),"
                f" and the kept processes are past step {old.completed_step}: every rank must "
                "start afresh")
        address, port = rendezvous or (self.settings.master_addr,
                                       free_port(self.settings.master_addr))
        generation = workers.Generation(
            number=number, restart_count=restart_count, master_addr=address, master_port=port,
            started_at=self._clock.monotonic(), restore=restore, plan_seconds=plan_seconds,
            kept=len(survivors))
        await self._enter(generation, host=rendezvous is None)
        now = self._clock.monotonic()
        for worker in survivors:
            worker.carry_over()
            generation.workers[worker.rank] = worker
            self._detector.start(worker.rank, at=now)
            worker.send(messages.Rejoin(number, generation.master_addr, generation.master_port,
                                         restart_count))
            worker.send(messages.SnapshotInterval(self.snapshot_every, restore.step))
        for rank in sorted(restart):
            if rank in moved:
                self._launcher.move_to_spare(rank)
            generation.workers[rank] = self._launcher.prepare(generation, rank)
        await self._spawn(generation, sorted(restart))
        return generation

    async def _await_leaving(self, generation: workers.Generation,
                             survivors: list[workers.WorkerState]) -> None:
        """Until every survivor has left ``generation`` and every other process has exited;
        survivors still in it after what they are doing may take are ended.

        Raises:
            process.RecoveryError: a survivor exited by itself meanwhile, or an ended process
                did not exit.
        """
        kept = list(survivors)

        def left() -> bool:
            return all(w.left is not None if w in kept else not w.alive
                       for w in generation.workers.values())

        # A survivor gets what it is doing may take, and never more than leave_timeout: gloo
        # can leave DDP waiting for an allreduce that neither ends nor fails once cut
        # (README, "How survivors leave a generation"), and the step's deadline gives up on
        # it sooner.
        timeout = min(self.settings.leave_timeout,
                      self._detector.leave_deadline(w.rank for w in survivors))
        await self._wait_changed(lambda: left() or any(not w.alive for w in kept), timeout)
        gone = [w.rank for w in kept if not w.alive]
        if gone:
            raise process.RecoveryError(
                f"rank {gone[0]} exited while the others were leaving the generation")
        stuck = [w for w in kept if w.left is None]
        if stuck:
            await self._dump_stacks(stuck)
            self._log.warning(
                "ranks %s did not leave generation %d within %.0f s (their threads' stacks are "
                "in their output): their processes are ended, to restart from their snapshots",
                [w.rank for w in stuck], generation.number, timeout)
            self._record(events.SurvivorsEnded(
                job=self.settings.run_id, generation=generation.number,
                ranks=[w.rank for w in stuck], waited_seconds=timeout))
            kept = [w for w in kept if w not in stuck]
            for worker in stuck:
                self._signal(worker, signal.SIGKILL)
            await self._wait_changed(left, self.settings.shutdown_timeout)
        if not left():
            raise process.RecoveryError(
                f"replaced processes did not exit within "
                f"{self.settings.shutdown_timeout if stuck else timeout:.0f} s")

    async def _dump_stacks(self, stuck: list[workers.WorkerState]) -> None:
        """Have workers under a session write where each of their threads is, to their
        output, so that whatever holds them is seen; returns once each has handled the signal
        (its stacks are written), or after :data:`STACKS_WAIT` where that cannot be seen."""
        pids = [worker.pid for worker in stuck
                if worker.alive and worker.in_process and worker.pid is not None]
        if pids and not await signal_delivery.signal_and_wait(pids, messages.STACKS_SIGNAL,
                                                              timeout=STACKS_WAIT):
            self._log.warning("not every stuck rank was seen to write its stacks within %.1f s",
                              STACKS_WAIT)

    async def _wait_changed(self, done: Callable[[], bool], timeout: float, *,
                            poll: float | None = None) -> None:
        """Until ``done()`` (checked whenever a worker commits a snapshot, leaves or exits,
        and every ``poll`` seconds when given), or ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done() and loop.time() < deadline:
            self._changed.clear()
            wait = deadline - loop.time() if poll is None else min(poll, deadline - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, wait))

    async def dump(self, *, failed: Collection[int]) -> int | None:
        """The dying checkpoint (R5): save the newest step the healthy replicas hold, the
        failed ranks' state from their replicas; returns its step."""
        return await self._checkpoints.dump(lost=failed, layout=self.trusted_layout)

    def _on_exit(self, pid: int, returncode: int) -> None:
        generation = self._generation
        worker = generation.by_pid(pid) if generation is not None else None
        if generation is None or worker is None:
            return
        worker.returncode = returncode
        worker.exited_at = self._clock.monotonic()
        self._detector.forget(worker.rank, at=worker.exited_at)
        generation.exited()
        self._changed.set()
        if worker.stopping and not worker.ended_after_finishing:
            return
        if worker.succeeded:
            if all(w.succeeded for w in generation.workers.values()):
                generation.settle(process.GenerationOutcome(process.OutcomeKind.SUCCEEDED))
            return
        self._attribution.exited(generation, worker)

    def _on_standby_lost(self, reason: str) -> None:
        self._log.error("%s; its workers died with it", reason)
        generation = self._generation
        if generation is None:
            return
        for worker in generation.workers.values():
            if worker.alive:
                self._on_exit(worker.pid or 0, -signal.SIGKILL)

    def _current(self) -> workers.Generation:
        if self._generation is None:
            raise RuntimeError("no generation has been started")
        return self._generation

    async def settle(self, *, timeout: float) -> None:
        """Wait until every worker has exited on its own, or ``timeout`` seconds."""
        await self._current().wait_all_exited(timeout)

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        """Let healthy ranks finish the snapshots the failed rank's loss would otherwise cost.

        A rank that fails right after its snapshot of step N+1 often finds the others still
        finishing step N, or copying their own snapshot of N+1 behind the next step
        (train/copy_behind.py); stopping them at once would leave N+1 incomplete and lose a
        step. So until ``timeout``: every healthy rank's snapshot in progress is finished, and
        every healthy rank holds ``step``, the newest step any rank holds (the controller finds
        it from every host's reports: :meth:`held_steps`). The slot headers decide, not
        the commit messages (a short snapshot's waits for the next mark; a killed rank's never
        comes); ranks blocked waiting for the failed one just wait.
        """
        generation = self._current()
        memory = self._checkpoints
        healthy = [w for w in generation.workers.values() if w.rank != failed_rank]
        target = step

        def caught_up() -> bool:  # a rank that left its generation commits nothing more
            return not any(
                w.alive and w.left is None and (
                    memory.writing(w.rank)
                    or (target is not None and (memory.newest_step(w.rank) or -1) < target))
                for w in healthy)

        started = self._clock.monotonic()
        await self._wait_changed(caught_up, timeout, poll=_SNAPSHOT_POLL_SECONDS)
        await self._complete_shares(healthy, failed_rank,
                                    timeout - (self._clock.monotonic() - started))

    async def _complete_shares(self, healthy: list[workers.WorkerState], failed_rank: int,
                               timeout: float) -> None:
        """With shares, the failed rank's run of the optimizers' tensors is in its own
        snapshot only (train/replica_shares.py): lost when it died before its snapshot of the
        newest step the others hold, and not counted when its rank moves to a spare or is saved
        from a replica. So its ring successor writes its newest snapshot again with that run,
        from its live state, which is still that snapshot's (CompleteShares). Every healthy rank
        under a session is asked, since the ring is the session's (its dp size); the successor
        answers "done", the others why not (all of them, when snapshots are whole)."""
        loop = asyncio.get_running_loop()
        replies = {}
        for worker in healthy:
            request_id = next(self._request_ids)
            if worker.alive and worker.send(messages.CompleteShares(request_id, failed_rank)):
                replies[worker.rank] = future = loop.create_future()
                self._completions[(worker.rank, request_id)] = future
        # At least as long as a rank may take to answer (see the constant); over once one rank
        # has written the share (the others only say why they did not) or all have answered
        # (a rank that leaves answers so: worker_disconnected).
        deadline = loop.time() + max(timeout, 2 * messages.COMPLETE_SHARES_WAIT)
        pending = set(replies.values())
        try:
            while pending and not any(f.done() and f.result().ok for f in replies.values()):
                _, pending = await asyncio.wait(pending, timeout=deadline - loop.time(),
                                                return_when=asyncio.FIRST_COMPLETED)
                if loop.time() >= deadline:
                    break
        finally:
            self._completions.clear()
        answers = {rank: future.result() for rank, future in replies.items() if future.done()}
        done = [rank for rank, answer in answers.items() if answer.ok]
        if done:
            self._log.info("rank %d wrote lost rank %d's share again", done[0], failed_rank)
        else:
            self._log.info("no rank wrote lost rank %d's share again: %s", failed_rank,
                           "; ".join(f"rank {rank}: {answer.detail}" for rank, answer
                                     in sorted(answers.items())) or "no answer")

    def disk_steps(self) -> list[int]:
        """The steps this host's checkpoint directory holds for all its ranks, newest first."""
        return self._checkpoints.disk_steps()

    async def stop_workers(self, *, timeout: float = 10.0) -> None:
        """End every worker now (SIGKILL to its process group) and wait for the exits; none
        to end before this host's first generation (a spare that took a lost host's node)."""
        generation = self._generation
        if generation is None:
            return
        for worker in generation.workers.values():
            self._signal(worker, signal.SIGKILL)
        await self._finish(generation, timeout)

    async def graceful_stop(self, stop_step: int | None) -> None:
        """Every rank finishes ``stop_step`` (agreed by the controller for every rank), saves its
        state (dying checkpoint) and exits; None: no rank has begun a step.

        Workers without a trainguard session get SIGTERM, as torchrun sends. Whatever has not
        exited after the shutdown timeout is killed.
        """
        generation = self._current()
        for worker in generation.workers.values():
            if not worker.alive:
                continue
            worker.stopping = True
            if stop_step is None or not worker.send(messages.StopAt(stop_step)):
                self._signal(worker, signal.SIGTERM)
        await self._until_stopped(generation)
        await self.stop_workers()

    async def _until_stopped(self, generation: workers.Generation) -> None:
        """Until every worker has exited, at most the shutdown timeout; or :data:`LEFT_GRACE`
        seconds after one left the generation with an error: its peers are gone (a host that
        stopped alone, at another step), so none can finish the step it was told."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_timeout
        peers_gone = False
        while not await generation.wait_all_exited(min(0.1, max(0.0, deadline - loop.time()))):
            if loop.time() >= deadline:
                if not peers_gone:
                    self._log.warning("workers still running %.0f s after the stop request; "
                                      "killing them", self.settings.shutdown_timeout)
                return
            if not peers_gone and any(w.alive and w.left is not None and w.left.error
                                      for w in generation.workers.values()):
                peers_gone = True
                deadline = min(deadline, loop.time() + LEFT_GRACE)
                self._log.warning("a rank left the generation while stopping (its peers are "
                                  "gone): ending the workers in %.0f s", LEFT_GRACE)

    def request_stop(self, reason: str) -> None:
        """End the current generation as a stop request (a signal to this host's agent in a
        job across hosts): the controller then stops every host gracefully."""
        if self._generation is not None:
            self._generation.settle(process.GenerationOutcome(
                process.OutcomeKind.STOP_REQUESTED, detail=reason))

    def _signal(self, worker: workers.WorkerState, signum: signal.Signals) -> None:
        if not worker.alive or worker.pid is None:
            return
        worker.stopping = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signum)

    async def _finish(self, generation: workers.Generation, timeout: float) -> None:
        if not await generation.wait_all_exited(timeout):
            self._log.error("workers of generation %d did not exit within %.0f s",
                         generation.number, timeout)
        streams = [pump.closed for worker in generation.workers.values()
                   for pump in (worker.stdout, worker.stderr)]
        await asyncio.wait(streams, timeout=2.0)
        for worker in generation.workers.values():
            self._detector.forget(worker.rank, at=self._clock.monotonic())
            if worker.link is not None:
                worker.link.close()
        generation.settle(process.GenerationOutcome(process.OutcomeKind.STOP_REQUESTED))
        await self._stop_monitor()

    async def _stop_monitor(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
            self._monitor = None

    async def flush_checkpoints(self) -> None:
        await self._checkpoints.flush()

    async def persist(self, step: int) -> bool:
        """Persist ``step`` (the controller's order); True when it is durable."""
        return await self._checkpoints.persist(step)

    # --- messages from workers (ipc_server.MessageHandler) -----------------------------------

    def _worker(self, hello: messages.Hello) -> workers.WorkerState | None:
        """The worker of the current generation that said ``hello``: the same rank, process
        and secret (a process carried over from an earlier generation keeps its connection).
        A worker may say hello before the standby's answer with its pid is read (the agent's
        loop busy, the machine loaded): its secret, made for it alone, is then enough."""
        generation = self._generation
        if generation is None:
            return None
        worker = generation.workers.get(hello.rank)
        if worker is None or not (worker.pid == hello.pid
                                  or (worker.pid is None and worker.secret)):
            return None
        return worker if hmac.compare_digest(worker.secret.encode(),
                                             hello.secret.encode()) else None

    def worker_connected(self, hello: messages.Hello, writer: asyncio.StreamWriter) -> bool:
        worker = self._worker(hello)
        if worker is None:
            return False
        worker.link = writer
        worker.send(messages.SnapshotInterval(self.snapshot_every,
                                              self._current().restore.step))
        if self._launcher.profiling != worker.profiling:  # switched since its start
            worker.send(messages.Profiling(self._launcher.profiling.to_json()))
        self._injector.connected(worker)
        return True

    def pace_snapshots(self, every: int) -> None:
        """Snapshot every ``every`` steps from a step no rank has begun, so that all switch at
        the same step. A rank that connects later counts from the restored step: the step is
        on that grid too, so it snapshots the same steps from there on."""
        if every == self.snapshot_every:
            return
        self.snapshot_every = every
        generation = self._generation
        if generation is None:
            return
        restored = generation.restore.step
        begun = [w.begun_step for w in generation.workers.values() if w.begun_step is not None]
        unbegun = max(begun) + 2 if begun else restored
        from_step = restored + math.ceil((unbegun - restored) / every) * every
        for worker in generation.workers.values():
            worker.send(messages.SnapshotInterval(every, from_step))

    def worker_disconnected(self, hello: messages.Hello) -> None:
        worker = self._worker(hello)
        if worker is not None:
            worker.link = None
            worker.disconnected.set()
            for (rank, request_id), future in self._completions.items():
                if rank == worker.rank and not future.done():
                    future.set_result(messages.ControlReply(
                        request_id, False, "it left without answering"))

    def worker_message(self, hello: messages.Hello, message: messages.Message) -> None:
        worker = self._worker(hello)
        generation = self._generation
        if worker is None or generation is None:
            return
        self.statistics.heard(worker.rank, self._clock.monotonic())
        match message:
            case messages.StepMark(step=step, phase=phase, time=at):
                self._detector.mark(worker.rank, phase, at=at)
                if phase is messages.StepPhase.BEGIN:
                    worker.begun_step = step
                    generation.begun(worker.rank, at)
                    self.statistics.began(worker.rank, at)
                else:
                    worker.completed_step = step
            case messages.Activity(kind=kind, active=active, time=at):
                self._detector.activity(worker.rank, kind, active, at=at)
            case messages.SnapshotCommitted(step=step, nbytes=nbytes, copy_seconds=seconds):
                worker.committed_step = step
                self.statistics.snapshot(worker.rank, step=step, nbytes=nbytes, seconds=seconds,
                                         at=self._clock.monotonic())
                self._checkpoints.committed()
                self._changed.set()
            case messages.FaultInjected():
                self._injector.struck(worker, message)
            case messages.WorkerFailing(error=error, code=code):
                if not worker.stopping:
                    self._attribution.raised(generation, worker, error, code=code)
            case messages.RecoverySupported():
                worker.in_process = True
            case messages.ReplicasDiffer(detail=detail):
                if not self.replicas_differ:
                    self.replicas_differ = detail
                    self._record(events.ReplicasDiffer(job=self.settings.run_id,
                                                       rank=worker.rank, detail=detail))
            case messages.LeftGeneration(generation=number):
                if number == generation.number:
                    worker.left = message
                    self._detector.forget(worker.rank, at=message.time)
                    self._changed.set()
                    if not worker.stopping and not generation.outcome.done():
                        self._attribution.left(generation, worker, message)
            case messages.Finished(time=at):
                worker.finished_at = at
                self._detector.forget(worker.rank, at=at)
            case messages.ControlReply(request_id=request_id):
                future = self._completions.get((worker.rank, request_id))
                if future is not None and not future.done():
                    future.set_result(message)
            case messages.StopRequested():
                generation.settle(process.GenerationOutcome(
                    process.OutcomeKind.STOP_REQUESTED,
                    detail=f"rank {worker.rank} received SIGTERM"))
            case messages.ReserveSlot(request_id=request_id, slot=slot, nbytes=nbytes):
                self._reserve(generation, worker, request_id, slot, nbytes)
            case messages.RestorePlanRequest(request_id=request_id):
                choice = generation.restore
                peer = choice.peers.get(worker.rank)
                stand_in = choice.stand_ins.get(worker.rank)
                source = (messages.RestoreSource.PEER if peer is not None else
                          messages.RestoreSource.REPLICA if stand_in is not None else
                          choice.source)
                worker.send(messages.RestorePlan(
                    request_id=request_id, source=source,
                    step=choice.step, path=choice.paths.get(worker.rank, ""),
                    next_slot=self._checkpoints.next_slot(worker.rank, choice),
                    slot_paths=self._checkpoints.slot_paths(worker.rank), note=choice.note,
                    peer=peer if peer is not None else stand_in,
                    send_to=choice.send_to(worker.rank), holder_paths=choice.holder_paths(
                        len(generation.workers))))
            case _:
                self._log.warning("rank %d sent an unexpected %s message", worker.rank,
                               message.TYPE)

    def _reserve(self, generation: workers.Generation, worker: workers.WorkerState,
                 request_id: int, slot: int, nbytes: int) -> None:
        try:
            path, capacity = self._checkpoints.grant(worker.rank, slot, nbytes)
        except (snapshot_slots.SnapshotMemoryError, ValueError) as error:
            worker.send(messages.RequestFailed(request_id, str(error)))
            generation.settle(process.GenerationOutcome(process.OutcomeKind.FATAL,
                                                        detail=str(error)))
            return
        worker.send(messages.SlotGranted(request_id, slot, path, capacity))

    async def control(self, request: messages.Message) -> messages.Message:
        try:
            if isinstance(request, messages.InjectRequest):
                detail = self.inject(request.rank, request.kind, request.at_step)
            elif isinstance(request, messages.DeviceFaultRequest):
                if self.device_injector is None:
                    raise fault_injection.InjectionError("this host's devices are not watched")
                detail = self.device_injector(request.device, request.code, request.assertion)
            elif isinstance(request, messages.ProfilingRequest):
                detail = self.switch_profiling(request.switch)
            else:
                return messages.ControlReply(getattr(request, "request_id", 0), False,
                                             f"unsupported request {request.TYPE!r}")
        except (fault_injection.InjectionError, profiling_switch.SwitchError) as error:
            assert isinstance(request, (messages.InjectRequest, messages.DeviceFaultRequest,
                                        messages.ProfilingRequest))  # each has an id
            return messages.ControlReply(request.request_id, False, str(error))
        return messages.ControlReply(request.request_id, True, detail)

    @property
    def profiling_dir(self) -> Path:
        """The task's folder of the ranks' profiling records (a folder per rank)."""
        return self._launcher.profiling_dir

    def switch_profiling(self, setting: str) -> str:
        """Switch the ranks' lightweight profiling to ``setting`` (a preset's name or the
        original's JSON; empty: leave it); returns what it is now.

        Raises:
            profiling_switch.SwitchError: ``setting`` cannot be read.
        """
        launcher = self._launcher
        if setting.strip():
            launcher.profiling = switch = profiling_switch.ProfilingSwitch.parse(setting)
            generation = self._generation
            for worker in generation.workers.values() if generation is not None else ():
                worker.send(messages.Profiling(switch.to_json()))
            self._record(events.ProfilingSwitched(
                job=self.settings.run_id, profiling_switch=switch.to_json(),
                marks=switch.describe(), directory=str(launcher.profiling_dir)))
        return (f"profiling: {launcher.profiling.describe()} (records under "
                f"{launcher.profiling_dir})")

    def inject(self, rank: int, kind: messages.InjectionKind, at_step: int | None) -> str:
        """Raises: fault_injection.InjectionError when the fault cannot be caused."""
        return self._injector.inject(self._generation, rank, kind, at_step)

    # --- reports -----------------------------------------------------------------------------

    def progress(self) -> step_statistics.Progress:
        generation = self._generation
        if generation is None:
            return self.statistics.progress(-1, None)
        begun = [w.begun_step for w in generation.workers.values() if w.begun_step is not None]
        return self.statistics.progress(generation.number, max(begun, default=None))

    def activity(self) -> list[step_statistics.RankActivity]:
        """Each rank of the current generation as last seen, by rank (none before the first)."""
        generation = self._generation
        if generation is None:
            return []
        return [self.statistics.activity(worker.rank, pid=worker.pid if worker.alive else None,
                                         device=worker.device, step=worker.begun_step)
                for worker in sorted(generation.workers.values(), key=lambda w: w.rank)]

    async def close(self) -> None:
        generation = self._generation
        if generation is not None and any(w.alive for w in generation.workers.values()):
            await self.stop_workers()
        await self._launcher.close()
        await self._stores.close()
        await self._ipc.close()
        await self._checkpoints.close()
        (self.settings.run_dir / AGENT_FILE).unlink(missing_ok=True)
