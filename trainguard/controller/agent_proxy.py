"""The controller's end of the controller protocol: a node agent seen only through messages.

:class:`AgentProxy` is the :class:`~trainguard.controller.api.AgentHandle` the job controller
drives. Each call becomes a command with an id; its acknowledgement brings the result and the
agent's state, and the agent's reports in between keep each generation's view current (its
workers, its progress, its end). What the controller knows of a host is what the host said.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.proto import channel as channels
from trainguard.proto import codec, versioned
from trainguard.proto import control_pb2 as pb

__all__ = ["AgentCommandError", "AgentProxy", "GenerationView", "HostFencedError", "RestoreInfo",
           "WorkerInfo"]

logger = logging.getLogger(__name__)


class AgentCommandError(RuntimeError):
    """The agent failed while carrying out a command, or went away before answering."""


class HostFencedError(RuntimeError):
    """The controller took this host out of its job while it lives (its node is UnHealthy):
    it counts as gone, and its run is ended (:meth:`AgentProxy.dismiss`)."""


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    rank: int
    returncode: int | None
    stopping: bool
    exited_at: float | None
    alive: bool
    in_process: bool
    left: messages.LeftGeneration | None
    device: int
    error: str
    begun_step: int | None = None
    snapshot_step: int | None = None
    held_steps: tuple[int, ...] = ()
    """Every step its host's memory holds of it, newest first."""
    host: str = ""
    """Its host, in a job across hosts (set by the controller, which knows the hosts)."""

    def excerpt(self) -> str:
        return self.error

    @classmethod
    def from_pb(cls, message: pb.Worker) -> WorkerInfo:
        return cls(rank=message.rank,
                   returncode=message.returncode if message.HasField("returncode") else None,
                   stopping=message.stopping,
                   exited_at=message.exited_at if message.HasField("exited_at") else None,
                   alive=message.alive, in_process=message.in_process,
                   left=codec.left_from_pb(message.left) if message.HasField("left") else None,
                   device=message.device, error=message.excerpt,
                   begun_step=message.begun_step if message.HasField("begun_step") else None,
                   snapshot_step=(message.snapshot_step if message.HasField("snapshot_step")
                                  else None),
                   held_steps=tuple(message.held_steps))


@dataclasses.dataclass(frozen=True)
class RestoreInfo:
    source: messages.RestoreSource
    step: int
    note: str
    label: str


class GenerationView:
    """A generation as its agent reported it last (:class:`~trainguard.controller.api.
    GenerationHandle`)."""

    def __init__(self, message: pb.Generation) -> None:
        loop = asyncio.get_running_loop()
        self.outcome: asyncio.Future[process.GenerationOutcome] = loop.create_future()
        self.all_stepping: asyncio.Future[float] = loop.create_future()
        self.number = message.number
        self.master_port = message.master_port
        self.started_at = message.started_at
        self.kept = message.kept
        self.plan_seconds = message.plan_seconds
        try:
            source = messages.RestoreSource(message.restore.source)
        except ValueError as error:
            raise versioned.ProtocolError(f"generation {message.number}: {error}") from error
        self.restore = RestoreInfo(source, message.restore.step, message.restore.note,
                                   message.restore.label)
        self.workers: Mapping[int, WorkerInfo] = {}
        self.completed_step: int | None = None
        self.update(message)

    def update(self, message: pb.Generation) -> None:
        self.workers = {w.rank: WorkerInfo.from_pb(w) for w in message.workers}
        if message.HasField("completed_step"):
            step = message.completed_step
            self.completed_step = step if self.completed_step is None else max(
                step, self.completed_step)
        if message.HasField("all_stepping_at") and not self.all_stepping.done():
            self.all_stepping.set_result(message.all_stepping_at)
        if message.HasField("outcome") and not self.outcome.done():
            self.outcome.set_result(codec.outcome_from_pb(message.outcome))


def _place(order: pb.StartGeneration | pb.Recover, rendezvous: tuple[str, int] | None,
           restore_step: int | None, peers: Mapping[int, int] | None) -> None:
    order.peers.update(peers or {})
    if rendezvous is not None:
        order.rendezvous.CopyFrom(pb.Rendezvous(address=rendezvous[0], port=rendezvous[1]))
    if restore_step is not None:
        order.restore_step = restore_step


def _onto_clock(generation: pb.Generation, offset: float) -> None:
    """Shift every time in ``generation`` by ``offset`` seconds (the agent's clock onto the
    controller's)."""
    generation.started_at += offset
    if generation.HasField("all_stepping_at"):
        generation.all_stepping_at += offset
    for worker in generation.workers:
        if worker.HasField("exited_at"):
            worker.exited_at += offset
        if worker.HasField("left"):
            worker.left.time += offset
    if generation.HasField("outcome") and generation.outcome.HasField("fault"):
        fault = generation.outcome.fault
        fault.detected_at += offset
        if fault.HasField("occurred_at"):
            fault.occurred_at += offset


class AgentProxy:
    def __init__(self, channel: channels.Channel, *,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: this controller's monotonic clock, when the agent's is another (an agent
        on another host): the agent's times are taken onto it. None: the same clock."""
        self._channel = channel
        self._clock = clock
        self._offset: float | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Ack]] = {}
        self._generations: dict[int, GenerationView] = {}
        self._reported: pb.Generation | None = None  # the generation last reported
        self._agent: pb.AgentState | None = None
        self._seq = 0
        self._known = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._gone: BaseException | None = None
        self._ended = asyncio.Event()

    async def connect(self, *, timeout: float) -> None:
        """Start reading the agent's messages; returns once the agent has said who it is.

        Raises:
            AgentCommandError: it did not within ``timeout`` seconds, or went away.
        """
        self._reader = asyncio.create_task(self._read(), name="trainguard-agent-proxy")
        try:
            await asyncio.wait_for(self._known.wait(), timeout)
        except TimeoutError:
            raise AgentCommandError(f"the agent did not report within {timeout:g} s") from None
        if self._agent is None:
            raise AgentCommandError(f"the agent went away before it reported: {self._gone}")

    async def close(self) -> None:
        self._channel.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        # Closed before the agent's end was read (gRPC cancels a stream's handler when the
        # agent's connection drops): whoever waits on it must still hear it is gone.
        self._lost(channels.ChannelClosedError("the connection to the agent was closed"))

    @property
    def host(self) -> str:
        return self._state().host

    @property
    def spares_left(self) -> int:
        return self._state().spares_left

    @property
    def spare(self) -> bool:
        return self._state().spare

    @property
    def training(self) -> bool:
        """Whether the generation the agent last reported runs on (it has no outcome yet)."""
        return self._reported is not None and not self._reported.HasField("outcome")

    @property
    def node_rank(self) -> int:
        return self._state().node_rank

    @property
    def disk_steps(self) -> list[int]:
        """Steps the host's checkpoint directory holds for all its ranks, newest first."""
        return list(self._state().disk_steps)

    @property
    def layout(self) -> replicas.ReplicaLayout:
        state = self._state()
        return replicas.ReplicaLayout(state.world_size, state.dp_size)

    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        return None if self._state().replicas_differ else self.layout

    def _state(self) -> pb.AgentState:
        if self._agent is None:
            raise AgentCommandError("the agent has not reported yet (connect first)")
        return self._agent

    # --- the agent's commands (api.AgentHandle) ------------------------------------------------

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = (),
                               rendezvous: tuple[str, int] | None = None,
                               restore_step: int | None = None,
                               peers: Mapping[int, int] | None = None) -> GenerationView:
        order = pb.StartGeneration(number=number, restart_count=restart_count, move=sorted(move))
        _place(order, rendezvous, restore_step, peers)
        return self._formed(await self._command(start_generation=order))

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool, rendezvous: tuple[str, int] | None = None,
                      restore_step: int | None = None,
                      peers: Mapping[int, int] | None = None) -> GenerationView:
        order = pb.Recover(number=number, restart_count=restart_count, replace=sorted(replace),
                           to_spares=to_spares)
        _place(order, rendezvous, restore_step, peers)
        return self._formed(await self._command(recover=order))

    # --- the commands of a job across hosts (controller.cluster_agents) ------------------------

    async def host_store(self) -> tuple[str, int]:
        """Have this host serve the next generation's store; returns its address and port."""
        ack = await self._command(host_store=pb.HostStore())
        if ack.WhichOneof("result") != "store":
            raise versioned.ProtocolError("the agent served a store but did not say where")
        return ack.store.address, ack.store.port

    async def take_ranks(self, node_rank: int) -> None:
        """This spare host takes node ``node_rank``'s ranks."""
        await self._command(take_ranks=pb.TakeRanks(node_rank=node_rank))

    async def switch_profiling(self, switch: str) -> None:
        """The host's ranks, and every process it starts, record the lightweight-profiling
        marks ``switch`` (the original's JSON) has on."""
        await self._command(profiling=pb.Profiling(switch=switch))

    async def leave(self, *, replace: Collection[int]) -> None:
        await self._command(leave=pb.Leave(replace=sorted(replace)))

    async def end_job(self, end: pb.EndJob) -> None:
        await self._command(end_job=end)

    @property
    def gone(self) -> BaseException | None:
        """Why the agent's channel ended, once it has."""
        return self._gone

    def fence(self, why: str) -> None:
        """Count this host as gone from now on, for ``why``, though it lives: whoever waits on
        it hears so at once (its ranks are lost with it), and nothing more is asked of it but
        :meth:`dismiss`. The channel stays open for that."""
        self._lost(HostFencedError(why))

    async def dismiss(self, end: pb.EndJob, *, timeout: float, flush: bool = False) -> bool:
        """Stop the host's workers (``flush``: then write what its memory holds to disk) and
        end its run with ``end``, fenced or not; whether it acknowledged all within ``timeout``
        seconds (a host that did not is left to its own end: it exits once it finds no
        controller that takes it back)."""
        try:
            async with asyncio.timeout(timeout):
                await self._exchange(stop_workers=pb.StopWorkers())
                if flush:
                    await self._exchange(flush_checkpoints=pb.FlushCheckpoints())
                await self._exchange(end_job=end)
        except (TimeoutError, AgentCommandError, process.RecoveryError) as error:
            logger.warning("host %s did not end its run when told: %s", self.host,
                           error or f"no answer within {timeout:g} s")
            return False
        return True

    async def wait_gone(self) -> BaseException:
        """Until the agent's channel ends; returns why."""
        await self._ended.wait()
        return self._gone or channels.ChannelClosedError("the controller closed the channel")

    async def dump(self, *, failed: Collection[int]) -> int | None:
        ack = await self._command(dump=pb.Dump(failed=sorted(failed)))
        return ack.dump.step if ack.dump.HasField("step") else None

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        order = pb.CompleteSnapshots(failed_rank=failed_rank, timeout=timeout)
        if step is not None:
            order.step = step
        await self._command(complete_snapshots=order)

    async def stop_workers(self) -> None:
        await self._command(stop_workers=pb.StopWorkers())

    async def describe(self) -> GenerationView:
        ack = await self._command(describe=pb.Describe())
        if not ack.report.HasField("generation"):
            raise AgentCommandError("the agent has no generation to describe")
        return self._generations[ack.report.generation.number]

    async def stop_at(self, step: int | None) -> None:
        order = pb.StopAt()
        if step is not None:
            order.step = step
        await self._command(stop_at=order)

    async def settle(self, *, timeout: float) -> None:
        await self._command(settle=pb.Settle(timeout=timeout))

    async def flush_checkpoints(self) -> None:
        await self._command(flush_checkpoints=pb.FlushCheckpoints())

    async def persist(self, step: int) -> bool:
        """Have the host write ``step`` to disk; True when it is durable there."""
        ack = await self._command(persist=pb.Persist(step=step))
        if ack.WhichOneof("result") != "persisted":
            raise versioned.ProtocolError("the agent persisted but did not say whether")
        return ack.persisted.durable

    # --- messages ------------------------------------------------------------------------------

    async def _command(self, **kind: Any) -> pb.Ack:
        """Send one command and wait for its acknowledgement.

        Raises:
            process.RecoveryError: the agent refused it (the recovery cannot be formed).
            AgentCommandError: the agent failed, or went away.
        """
        if self._gone is not None:
            raise AgentCommandError(f"the agent is gone: {self._gone}")
        return await self._exchange(**kind)

    async def _exchange(self, **kind: Any) -> pb.Ack:
        """:meth:`_command`, asked of an agent whether or not it counts as gone."""
        if self._reader is not None and self._reader.done():
            raise AgentCommandError(f"the agent's channel has ended: {self._gone}")
        command = pb.Command(id=next(self._ids), **kind)
        answered: asyncio.Future[pb.Ack] = asyncio.get_running_loop().create_future()
        self._pending[command.id] = answered
        try:
            self._channel.send(versioned.serialize(pb.Envelope(command=command)))
            ack = await answered
        finally:
            self._pending.pop(command.id, None)
        result = ack.WhichOneof("result")
        if result == "refused":
            raise process.RecoveryError(ack.refused.reason)
        if result == "failed":
            raise AgentCommandError(f"the agent failed to carry out {command.WhichOneof('kind')}"
                                    f": {ack.failed.error}")
        return ack

    def _formed(self, ack: pb.Ack) -> GenerationView:
        if ack.WhichOneof("result") != "generation":
            raise versioned.ProtocolError("the agent formed a generation but did not describe it")
        return self._generations[ack.generation.number]

    async def _read(self) -> None:
        try:
            while True:
                envelope = codec.unpack(await self._channel.receive())
                self._onto_clock(envelope)
                body = envelope.WhichOneof("body")
                if body == "report":
                    self._apply(envelope.report)
                elif body == "ack":
                    ack = envelope.ack
                    if ack.WhichOneof("result") == "generation":
                        # Known before anything after the ack is read: its reports may follow
                        # before the command's caller resumes.
                        self._generations.setdefault(ack.generation.number,
                                                     GenerationView(ack.generation))
                    self._apply(ack.report)
                    waiting = self._pending.get(envelope.ack.command_id)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(ack)
                else:
                    logger.error("the agent sent a %s: ignored", body)
        except (channels.ChannelClosedError, versioned.ProtocolError) as error:
            self._lost(error)

    def _onto_clock(self, envelope: pb.Envelope) -> None:
        """The report's times on this controller's clock. The offset is the smallest
        (receipt - sent) seen: the true offset plus the quickest delivery."""
        if self._clock is None:
            return
        body = envelope.WhichOneof("body")
        if body not in ("report", "ack"):
            return
        report = envelope.report if body == "report" else envelope.ack.report
        offset = self._clock() - report.sent_at
        self._offset = offset if self._offset is None else min(self._offset, offset)
        if report.HasField("generation"):
            _onto_clock(report.generation, self._offset)
        if body == "ack" and envelope.ack.HasField("generation"):
            _onto_clock(envelope.ack.generation, self._offset)

    def _lost(self, error: BaseException) -> None:
        """The agent is gone (the first reason given counts): fail what waits on it."""
        if self._gone is None:
            self._gone = error
        self._known.set()
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(AgentCommandError(f"the agent is gone: {self._gone}"))
        self._ended.set()

    def _apply(self, report: pb.Report) -> None:
        """Reports arrive in order; one older than the last applied is stale and dropped."""
        if report.seq <= self._seq:
            return
        self._seq = report.seq
        self._agent = report.agent
        self._known.set()
        if report.HasField("generation"):
            self._reported = report.generation
            view = self._generations.get(report.generation.number)
            if view is not None:
                view.update(report.generation)

    def adopt(self) -> GenerationView | None:
        """The generation the agent said it runs, followed from now on: a controller that
        takes over a running job learns its generations from the agents' reports. None: the
        agent runs none."""
        if self._reported is None:
            return None
        number = self._reported.number
        view = self._generations.get(number)
        if view is None:
            view = self._generations[number] = GenerationView(self._reported)
        return view
