"""The controller's side of a cluster job's lightweight profiling (SPEC D10, I2): the original's
``TrainingDataTrace`` calls (profiling.proto) switch a job's marks, read them back, and follow
them; the switch goes to every host of the job, spares too, and to each host that joins it
later, and is kept as the job's ``data-trace-<job>`` document (key ``profilingSwitch``, the
original's JSON) and a ``profiling-switched`` event."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol

from trainguard.controller import agent_proxy
from trainguard.faults import process
from trainguard.job import events, profiling_switch
from trainguard.proto import profiling_pb2 as pb
from trainguard.store import recorder

__all__ = ["BAD_REQUEST", "DONE", "NOT_EVERYWHERE", "NOT_FOUND", "TELL_TIMEOUT", "DataTrace",
           "TracedJob"]

logger = logging.getLogger(__name__)

DONE, BAD_REQUEST, NOT_FOUND, NOT_EVERYWHERE = 200, 300, 404, 500
"""The original's answer codes."""
TELL_TIMEOUT = 10.0
"""Seconds a host has to take a switch (it answers after the command it is carrying out)."""


class TracedJob(Protocol):
    """What a job under this controller holds for its profiling."""

    profiling: profiling_switch.ProfilingSwitch
    recorder: recorder.EventRecorder | None  # once it runs
    ended: asyncio.Event

    def connected(self) -> list[agent_proxy.AgentProxy]:
        """Its hosts and spares still connected."""
        ...


class DataTrace:
    def __init__(self, find: Callable[[str], TracedJob | None]) -> None:
        """``find``: the job of that name under this controller, if any."""
        self._find = find
        self._watchers: dict[str, set[asyncio.Queue[pb.DataStatusRes]]] = {}
        """By job: a queue for each subscriber, of the switch each time it changes."""

    def _job(self, job_ns_name: str) -> tuple[str, TracedJob | None]:
        """The original's "namespace/jobName"; trainguard's jobs have no namespace."""
        name = job_ns_name.rsplit("/", 1)[-1]
        return name, self._find(name)

    async def modify(self, request: pb.DataTypeReq) -> pb.DataTypeRes:
        name, job = self._job(request.jobNsName)
        if job is None:
            return pb.DataTypeRes(message=f"no job {name!r} runs under this controller",
                                  code=NOT_FOUND)
        switch = request.profilingSwitch
        try:
            job.profiling = profiling_switch.ProfilingSwitch.from_fields(
                {field: getattr(switch, field) for field in profiling_switch.ProfilingSwitch.NAMES})
        except profiling_switch.SwitchError as error:
            return pb.DataTypeRes(message=str(error), code=BAD_REQUEST)
        logger.info("job %s: profiling %s", name, job.profiling.describe())
        self.keep(name, job)
        for queue in self._watchers.get(name, ()):
            queue.put_nowait(self._status(name, job))
        missed = await self.tell(job, job.connected())
        if missed:
            return pb.DataTypeRes(code=NOT_EVERYWHERE, message=(
                f"job {name}: profiling {job.profiling.describe()}, but not on "
                f"{'; '.join(missed)}"))
        return pb.DataTypeRes(message=f"job {name}: profiling {job.profiling.describe()}",
                              code=DONE)

    def get(self, request: pb.DataStatusReq) -> pb.DataStatusRes:
        name, job = self._job(request.jobNsName)
        if job is None:
            return pb.DataStatusRes(message=f"no job {name!r} runs under this controller",
                                    code=NOT_FOUND)
        return self._status(name, job)

    async def subscribe(self, client: pb.ProfilingClientInfo
                        ) -> AsyncIterator[pb.DataStatusRes]:
        """The job's switch now, then each time it changes, until the job ends (its
        ``jobId``: the job's name, as ``jobNsName`` names it)."""
        name, job = self._job(client.jobId)
        if job is None:
            yield pb.DataStatusRes(message=f"no job {name!r} runs under this controller",
                                   code=NOT_FOUND)
            return
        queue: asyncio.Queue[pb.DataStatusRes] = asyncio.Queue()
        watchers = self._watchers.setdefault(name, set())
        watchers.add(queue)
        ended = asyncio.ensure_future(job.ended.wait())
        try:
            yield self._status(name, job)
            while True:
                changed = asyncio.ensure_future(queue.get())
                await asyncio.wait({changed, ended}, return_when=asyncio.FIRST_COMPLETED)
                if not changed.done():
                    changed.cancel()
                    return
                yield changed.result()
        finally:
            ended.cancel()
            watchers.discard(queue)
            if not watchers:
                self._watchers.pop(name, None)

    @staticmethod
    def _status(name: str, job: TracedJob) -> pb.DataStatusRes:
        return pb.DataStatusRes(
            message=f"job {name}: profiling {job.profiling.describe()}", code=DONE,
            profilingSwitch=pb.ProfilingSwitch(**job.profiling.fields()))

    @staticmethod
    def keep(name: str, job: TracedJob) -> None:
        """The job's document and event, once it runs (it has a store then)."""
        if job.recorder is None:
            return
        switch = job.profiling
        job.recorder.publish(f"data-trace-{name}", {"profilingSwitch": switch.to_json()})
        job.recorder.record(events.ProfilingSwitched(
            job=name, profiling_switch=switch.to_json(), marks=switch.describe(),
            directory=None))

    @staticmethod
    async def tell(job: TracedJob, hosts: Iterable[agent_proxy.AgentProxy]) -> list[str]:
        """Give ``hosts`` the job's switch; the hosts that did not take it, each with why."""
        switch = job.profiling.to_json()

        async def tell_one(host: agent_proxy.AgentProxy) -> str | None:
            try:
                await asyncio.wait_for(host.switch_profiling(switch), TELL_TIMEOUT)
            except (process.RecoveryError, agent_proxy.AgentCommandError,
                    TimeoutError) as error:
                logger.warning("host %s did not take the profiling switch: %s", host.host,
                               error or "no answer in time")
                return f"{host.host} ({error or 'no answer in time'})"
            return None

        return [why for why in await asyncio.gather(*map(tell_one, hosts)) if why]
