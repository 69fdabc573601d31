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
import logging
from collections.abc import Collection, Mapping
from typing import Any

from trainguard.controller import agent_proxy
from trainguard.faults import process
from trainguard.ipc import messages
from trainguard.job import replicas
from trainguard.proto import control_pb2 as pb

__all__ = ["CONSEQUENCE_GRACE", "ClusterAgents", "ClusterGeneration"]

logger = logging.getLogger(__name__)

CONSEQUENCE_GRACE = 1.0
"""Seconds a fault that only says a peer went away waits for another host to report the cause:
a rank killed on one host makes its peers on every other host lose their collective, and those
hosts cannot see why."""

def _consequence(outcome: process.GenerationOutcome) -> bool:
    """A fault that another rank's fault explains: a lost collective, a peer gone."""
    fault = outcome.fault
    if outcome.kind is not process.OutcomeKind.FAULT or fault is None:
        return False
    return (fault.kind is process.ProcessFaultKind.COMMUNICATION
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
        return {rank: worker for view in self._views.values()
                for rank, worker in view.workers.items()}

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
        self.settle(process.GenerationOutcome(process.OutcomeKind.FAULT, fault=process.ProcessFault(
            rank=rank, pid=0, kind=process.ProcessFaultKind.EXITED,
            detected_at=max(self.started_at, 0.0), detail=f"host {node} ({proxy.host}) lost",
            error_excerpt=f"the agent of node {node} ({proxy.host}) is gone: {why}")))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()


class ClusterAgents:
    def __init__(self, hosts: Mapping[int, agent_proxy.AgentProxy], *,
                 nproc_per_node: int) -> None:
        self._hosts = dict(sorted(hosts.items()))
        self._nproc = nproc_per_node
        self._current: ClusterGeneration | None = None

    @property
    def spares_left(self) -> int:
        return sum(proxy.spares_left for proxy in self._hosts.values())

    @property
    def layout(self) -> replicas.ReplicaLayout:
        return next(iter(self._hosts.values())).layout

    def _ranks(self, node: int, ranks: Collection[int]) -> list[int]:
        """Which of ``ranks`` node ``node`` holds."""
        own = range(node * self._nproc, (node + 1) * self._nproc)
        return sorted(rank for rank in ranks if rank in own)

    def _live(self) -> dict[int, agent_proxy.AgentProxy]:
        """The hosts still connected.

        Raises:
            process.RecoveryError: a host is gone (no spare host takes its ranks yet).
        """
        gone = {node: proxy.gone for node, proxy in self._hosts.items() if proxy.gone}
        if gone:
            node, why = next(iter(gone.items()))
            raise process.RecoveryError(f"host {node} is gone ({why}); no spare host to take "
                                        "its ranks")
        return self._hosts

    def _restore_step(self) -> int:
        """The step every host restores: the newest every rank holds in memory (ranks in lock
        step hold the same step or one apart, and keep two snapshots), else the newest every
        host has on disk, else 0 (afresh)."""
        if self._current is not None:
            steps = [w.snapshot_step for w in self._current.workers.values()]
            if steps and all(step is not None for step in steps):
                return min(step for step in steps if step is not None)
        on_disk = set.intersection(*(set(proxy.disk_steps) for proxy in self._hosts.values()))
        return max(on_disk, default=0)

    async def _each(self, call: Any, hosts: Mapping[int, agent_proxy.AgentProxy] | None = None
                    ) -> dict[int, Any]:
        """``call(node, proxy)`` on every live host at once; their results by node."""
        hosts = self._live() if hosts is None else hosts
        results = await asyncio.gather(*(call(node, proxy) for node, proxy in hosts.items()))
        return dict(zip(hosts, results, strict=True))

    async def _form(self, number: int, views: Mapping[int, agent_proxy.GenerationView],
                    store: tuple[str, int]) -> ClusterGeneration:
        if self._current is not None:
            self._current.close()
        self._current = ClusterGeneration(number, views, master_port=store[1],
                                          hosts=self._hosts, nproc_per_node=self._nproc)
        logger.info("generation %d across %d hosts, store at %s:%d", number, len(views), *store)
        return self._current

    async def start_generation(self, number: int, *, restart_count: int,
                               move: Collection[int] = ()) -> ClusterGeneration:
        hosts = self._live()
        store = await next(iter(hosts.values())).host_store()
        step = self._restore_step()
        views = await self._each(lambda node, proxy: proxy.start_generation(
            number, restart_count=restart_count, move=self._ranks(node, move),
            rendezvous=store, restore_step=step))
        return await self._form(number, views, store)

    async def recover(self, number: int, *, restart_count: int, replace: Collection[int],
                      to_spares: bool) -> ClusterGeneration:
        hosts = self._live()
        await self._each(lambda node, proxy: proxy.leave(replace=self._ranks(node, replace)))
        store = await next(iter(hosts.values())).host_store()
        step = self._restore_step()
        views = await self._each(lambda node, proxy: proxy.recover(
            number, restart_count=restart_count, replace=self._ranks(node, replace),
            to_spares=to_spares, rendezvous=store, restore_step=step))
        return await self._form(number, views, store)

    async def dump(self, *, failed: Collection[int]) -> int | None:
        steps = await self._each(lambda node, proxy: proxy.dump(failed=self._ranks(node, failed)))
        saved = list(steps.values())
        return None if any(step is None for step in saved) else min(saved)

    async def complete_snapshots(self, *, failed_rank: int, step: int | None,
                                 timeout: float) -> None:
        await self._each(lambda node, proxy: proxy.complete_snapshots(
            failed_rank=failed_rank, step=step, timeout=timeout), self._connected())

    async def stop_workers(self) -> None:
        await self._each(lambda node, proxy: proxy.stop_workers(), self._connected())

    async def describe(self) -> ClusterGeneration:
        await self._each(lambda node, proxy: proxy.describe(), self._connected())
        if self._current is None:
            raise agent_proxy.AgentCommandError("no generation has been started")
        return self._current

    async def stop_at(self, step: int | None) -> None:
        await self._each(lambda node, proxy: proxy.stop_at(step), self._connected())

    async def settle(self, *, timeout: float) -> None:
        await self._each(lambda node, proxy: proxy.settle(timeout=timeout), self._connected())

    async def flush_checkpoints(self) -> None:
        await self._each(lambda node, proxy: proxy.flush_checkpoints(), self._connected())

    async def end_job(self, end: pb.EndJob) -> None:
        """Tell every host still connected that the job is over."""
        await self._each(lambda node, proxy: proxy.end_job(end), self._connected())
        if self._current is not None:
            self._current.close()

    def _connected(self) -> dict[int, agent_proxy.AgentProxy]:
        """The hosts still connected (a lost host is left out of stops and flushes)."""
        return {node: proxy for node, proxy in self._hosts.items() if proxy.gone is None}

