"""The agent's end of the controller protocol (trainguard/proto/control.proto).

It carries out the controller's commands on this host's :class:`~trainguard.agent.node_agent.
NodeAgent`, one at a time and in order, answers each with an acknowledgement that carries the
agent's state once it is done, and reports what the controller waits for as it happens: a
generation's end (with every worker's state) and the moment every rank is stepping. Nothing
but bytes crosses the channel, so the controller may be in this process or on another host.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time

from trainguard.agent import node_agent, rendezvous_stores, workers
from trainguard.faults import process
from trainguard.job import profiling_switch
from trainguard.proto import channel as channels
from trainguard.proto import codec, versioned
from trainguard.proto import control_pb2 as pb

__all__ = ["ControllerLink"]

logger = logging.getLogger(__name__)


class ControllerLink:
    def __init__(self, agent: node_agent.NodeAgent, channel: channels.Channel, *,
                 host: str) -> None:
        self._agent = agent
        self._channel = channel
        self._host = host
        self._seq = 0
        self._watched: set[int] = set()

    async def serve(self) -> pb.EndJob | None:
        """Say how this agent stands, then carry out commands until the controller ends the
        job (returned, once acknowledged) or closes the channel (None). A generation already
        running (a controller taking over) is reported when it ends, as one it started."""
        self._send(pb.Envelope(report=self._report()))
        if self._agent.generation is not None:
            self._watch(self._agent.generation)
        while True:
            try:
                envelope = codec.unpack(await self._channel.receive())
            except channels.ChannelClosedError:
                return None
            except versioned.ProtocolError as error:
                logger.error("a control message this agent cannot read: %s", error)
                continue
            if envelope.WhichOneof("body") != "command":
                logger.error("the controller sent a %s, not a command: ignored",
                             envelope.WhichOneof("body"))
                continue
            command = envelope.command
            ack = await self._carry_out(command)
            try:
                ack.report.CopyFrom(self._report())
            except Exception as error:  # the controller must hear back, whatever failed
                logger.exception("describing the agent failed")
                ack = pb.Ack(command_id=ack.command_id,
                             failed=pb.Failure(error=f"describing the agent failed: "
                                                     f"{type(error).__name__}: {error}"))
            self._send(pb.Envelope(ack=ack))
            if command.WhichOneof("kind") == "end_job":
                return command.end_job

    def close(self) -> None:
        self._channel.close()

    async def _carry_out(self, command: pb.Command) -> pb.Ack:
        ack = pb.Ack(command_id=command.id)
        kind = command.WhichOneof("kind")
        agent = self._agent
        try:
            if kind == "start_generation":
                order = command.start_generation
                self._watch(await agent.start_generation(
                    order.number, restart_count=order.restart_count, move=list(order.move),
                    rendezvous=_rendezvous(order), restore_step=(
                        order.restore_step if order.HasField("restore_step") else None),
                    peers=dict(order.peers)))
            elif kind == "recover":
                recover = command.recover
                self._watch(await agent.recover(
                    recover.number, restart_count=recover.restart_count,
                    replace=list(recover.replace), to_spares=recover.to_spares,
                    rendezvous=_rendezvous(recover), restore_step=(
                        recover.restore_step if recover.HasField("restore_step") else None),
                    peers=dict(recover.peers)))
            elif kind == "leave":
                await agent.leave(replace=list(command.leave.replace))
            elif kind == "take_ranks":
                agent.take_ranks(command.take_ranks.node_rank)
            elif kind == "host_store":
                address, port = await agent.host_store()
                ack.store.CopyFrom(pb.Rendezvous(address=address, port=port))
            elif kind == "end_job":
                pass  # the controller stopped the workers and flushed before it ended the job
            elif kind == "dump":
                step = await agent.dump(failed=list(command.dump.failed))
                ack.dump.SetInParent()
                if step is not None:
                    ack.dump.step = step
            elif kind == "complete_snapshots":
                order_snapshots = command.complete_snapshots
                await agent.complete_snapshots(
                    failed_rank=order_snapshots.failed_rank,
                    step=(order_snapshots.step if order_snapshots.HasField("step") else None),
                    timeout=order_snapshots.timeout)
            elif kind == "stop_workers":
                await agent.stop_workers()
            elif kind == "stop_at":
                stop = command.stop_at
                await agent.graceful_stop(stop.step if stop.HasField("step") else None)
            elif kind == "describe":
                pass  # the acknowledgement carries the agent's state
            elif kind == "settle":
                await agent.settle(timeout=command.settle.timeout)
            elif kind == "flush_checkpoints":
                await agent.flush_checkpoints()
            elif kind == "persist":
                ack.persisted.durable = await agent.persist(command.persist.step)
            elif kind == "profiling":
                agent.switch_profiling(command.profiling.switch)
            else:
                ack.failed.error = f"a command this agent does not know: {kind}"
                return ack
            if kind in ("start_generation", "recover"):
                assert agent.generation is not None
                ack.generation.CopyFrom(_generation(agent, agent.generation))
            elif kind not in ("dump", "host_store", "persist"):
                ack.done.SetInParent()
        except (process.RecoveryError, rendezvous_stores.RendezvousError,
                profiling_switch.SwitchError) as error:
            ack.refused.reason = str(error)
            return ack
        except Exception as error:
            logger.exception("the agent failed to carry out %s", kind)
            ack.failed.error = f"{type(error).__name__}: {error}"
        return ack

    def _watch(self, generation: workers.Generation) -> None:
        """Report the generation when its last rank begins stepping and when it ends."""
        if generation.number in self._watched:
            return
        self._watched.add(generation.number)
        report = functools.partial(self._report_generation, generation)
        generation.all_stepping.add_done_callback(report)
        generation.outcome.add_done_callback(report)

    def _report_generation(self, generation: workers.Generation, _: object) -> None:
        with contextlib.suppress(channels.ChannelClosedError):
            self._send(pb.Envelope(report=self._report(generation)))

    def _report(self, generation: workers.Generation | None = None) -> pb.Report:
        self._seq += 1
        layout = self._agent.layout
        report = pb.Report(seq=self._seq, sent_at=time.monotonic(), agent=pb.AgentState(
            host=self._host, world_size=layout.world_size, dp_size=layout.dp_size,
            spares_left=self._agent.spares_left, node_rank=self._agent.settings.node_rank,
            disk_steps=self._agent.disk_steps(), spare=self._agent.settings.spare,
            replicas_differ=self._agent.replicas_differ))
        generation = generation or self._agent.generation
        if generation is not None:
            report.generation.CopyFrom(_generation(self._agent, generation))
        return report

    def _send(self, envelope: pb.Envelope) -> None:
        self._channel.send(versioned.serialize(envelope))


def _rendezvous(order: pb.StartGeneration | pb.Recover) -> tuple[str, int] | None:
    if not order.HasField("rendezvous"):
        return None
    return order.rendezvous.address, order.rendezvous.port


def _generation(agent: node_agent.NodeAgent, generation: workers.Generation) -> pb.Generation:
    restore = generation.restore
    message = pb.Generation(
        number=generation.number, master_port=generation.master_port,
        started_at=generation.started_at, kept=generation.kept,
        plan_seconds=generation.plan_seconds,
        restore=pb.Restore(source=str(restore.source), step=restore.step, note=restore.note,
                           label=restore.label))
    ended = generation.outcome.done()
    if ended:
        message.outcome.CopyFrom(codec.outcome_to_pb(generation.outcome.result()))
    for worker in generation.workers.values():
        message.workers.append(_worker(worker, ended=ended,
                                       held_steps=agent.held_steps(worker.rank)))
    if generation.completed_step is not None:
        message.completed_step = generation.completed_step
    if generation.all_stepping.done():
        message.all_stepping_at = generation.all_stepping.result()
    return message


def _worker(worker: workers.WorkerState, *, ended: bool, held_steps: list[int]) -> pb.Worker:
    message = pb.Worker(rank=worker.rank, stopping=worker.stopping, alive=worker.alive,
                        in_process=worker.in_process, device=worker.device,
                        held_steps=held_steps)
    if worker.returncode is not None:
        message.returncode = worker.returncode
    if worker.exited_at is not None:
        message.exited_at = worker.exited_at
    if worker.begun_step is not None:
        message.begun_step = worker.begun_step
    if held_steps:
        message.snapshot_step = held_steps[0]
    if worker.left is not None:
        message.left.CopyFrom(codec.left_to_pb(worker.left))
    # The controller reads excerpts once the generation has ended (a hung rank's stderr
    # explains it too); before, only a worker with an error has one worth reading.
    if ended or worker.left is not None or worker.returncode not in (None, 0):
        message.excerpt = worker.excerpt()
    return message
