"""One job's agents on several hosts, driven as one: the :class:`~trainguard.controller.api.
AgentHandle` the job controller sees for a job across hosts.

Each command fans out to every host's :class:`~trainguard.controller.agent_proxy.AgentProxy`,
each for its own ranks (node ``k`` holds ranks ``k * nproc_per_node`` onwards); each generation's
rendezvous store is served by one live host, and every host restores the same step, which only
the controller can choose (from every host's reports). What the hosts report of a generation is
merged by :class:`ClusterGeneration`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import time
from collections.abc import Collection, Mapping
from typing import Any

from trainguard.controller import agent_proxy, spare_pool
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import events, replicas
from trainguard.proto import control_pb2 as pb
from trainguard.proto import versioned

__all__ = ["CONSEQUENCE_GRACE", "PERSIST_RETRY", "ClusterAgents", "ClusterGeneration"]

logger = logging.getLogger(__name__)

PERSIST_RETRY = 1.0
"""Seconds before a disk checkpoint that some host could not write (the workers outran the
order) is ordered again, of a newer step; also the shortest time between two."""

CONSEQUENCE_GRACE = 1.0
"""Seconds a fault that only says a peer went away (or a hang) waits for another host, or a
host's loss, to report the cause: a rank killed on one host makes its peers on every other host
lose their collective, and those hosts cannot see why."""


def _consequence(outcome: process.GenerationOutcome) -> bool:
    """A fault that another host's fault may explain: a lost collective, a peer gone, or a
    hang (ranks wait in their collective for a host whose link was cut: they miss their step
    deadline about when its stream's lease ends)."""
    fault = outcome.fault
    if outcome.kind is not process.OutcomeKind.FAULT or fault is None:
        return False
    return (fault.kind in (process.ProcessFaultKind.COMMUNICATION, process.ProcessFaultKind.HUNG)
            or process.lost_a_peer(fault.error_excerpt or fault.detail))


class ClusterGeneration:
    """A generation across hosts (:class:`~trainguard.controller.api.GenerationHandle`): the
    workers of every host by global rank; its outcome the first cause any host reports (a
    host lost counts); every rank stepping once every host says so."""

    def __init__(self, number: int, views: Mapping[int, agent_proxy.GenerationView], *,
                 master_port: int, hosts: Mapping[int, agent_proxy.AgentProxy],
                 nproc_per_node: int) -> None:
        self.number = number
        self.master_port = master_port
        self._views = dict(views)
        self._names = {node: proxy.host for node, proxy in hosts.items()}
        self._nproc = nproc_per_node
        loop = asyncio.get_running_loop()
        self.outcome: asyncio.Future[process.GenerationOutcome] = loop.create_future()
        self.all_stepping: asyncio.Future[float] = loop.create_future()
        first = next(iter(self._views.values()))
        self.started_at = min(view.started_at for view in self._views.values())
        self.kept = sum(view.kept for view in self._views.values())
        self.plan_seconds = max(view.plan_seconds for view in self._views.values())
        sources = sorted({view.restore.label for view in self._views.values()})
        notes = [view.restore.note for view in self._views.values() if view.restore.note]
        self.restore = agent_proxy.RestoreInfo(
            first.restore.source if len(sources) == 1 else messages.RestoreSource.MEMORY,
            first.restore.step, "; ".join(notes), " and ".join(sources))
        self._tasks = [
            asyncio.create_task(self._merge_outcomes(), name=f"generation-{number}-outcome"),
            asyncio.create_task(self._merge_stepping(), name=f"generation-{number}-stepping"),
            *(asyncio.create_task(self._watch_host(node, proxy), name=f"host-{node}-watch")
              for node, proxy in hosts.items()),
        ]

    @property
    def workers(self) -> Mapping[int, agent_proxy.WorkerInfo]:
        return {rank: dataclasses.replace(worker, host=self._names[node])
                for node, view in self._views.items() for rank, worker in view.workers.items()}

    @property
    def completed_step(self) -> int | None:
        steps = [view.completed_step for view in self._views.values()
                 if view.completed_step is not None]
        return max(steps, default=None)

    def settle(self, outcome: process.GenerationOutcome) -> None:
        if not self.outcome.done():
            self.outcome.set_result(outcome)

    async def _merge_outcomes(self) -> None:
        pending = {view.outcome for view in self._views.values()}
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        outcome = next(iter(done)).result()
        if outcome.kind is process.OutcomeKind.SUCCEEDED:
            # Every host must succeed; a fault on one that has not yet is the outcome.
            for future in asyncio.as_completed(pending):
                other = await future
                if other.kind is not process.OutcomeKind.SUCCEEDED:
                    outcome = other
                    break
        elif _consequence(outcome) and pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONSEQUENCE_GRACE):
                    for future in asyncio.as_completed(pending):
                        other = await future
                        if other.kind is process.OutcomeKind.FAULT and not _consequence(other):
                            outcome = other
                            break
        self.settle(outcome)

    async def _merge_stepping(self) -> None:
        times = await asyncio.gather(*(view.all_stepping for view in self._views.values()))
        if not self.all_stepping.done():
            self.all_stepping.set_result(max(times))

    async def _watch_host(self, node: int, proxy: agent_proxy.AgentProxy) -> None:
        why = await proxy.wait_gone()
        rank = node * self._nproc
        # Its ranks are gone as if killed (no crash loop to wait for).
        self.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=process.ProcessFault(
            rank=rank, pid=0, kind=process.ProcessFaultKind.HOST_LOST,
            returncode=-signal.SIGKILL, detected_at=time.monotonic(),
            detail=f"node {node}, {proxy.host}: {why}")))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()


class ClusterAgents:
    def __init__(self, hosts: Mapping[int, agent_proxy.AgentProxy], *,
                 nproc_per_node: int, spares: spare_pool.SparePool | None = None,
                 host_wait: float = 0.0, taken: Collection[int] = ()) -> None:
        """``host_wait``: seconds a recovery waits for a spare host to join when a host is
        lost and none is ready; ``taken``: nodes a spare took in a takeover (fresh ones)."""
        self._hosts = dict(sorted(hosts.items()))
        self._nproc = nproc_per_node
        self._spares = spares if spares is not None else spare_pool.SparePool()
        self._host_wait = host_wait
        self._taken = list(taken)
        self._current: ClusterGeneration | None = None
        self._reported_held: dict[int, set[int]] = {}
        """Rank -> the steps its host holds, as reported in a takeover that adopted nothing."""

    @property
    def spares_left(self) -> int:
        return sum(proxy.spares_left for proxy in self._connected().values())

    @property
    def hosts(self) -> Mapping[int, agent_proxy.AgentProxy]:
        """The host of each node now (a spare that took a lost host's node in its place)."""
        return dict(self._hosts)

    @property
    def generation(self) -> int | None:
        return self._current.number if self._current is not None else None

    @property
    def placement(self) -> dict[str, int]:
        """Each device the current generation uses (``<host>/device-<id>``) -> its rank."""
        if self._current is None:
            return {}
        return {f"{worker.host}/device-{worker.device}": rank
                for rank, worker in self._current.workers.items()}

    @property
    def layout(self) -> replicas.ReplicaLayout:
        return next(iter(self._hosts.values())).layout

    @property
    def trusted_layout(self) -> replicas.ReplicaLayout | None:
        """None once any host's ranks found the replicas different."""
        if any(host.trusted_layout is None for host in self._hosts.values()):
            return None
        return self.layout

    def _node_of(self, rank: int) -> int:
        return rank // self._nproc

    def _ranks(self, node: int, ranks: Collection[int]) -> list[int]:
        """Which of ``ranks`` node ``node`` holds."""
        return sorted(rank for rank in ranks if self._node_of(rank) == node)

    def _lost(self) -> list[int]:
        """Nodes whose host is gone."""
        return [node for node, proxy in self._hosts.items() if proxy.gone is not None]

    async def _give_to_spare(self, node: int, *, wait: float, why: object
                             ) -> agent_proxy.AgentProxy | None:
        """The first spare ready within ``wait`` seconds takes node ``node``'s ranks; returns
        the host it replaced (None: no spare came)."""
        spare = await self._spares.place(node, wait=wait)
        if spare is None:
            return None
        logger.warning("spare host %s takes the ranks of node %d: %s", spare.host, node, why)
        replaced, self._hosts[node] = self._hosts[node], spare
        return replaced

    async def _replace_lost(self) -> list[int]:
        """Give each lost host's ranks to a spare host; returns the nodes replaced.

        Raises:
            process.RecoveryError: no spare host was ready, or joined within the host wait.
        """
        replaced = []
        for node in self._lost():
            why = self._hosts[node].gone
            if await self._give_to_spare(node, wait=self._host_wait, why=why) is None:
                raise process.RecoveryError(
                    f"host {node} is lost ({why}) and no spare host joined within "
                    f"{self._host_wait:g} s (--nnodes MIN:MAX adds spares)")
            replaced.append(node)
        return replaced

    def _restore_plan(self, fresh: Collection[int]) -> tuple[int, dict[int, int]]:
        """The step every host restores, and which rank sends it to each rank on a node of
        ``fresh`` (its host replaced: nothing of its ranks in its memory).

        The newest step that every rank holds in its own host's memory (or a replica on the
        same host does: its agent finds that one), each rank of a fresh node from a
        data-parallel replica on another host; else the newest step every node has on disk
        (a fresh node's host reads the node's directory: on a shared disk, or the node's own
        host come back, it is there); else 0 (afresh). Replicas found to differ send nothing:
        each rank is then its own only replica."""
        layout = self.trusted_layout or replicas.ReplicaLayout(self.layout.world_size, 1)
        reported = ({rank: set(w.held_steps) for rank, w in self._current.workers.items()}
                    if self._current is not None else self._reported_held)
        held = {rank: steps for rank, steps in reported.items()
                if self._node_of(rank) not in fresh}
        for step in sorted(set().union(*held.values()), reverse=True):
            peers: dict[int, int] = {}
            for rank in range(layout.world_size):
                node = self._node_of(rank)
                having = [r for r in layout.group(rank) if step in held.get(r, ())]
                if node not in fresh:
                    if not any(self._node_of(r) == node for r in having):
                        break
                    continue
                if not having:
                    break
                peers[rank] = having[0]
            else:
                return step, peers
        on_disk = set.intersection(*(set(proxy.disk_steps) for proxy in self._hosts.values()))
        return max(on_disk, default=0), {}

    async def _each(self, call: Any, hosts: Mapping[int, agent_proxy.AgentProxy] | None = None,
                    *, leave_out_lost: bool = False) -> dict[int, Any]:
        """``call(node, proxy)`` on every host at once (``hosts``: on those); results by node.
        ``leave_out_lost``: only the hosts still connected, and one lost meanwhile is left out
        (the generation's end reports its loss).

        Raises:
            process.RecoveryError: without ``leave_out_lost``, a host was lost while it
                carried the call out (the recovery under way cannot be completed: the
                controller moves on).
        """
        if hosts is None:
            hosts = self._connected() if leave_out_lost else self._hosts
        results = await asyncio.gather(*(call(node, proxy) for node, proxy in hosts.items()),
                                       return_exceptions=True)
        found = {}
        for (node, proxy), result in zip(hosts.items(), results, strict=True):
            if isinstance(result, agent_proxy.AgentCommandError) and proxy.gone is not None:
                if leave_out_lost:
                    continue
                raise process.RecoveryError(f"host {node} ({proxy.host}) was lost: {result}")
            if isinstance(result, BaseException):
                raise result
            found[node] = result
        return found

    async def _store(self) -> tuple[str, int]:
        """Where the next generation meets: a store on the lowest node's host.

        Raises:
            process.RecoveryError: that host was lost meanwhile.
        """
        stores = await self._each(lambda node, proxy: proxy.host_store(),
                                  dict([next(iter(self._hosts.items()))]))
        store: tuple[str, int] = next(iter(stores.values()))
        return store

    async def _form(self, number: int, views: Mapping[int, agent_proxy.GenerationView],
                    store: tuple[str, int]) -> ClusterGeneration:
        if self._current is not None:
            self._current.close()
        self._current = ClusterGeneration(number, views, master_port=store[1],
                                          hosts=self._hosts, nproc_per_node=self._nproc)
        logger.info("generation %d across %d hosts, store at %s:%d", number, len(views), *store)
        return self._current

    async def _avoid_failed_host(self) -> list[int]:
        """A job-level restart after a failure with no hardware cause (the original's
        unconditional retry) runs the failed rank's node on a spare host when one is ready:
        the failure may be the host's. Only under ``session.run``: the moved ranks' state
        comes from replicas over the new process group. Returns the node moved, if any."""
        current = self._current
        if current is None or not current.outcome.done():
            return []
        outcome = current.outcome.result()
        fault = outcome.fault
        if (outcome.kind is not process.OutcomeKind.FAULT or fault is None
                or fault.hardware_cause
                or not all(w.in_process for w in current.workers.values())):
            return []
        node = self._node_of(fault.rank)
        failed = await self._give_to_spare(
            node, wait=0.0, why=f"a retry avoids the host where {fault.describe()}")
        if failed is None:
            return []
        with contextlib.suppress(agent_proxy.AgentCommandError):
            await failed.flush_checkpoints()  # what its memory held stays on its disk
            await failed.end_job(pb.EndJob(
                exit_code=0, outcome=str(events.JobOutcome.STOPPED), host_leaves=True,
                reason=f"this host's ranks went to spare host {self._hosts[node].host} after "
                       f"{fault.describe()} (a retry avoids the host that failed)"))
        return [node]

    async def adopt(self) -> tuple[ClusterGeneration | None, int]:
        """Go on with the generation every host runs (a controller taking over a running
        job): None when they are not all in one; and the newest generation any host runs
        (-1: none)."""
        views = {node: proxy.adopt() for node, proxy in self._hosts.items()}
        numbers = {view.number for view in views.values() if view is not None}
        newest = max(numbers, default=-1)
        if len(numbers) != 1 or any(view is None for view in views.values()):
            self._reported_held = {rank: set(worker.held_steps) for view in views.values()
                                   if view is not None for rank, worker in view.workers.items()}
            return None, newest
        known = {node: view for node, view in views.items() if view is not None}
        first = next(iter(self._hosts.values()))
        return await self._form(newest, known, (first.host, known[min(known)].master_port)), newest

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = ()) -> ClusterGeneration:
        fresh = [*self._taken, *await self._replace_lost(), *await self._avoid_failed_host()]
        self._taken = []
        store = await self._store()
        step, peers = self._restore_plan(fresh)
        views = await self._each(lambda node, proxy: proxy.start_generation(
            number, restart_count=restart_count, move=self._ranks(node, move),
            rendezvous=store, restore_step=step, peers=peers))
        return await self._form(number, views, store)

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool) -> ClusterGeneration:
        lost = self._lost()
        replace = set(replace) | {rank for rank in range(self.layout.world_size)
                                  if self._node_of(rank) in lost}
        await self._each(lambda node, proxy: proxy.leave(replace=self._ranks(node, replace)),
                         self._connected())
        lost = self._lost()  # hosts lost while the others left: their ranks are new too
        replace |= {rank for rank in range(self.layout.world_size)
                    if self._node_of(rank) in lost}
        fresh = await self._replace_lost()
        store = await self._store()
        step, peers = self._restore_plan(fresh)

        def form(node: int, proxy: agent_proxy.AgentProxy) -> Any:
            if node in fresh:  # a spare that took a lost host's ranks: all of them anew
                return proxy.start_generation(number, restart_count=restart_count,
                                              rendezvous=store, restore_step=step, peers=peers)
            return proxy.recover(number, restart_count=restart_count,
                                 replace=self._ranks(node, replace), to_spares=to_spares,
                                 rendezvous=store, restore_step=step, peers=peers)

        return await self._form(number, await self._each(form), store)

    async def order_persists(self, interval: float) -> None:
        """Every ``interval`` seconds, have every host write to disk the newest step that every
        rank holds in memory, as the hosts say at that moment. Hosts writing on clocks of
        their own would write different steps, and no step would be whole on disk across
        hosts: nothing to resume from after a crash, nor for a lost host's ranks without
        replicas elsewhere. Runs until cancelled."""
        written = -1
        wait = interval
        while True:
            await asyncio.sleep(max(wait, PERSIST_RETRY))
            wait = interval
            try:
                step = await self._held_everywhere()
                if step is None or step <= written:
                    continue
                durable = await self._each(lambda node, proxy, step=step: proxy.persist(step),
                                           leave_out_lost=True)
            except (agent_proxy.AgentCommandError, versioned.ProtocolError,
                    process.RecoveryError) as error:
                logger.warning("disk checkpoint not ordered: %s", error)
                wait = PERSIST_RETRY
                continue
            if len(durable) == len(self._hosts) and all(durable.values()):
                written = step
            else:
                wait = PERSIST_RETRY

    async def _held_everywhere(self) -> int | None:
        """The newest step every rank holds in its own host's memory now; None while a host
        is lost or no generation trains."""
        current = self._current
        if current is None or current.outcome.done() or self._lost():
            return None
        await self._each(lambda node, proxy: proxy.describe())
        held = [set(worker.held_steps) for worker in current.workers.values()]
        if len(held) < self.layout.world_size:
            return None
        return max(set.intersection(*held), default=None)

    async def dump(self, *, failed: Collection[int]) -> int | None:
        steps = await self._each(
            lambda node, proxy: proxy.dump(failed=self._ranks(node, failed)), leave_out_lost=True)
        saved = list(steps.values())
        return None if any(step is None for step in saved) else min(saved)

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        await self._each(lambda node, proxy: proxy.complete_snapshots(
            failed_rank=failed_rank, step=step, timeout=timeout), leave_out_lost=True)

    async def stop_workers(self) -> None:
        await self._each(lambda node, proxy: proxy.stop_workers(), leave_out_lost=True)

    async def describe(self) -> ClusterGeneration:
        await self._each(lambda node, proxy: proxy.describe(), leave_out_lost=True)
        if self._current is None:
            raise agent_proxy.AgentCommandError("no generation has been started")
        return self._current

    async def stop_at(self, step: int | None) -> None:
        await self._each(lambda node, proxy: proxy.stop_at(step), leave_out_lost=True)

    async def settle(self, *, timeout: float) -> None:
        await self._each(lambda node, proxy: proxy.settle(timeout=timeout), leave_out_lost=True)

    async def flush_checkpoints(self) -> None:
        await self._each(lambda node, proxy: proxy.flush_checkpoints(), leave_out_lost=True)

    async def end_job(self, end: pb.EndJob) -> None:
        """Tell every host still connected, spares too, that the job is over."""
        hosts = [*self._connected().values(), *self._spares.waiting()]
        await asyncio.gather(*(proxy.end_job(end) for proxy in hosts), return_exceptions=True)
        if self._current is not None:
            self._current.close()

    def _connected(self) -> dict[int, agent_proxy.AgentProxy]:
        """The hosts still connected (a lost host is left out of stops and flushes)."""
        return {node: proxy for node, proxy in self._hosts.items() if proxy.gone is None}

