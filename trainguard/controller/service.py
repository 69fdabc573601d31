"""The cluster's controller as a service (``trainguard controller --listen HOST:PORT``).

Agents of jobs across hosts open a ``Control.Connect`` stream each and register with their
first message (control.proto ``Register``). A job is formed by the first host that registers
its id; every later host must agree with it on what the job is (world size, program, version,
recovery settings), and claims a free node rank or is given the lowest one. Once every node
rank has a host, the job's :class:`~trainguard.controller.job_controller.JobController` drives
them as one (:class:`~trainguard.controller.cluster_agents.ClusterAgents`), its events in the
job's SQLite store under the controller's run root; at the end every host is told the outcome
and exits with its code. The job's id is then free for a later run (which resumes from its
checkpoints).

The same server takes public faults (``PubFault.SendPublicFault``, and documents in
``<run root>/public-faults``: :mod:`.public_fault_intake`) and hands each to the running jobs
whose hosts it names, and hosts' device reports (``Control.ReportDevices``:
:mod:`.device_reports`). Device events and the hosts' documents go through the fault centre
(:mod:`.fault_intake`), which decides what reaches a job, separates devices (also at an
operator's ``Control.SeparateDevice`` / ``ReleaseDevice``) and writes the cluster documents.
Every call is authenticated first (:mod:`trainguard.proto.grpc_security`).
It leads only while it holds the store's leadership (:mod:`.leadership`), and takes over the
jobs whose hosts register again after their controller went away.

Why one module past 500 lines: it is the one place where the server's calls meet the jobs it
runs; every intake (a host joining or rejoining, a public fault, a device report) ends in the
same table of jobs and their controllers, and the start and stop of the store, leadership and
history belong to the same lifetime. Each intake's own work is in its own module
(:mod:`.cluster_job`: who joins a job and where; :mod:`.public_fault_intake`,
:mod:`.device_reports`, :mod:`.fault_intake`, :mod:`.job_record`, :mod:`.leadership`,
:mod:`.data_trace`); what stays here is routing to jobs, and taking them over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from trainguard import clock as clocks
from trainguard import names, owner_only
from trainguard.controller import (
    agent_proxy,
    cluster_agents,
    cluster_job,
    data_trace,
    device_levels,
    device_reports,
    fault_config,
    fault_history,
    fault_intake,
    job_controller,
    job_record,
    leadership,
    policy,
    public_fault_intake,
)
from trainguard.controller.fault_centre.api import JobPlacement
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import DeviceFaultEvent
from trainguard.faults.node import node_faults
from trainguard.faults.public import public_faults
from trainguard.job import events
from trainguard.proto import channel as channels
from trainguard.proto import (
    codec,
    grpc_channel,
    grpc_security,
    pubfault_messages,
    pubfault_pb2,
    versioned,
)
from trainguard.proto import control_pb2 as pb
from trainguard.store import api, kv, recorder, sqlite, trailing, urls

__all__ = ["REGISTER_TIMEOUT", "ControllerService", "recovery_from_pb",
           "recovery_to_pb"]

logger = logging.getLogger(__name__)

REGISTER_TIMEOUT = 10.0  # seconds a new stream has to register before it is closed
RECORD_TIMEOUT = 2.0  # seconds a first registration waits to learn if its job ran elsewhere
DISMISS_TIMEOUT = 30.0
"""Seconds a host taken out of its job (its node UnHealthy, its job not taken over) has to
stop its workers and end."""
DOCUMENT_POLL = 1.0  # seconds between looks at the public fault documents
LEVEL_SWEEP = 1.0  # seconds between evaluations of the levels time alone changes
STORE_NAME = "state.db"
KV_NAME = "controller.db"
FLUSH_TIMEOUT = 5.0  # seconds a job's last record may take to reach the store, its events to come
TAKEOVER_MARGIN = 5.0
"""Seconds past the hosts' own wait (their controller_wait) that a controller taking a job
over waits for the last of its hosts to register again; and the least it waits when the hosts
that came back train no more (the missing ones' ranks are gone) and spares could take over: a
host whose agent lives registers again within a second of the others."""
TAKEOVER_POLL = 0.25  # seconds between looks at the hosts of a job being taken over


def recovery_to_pb(settings: policy.RecoverySettings) -> pb.Recovery:
    message = pb.Recovery(
        max_restarts=settings.max_restarts, crash_loop_window=settings.crash_loop_window,
        crash_loop_repeats=settings.crash_loop_repeats,
        crash_loop_settle=settings.crash_loop_settle, snapshot_grace=settings.snapshot_grace,
        recover_strategy=[str(strategy) for strategy in settings.recover_strategy],
        recover_timeout=settings.recover_timeout)
    if settings.fault_retry_times is not None:
        message.fault_retry_times = settings.fault_retry_times
    return message


def recovery_from_pb(message: pb.Recovery) -> policy.RecoverySettings:
    """Raises: ValueError for values the settings refuse."""
    return policy.RecoverySettings(
        max_restarts=message.max_restarts, crash_loop_window=message.crash_loop_window,
        crash_loop_repeats=message.crash_loop_repeats,
        crash_loop_settle=message.crash_loop_settle, snapshot_grace=message.snapshot_grace,
        recover_strategy=tuple(policy.Strategy(name) for name in message.recover_strategy),
        recover_timeout=message.recover_timeout,
        fault_retry_times=(message.fault_retry_times if message.HasField("fault_retry_times")
                           else None))


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    run_root: Path
    """Where each job's state store (``<run root>/<job>/state.db``) is kept."""
    security: grpc_security.ServerSecurity = dataclasses.field(kw_only=True)
    """How callers are authenticated, and what each may do."""
    fault_config_dir: Path | None = None
    """A directory of fault configuration files, re-read on change (None: the shipped ones):
    the public faults' (levels, allowed senders) and the fault centre's (relation rules and
    timeouts, the manual-separation policy)."""
    link_timeout: float = 120.0
    """Seconds an agent has to report once registered (it starts its standby process
    first, which imports torch)."""
    host_lease: float = 2.0
    """Seconds a host's stream may stay silent before the host is lost (gRPC keepalive: a
    ping every half of it, each answered within half of it)."""
    host_wait: float = 30.0
    """Seconds a recovery waits for a spare host when a host is lost and no spare is ready
    (one may join: trainguard run again on any host), and a takeover for one to take a node
    whose host did not register again; then the job fails, saying so."""
    store: str | None = None
    """The URL of the store of what the controller must not lose (the devices' fault
    history, the jobs' records, the leadership); None: ``sqlite://<run root>/controller.db``."""
    leader_ttl: float = 2.0
    """Seconds a controller leads after its last word to the store: a standby sharing the
    store takes over within it when the leader dies."""

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite://{self.run_root / KV_NAME}"

    def __post_init__(self) -> None:
        for name in ("link_timeout", "host_lease", "leader_ttl"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.replace('_', '-')} must be > 0 seconds, got "
                                 f"{getattr(self, name)}")
        if not self.host_wait >= 0:
            raise ValueError(f"host-wait must be >= 0 seconds, got {self.host_wait}")


class ControllerService:
    def __init__(self, settings: ControllerSettings, *, clock: clocks.Clock | None = None,
                 on_event: Callable[[events.Event], None] | None = None) -> None:
        self.settings = settings
        self._clock = clock or clocks.SystemClock()
        self._on_event = on_event
        self._jobs: dict[str, cluster_job.ClusterJob] = {}
        self._runs: set[asyncio.Task[None]] = set()
        self.data_trace = data_trace.DataTrace(self._jobs.get)
        self._server = grpc_channel.ControlServer(
            self._agent_joined, security=settings.security, on_status=self.status,
            on_public_fault=self._public_fault, on_devices=self._take_devices,
            on_device_request=self._device_request, data_trace=self.data_trace,
            lease=settings.host_lease)
        self._fault_config = (fault_config.FaultConfigDirectory(settings.fault_config_dir)
                              if settings.fault_config_dir is not None else None)
        self._poll_fault_config()
        self.public_faults = public_fault_intake.PublicFaultIntake(
            self._fault_config.config.public if self._fault_config is not None
            else public_faults.PublicFaultConfig.default(), clock=self._clock)
        self._documents = public_fault_intake.PublicFaultDocuments(
            settings.run_root / public_fault_intake.DOCUMENTS_DIRECTORY, self.public_faults)
        self.results: dict[str, job_controller.JobResult] = {}
        """The last result of each job run here, by job id."""
        self._held = contextlib.AsyncExitStack()  # the store and the history, while serving
        self._store: kv.KeyValueStore | None = None
        self._leadership: leadership.Leadership | None = None
        self._device_faults: fault_history.DeviceFaultHistory | None = None
        self._device_reports: device_reports.DeviceReports | None = None
        self._intake: fault_intake.FaultIntake | None = None

    @property
    def deposed(self) -> asyncio.Event:
        """Set when this controller learns it no longer leads: it must stop (its hosts go
        to the new leader)."""
        assert self._leadership is not None, "start first"
        return self._leadership.lost

    @property
    def deposed_reason(self) -> str:
        return self._leadership.lost_reason if self._leadership is not None else ""
        self._watch_documents: asyncio.Task[None] | None = None

    def status(self) -> pb.ClusterStatus:
        """Every job known here: its hosts (holding ranks, lost, spare) and its generation;
        every host that reported its devices, with their levels and jobs."""
        status = pb.ClusterStatus()
        for name, job in sorted(self._jobs.items()):
            first = job.first
            entry = status.jobs.add(job=name, state="running" if job.started else "joining",
                                    nnodes=first.nnodes, nproc_per_node=first.nproc_per_node)
            hosts = job.agents.hosts if job.agents is not None else job.hosts
            if job.agents is not None and job.agents.generation is not None:
                entry.generation = job.agents.generation
            nproc = first.nproc_per_node
            for node, proxy in sorted(hosts.items()):
                entry.hosts.add(place=node, host=proxy.host,
                                state="lost" if proxy.gone is not None else "holding ranks",
                                ranks=range(node * nproc, (node + 1) * nproc))
            for proxy in job.spares.waiting():
                entry.hosts.add(place=proxy.node_rank, host=proxy.host, state="spare")
        if self._device_reports is not None and self._intake is not None:
            reports = self._device_reports
            status.nodes.extend(self._intake.node_status(node, reports.devices(node) or (),
                                                         reports.held(node))
                                for node in reports.nodes())
        return status

    async def start(self, listen: str, *,
                    on_standby: Callable[[str], None] = lambda leader: None) -> int:
        """Open the store, lead (standing by, while another controller sharing the store
        leads: ``on_standby`` is told its address), take up the devices' fault history, and
        listen on ``HOST:PORT``; returns the port.

        Raises:
            OSError: the address cannot be bound, or the store cannot be opened or read (the
                message names it).
        """
        self.settings.run_root.mkdir(parents=True, exist_ok=True)
        url = self.settings.store_url
        try:
            store = self._store = urls.open_store(url)
            self._held.push_async_callback(store.close)
            self._leadership = leadership.Leadership(store, ttl=self.settings.leader_ttl)
            fence = await self._leadership.campaign(listen, on_standby=on_standby)
            self._held.push_async_callback(self._leadership.resign)
            self._device_faults = await self._held.enter_async_context(
                fault_history.kept(store, fence=fence))
            nodes = trailing.TrailingWriter(store, what="the hosts' devices", fence=fence)
            centre = trailing.TrailingWriter(store, what="the fault centre's documents",
                                             fence=fence)
            reports = self._device_reports = device_reports.DeviceReports(
                self._grade_device, nodes, clock=self._clock)
            intake = self._intake = fault_intake.FaultIntake(
                await fault_intake.restored_centre(store), self._device_faults, centre,
                clock=self._clock, placements=self._placements, job_on=self._job_on,
                devices_of=reports.devices)
            reports.on_documents = intake.host_documents
            if self._fault_config is not None:
                config = self._fault_config.config
                intake.centre.reconfigure(relation=config.relation, policy=config.separation)
            intake.on_node_unhealthy = self._fence_hosts
            for writer, name in ((nodes, "node-documents"), (centre, "fault-centre-documents")):
                writing = asyncio.create_task(writer.run(), name=f"trainguard-{name}")
                self._held.callback(writing.cancel)
            self._held.push_async_callback(intake.close)
        except (urls.StoreUrlError, kv.UnavailableError, api.StoreError) as error:
            await self._held.aclose()
            raise OSError(f"the store {url}: {error}") from error
        try:
            port = await self._server.start(listen)
            host = listen.rpartition(":")[0]
            fence = await self._leadership.announce(f"{host}:{port}")
            self._device_faults.writer.fence = nodes.fence = centre.fence = fence
        except (OSError, kv.ConflictError, kv.UnavailableError) as error:
            await self._held.aclose()
            raise OSError(f"cannot serve on {listen}: {error}") from error
        self._watch_documents = asyncio.create_task(self._poll_documents(),
                                                    name="public-fault-documents")
        levels = asyncio.create_task(device_levels.watch(
            [self._device_faults], config=None, interval=LEVEL_SWEEP, record=lambda event: None,
            clock=self._clock, job="", changed=self._level_changed), name="device-levels")
        self._held.callback(levels.cancel)
        evaluating = asyncio.create_task(intake.run(), name="fault-centre")
        self._held.callback(evaluating.cancel)
        return port

    async def stop(self) -> None:
        for run in [*self._runs, *filter(None, [self._watch_documents])]:
            run.cancel()
        await asyncio.gather(*self._runs, *filter(None, [self._watch_documents]),
                             return_exceptions=True)
        await self._server.stop()
        await self._held.aclose()

    async def _public_fault(self, request: pubfault_pb2.PublicFaultRequest
                            ) -> pubfault_pb2.RespStatus:
        caller = grpc_security.CALLER.get(grpc_security.ANONYMOUS).name
        result = self.public_faults.take(pubfault_messages.to_document(request),
                                         source=f"gRPC caller {caller}")
        await self._hand_over(result)
        return pubfault_pb2.RespStatus(code=result.code, info=result.info)

    def _poll_fault_config(self) -> bool:
        """Read the fault configuration directory's changes; whether the configuration in force
        changed (never at the first read)."""
        if self._fault_config is None:
            return False
        changed, problems = self._fault_config.poll()
        for problem in problems:
            logger.warning("fault configuration: %s", problem.describe())
        return changed

    async def _poll_documents(self) -> None:
        """Read the public fault documents as they appear or change, and the fault
        configuration (public faults, the fault centre's) when it changes, each second."""
        while True:
            try:
                if await asyncio.to_thread(self._poll_fault_config):
                    assert self._fault_config is not None
                    assert self._intake is not None
                    config = self._fault_config.config
                    self.public_faults.reconfigure(config.public)
                    self._intake.centre.reconfigure(relation=config.relation,
                                                    policy=config.separation)
                    logger.info("fault configuration re-read from %s",
                                self._fault_config.directory)
                for _, result in await asyncio.to_thread(self._documents.poll):
                    if isinstance(result, public_fault_intake.IntakeResult):
                        await self._hand_over(result)
            except Exception:  # the gRPC intake goes on; the next look may succeed
                logger.exception("reading the public fault documents in %s failed",
                                 self._documents.directory)
            await asyncio.sleep(DOCUMENT_POLL)

    async def _take_devices(self, report: pb.DeviceReport) -> pb.DeviceReportAck:
        assert self._device_reports is not None, "start first"
        return await self._device_reports.take(report)

    async def _grade_device(self, event: DeviceFaultEvent) -> device_health.DeviceHealth:
        """Graded, and through the fault centre to the job on the device, if one runs there
        (an isolating level moves its rank off the device)."""
        assert self._intake is not None, "start first"
        return await self._intake.device_fault(
            event, reported_by=f"the device report of {event.device.partition('/')[0]}")

    async def _device_request(self, request: pb.DeviceRequest, *, separate: bool
                              ) -> pb.DeviceAnswer:
        """An operator separates or releases a device (role operator, checked before)."""
        assert self._intake is not None, "start first"
        act = self._intake.separate if separate else self._intake.release
        try:
            return pb.DeviceAnswer(ok=True, text=act(request.node, request.device,
                                                     request.reason))
        except fault_intake.DeviceRequestError as error:
            return pb.DeviceAnswer(ok=False, text=str(error))

    def _placements(self) -> dict[str, tuple[JobPlacement, job_controller.JobController]]:
        """The running jobs' devices and ranks, for the fault centre."""
        return {name: (JobPlacement(
            name, job.agents.placement, retries_steps=policy.Strategy.RETRY
            in job.controller.settings.recover_strategy), job.controller)
            for name, job in list(self._jobs.items())
            if job.controller is not None and job.agents is not None}

    def _job_on(self, node: str) -> job_controller.JobController | None:
        """The controller of the running job with ranks on ``node``'s host, if any."""
        for job in list(self._jobs.values()):
            if job.controller is not None and job.agents is not None and any(
                    proxy.host == node for proxy in job.agents.hosts.values()):
                return job.controller
        return None

    def _fence_hosts(self, node: str, why: str) -> None:
        """``node`` is UnHealthy: its host leaves every job it serves, as a lost host would
        (its ranks go to a spare, or the job goes on as the loss of a host allows), and its
        run ends with :data:`~trainguard.faults.node.node_faults.UNHEALTHY_EXIT_CODE`."""
        for job in list(self._jobs.values()):
            proxies = {*job.hosts.values(), *job.spares.waiting(),
                       *(job.agents.hosts.values() if job.agents is not None else ())}
            for proxy in proxies:
                if proxy.host == node and proxy.gone is None and not job.ended.is_set():
                    logger.warning("host %s leaves job %s: %s", node, job.first.job, why)
                    proxy.fence(why)

    def _level_changed(self, health: device_health.DeviceHealth) -> None:
        """A level changed with time alone: to the job on the device's host, if one runs."""
        if self._intake is not None:
            self._intake.level_changed(health)

    async def _hand_over(self, result: public_fault_intake.IntakeResult) -> None:
        """Each fault a message kept, to every running job on a device it names."""
        if result.message is None:
            return
        assert self._intake is not None, "start first"
        await public_fault_intake.hand_to_job(
            result.message, self._intake,
            [proxy for job in list(self._jobs.values()) if job.controller is not None
             and job.agents is not None
             for proxy in (*job.agents.hosts.values(), *job.spares.waiting())],
            wall=self._clock.wall())

    async def _agent_joined(self, channel: channels.Channel, peer: str) -> None:
        try:
            async with asyncio.timeout(REGISTER_TIMEOUT):
                envelope = codec.unpack(await channel.receive())
        except (TimeoutError, channels.ChannelClosedError, versioned.ProtocolError) as error:
            logger.warning("%s did not register: %s", peer, error or "timed out")
            return
        if envelope.WhichOneof("body") != "register":
            logger.warning("%s sent a %s before registering: closed", peer,
                           envelope.WhichOneof("body"))
            return
        register = envelope.register
        try:
            # Both name a directory and store keys here; a host's also a public fault's node.
            names.job_id(register.job, what="job (--rdzv-id)")
            names.node_name(register.host, what="host (--node-name)")
        except names.InvalidNameError as error:
            logger.warning("refused %s: %s", peer, error)
            channel.send(versioned.serialize(pb.Envelope(registered=pb.Registered(
                refused=pb.Refusal(reason=str(error))))))
            return
        job = self._jobs.get(register.job)
        if job is None:
            running = await self._was_running(register.job)
            job = self._jobs.setdefault(register.job,
                                        cluster_job.ClusterJob(register, running=running))
        try:
            unhealthy = self._intake.unhealthy(register.host) if self._intake else None
            if unhealthy is not None:
                raise cluster_job.JoinError(
                    f"host {register.host} may not join job {register.job}: "
                                f"{unhealthy}")
            place, spare = job.admit(register)
        except cluster_job.JoinError as error:
            logger.warning("refused: %s", error)
            if not job.claimed:
                self._jobs.pop(register.job, None)
            channel.send(versioned.serialize(pb.Envelope(registered=pb.Registered(
                refused=pb.Refusal(reason=str(error))))))
            return
        channel.send(versioned.serialize(pb.Envelope(registered=pb.Registered(
            placement=pb.Placement(node_rank=place, nnodes=register.nnodes, spare=spare)))))
        proxy = agent_proxy.AgentProxy(channel, clock=self._clock.monotonic)
        try:
            try:
                await proxy.connect(timeout=self.settings.link_timeout)
            except agent_proxy.AgentCommandError as error:
                logger.warning("host %s (place %d of job %s) left before it reported: %s",
                               register.host, place, register.job, error)
                return
            what = "as a spare" if spare else f"as node {place}"
            if job.profiling.any:  # before it holds ranks: its processes start with it
                await self.data_trace.tell(job, [proxy])
            if spare:
                job.spares.add(proxy)
            else:
                job.hosts[place] = proxy
            if job.adopting and not job.started and len(job.hosts) + len(job.spares) == 1:
                # A new host first: those that register again do so within seconds, but
                # their wait is not known yet.
                wait = (job.first.rejoin.wait if job.first.HasField("rejoin")
                        else self.settings.host_wait) + TAKEOVER_MARGIN
                bound = asyncio.create_task(self._bound_takeover(job, wait),
                                            name=f"job-{register.job}-takeover")
                self._runs.add(bound)
                bound.add_done_callback(self._runs.discard)
            logger.info("host %s joined job %s %s (%d of %d hosts, %d spares)", register.host,
                        register.job, what, len(job.hosts), register.nnodes, len(job.spares))
            if job.complete and not job.started:
                self._start(job)
            # The stream lives as long as the job, or until the host goes.
            gone = asyncio.create_task(proxy.wait_gone())
            ended = asyncio.create_task(job.ended.wait())
            try:
                await asyncio.wait({gone, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (gone, ended):
                    task.cancel()
            if proxy.gone is not None and not job.ended.is_set():
                logger.warning("host %s (place %d of job %s) is gone: %s", register.host,
                               place, register.job, proxy.gone)
            if isinstance(proxy.gone, agent_proxy.HostFencedError):
                await proxy.dismiss(pb.EndJob(
                    exit_code=node_faults.UNHEALTHY_EXIT_CODE,
                    outcome=str(events.JobOutcome.STOPPED), host_leaves=True,
                    reason=f"{proxy.gone}: this host left job {register.job}"),
                    timeout=DISMISS_TIMEOUT)
        finally:
            job.release(place)
            await proxy.close()

    async def _was_running(self, name: str) -> bool:
        """Whether the store holds a record of job ``name``: a controller that went away
        ran it (a record goes when its job ends). A store that cannot say counts as no."""
        if self._store is None:
            return False
        try:
            return await asyncio.wait_for(job_record.load(self._store, name),
                                          RECORD_TIMEOUT) is not None
        except ValueError:  # there, if unreadable
            return True
        except (TimeoutError, kv.UnavailableError) as error:
            logger.warning("job %s: the store did not say whether it ran under another "
                           "controller (%s); taken as new", name, error or "no answer in time")
            return False

    def _start(self, job: cluster_job.ClusterJob) -> None:
        """Run ``job``, a host at every node: no host joins it but as a spare from now."""
        job.started = True
        run = asyncio.create_task(self._run(job), name=f"job-{job.first.job}")
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def _bound_takeover(self, job: cluster_job.ClusterJob, wait: float) -> None:
        """A job being taken over whose hosts have not all registered again within ``wait``
        seconds never will: the missing ones are lost, or have stopped themselves after a
        dying checkpoint. Nor will they once none of those that came back trains on, past
        :data:`TAKEOVER_MARGIN`, where spares can take their place (a lost host's ranks are
        not awaited for minutes). Spares that registered again take their nodes, and the job
        goes on (a restart: the new hosts' ranks have nothing of their own in memory).
        Without enough spares, the hosts that came back stop too, what their memory holds
        written to disk, and are told why, rather than train on without their peers while
        nothing can recover them. Spares short, it waits for more as a host's loss does
        (``host_wait``): a host started to replace a missing one joins as a spare."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not job.started and (waited := loop.time() - start) < wait:
            if waited >= TAKEOVER_MARGIN and self._lost_in_takeover(job):
                break
            await asyncio.sleep(TAKEOVER_POLL)
        if job.started:
            return
        job.started = True  # no host joins it any more but as a spare
        name = job.first.job
        waited = min(loop.time() - start, wait)  # the poll's overshoot is no part of it
        if await self._spares_take(job, waited):
            self._start(job)
            return
        reason = (f"job {name} could not be taken over: its host(s) at node rank(s) "
                  f"{job.missing} did not register again within {waited:.3g} s, and no spare "
                  f"host took their place within {self.settings.host_wait:g} s more; stopped "
                  "(it resumes from its checkpoints when started again)")
        logger.error("%s", reason)
        end = pb.EndJob(exit_code=1, outcome=str(events.JobOutcome.STOPPED), reason=reason)
        try:
            await asyncio.gather(*(proxy.dismiss(end, timeout=DISMISS_TIMEOUT, flush=True)
                                   for proxy in [*job.hosts.values(), *job.spares.waiting()]))
        finally:
            self._jobs.pop(name, None)
            job.ended.set()

    @staticmethod
    def _lost_in_takeover(job: cluster_job.ClusterJob) -> bool:
        """Whether the hosts a job being taken over misses are lost, and spares can take their
        nodes: no host that came back trains on (their ranks' peers on the missing hosts are
        gone: a host whose ranks lived would train with theirs)."""
        return (len(job.spares) >= len(job.missing)
                and not any(proxy.training for proxy in job.hosts.values()))

    async def _spares_take(self, job: cluster_job.ClusterJob, waited: float) -> bool:
        """The spares of ``job`` take its missing nodes, one each, those short of spares
        waiting for one up to ``host_wait`` seconds in all; whether every one was taken."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.host_wait
        missing = job.missing
        if len(job.spares) < len(missing):
            logger.warning("job %s: the host(s) at node rank(s) %s did not register again "
                           "within %.3g s of the takeover and %d spare(s) are here; waiting up "
                           "to %g s for spare hosts (trainguard run on any host joins as one)",
                           job.first.job, missing, waited, len(job.spares),
                           self.settings.host_wait)
        for node in missing:
            spare = await job.spares.place(node, wait=max(0.0, deadline - loop.time()))
            if spare is None:
                return False
            logger.warning("job %s: spare host %s takes the ranks of node %d, whose host did "
                           "not register again within %.3g s of the takeover", job.first.job,
                           spare.host, node, waited)
            job.hosts[node] = spare
            job.replaced.append(node)
        return True

    async def _take_over(self, job: cluster_job.ClusterJob) -> tuple[job_record.JobRecord,
                                                          cluster_agents.ClusterGeneration | None]:
        """The record the last controller left of ``job``, and the generation its hosts run,
        if this controller may go on with it: they all run it, and it is not one whose fault
        was being recovered (that recovery's restart is spent: the job restarts instead)."""
        assert self._store is not None
        assert job.agents is not None
        name = job.first.job
        try:
            record = await job_record.load(self._store, name)
        except (ValueError, kv.UnavailableError) as error:
            logger.warning("job %s is taken over without its record: %s", name, error)
            record = None
        adopted, newest = await job.agents.adopt()
        if record is None:
            record = job_record.JobRecord(job=name, generation=max(newest, 0))
        elif record.recovering and adopted is not None and adopted.number <= record.generation:
            adopted.close()
            adopted = None
        logger.info("job %s taken over: %s", name, f"going on with generation {adopted.number}"
                    if adopted is not None else f"restarting after generation {newest}")
        return dataclasses.replace(record, generation=max(record.generation, newest)), adopted

    async def _take_events(self, journal: job_record.JobJournal,
                           store: sqlite.SqliteStore) -> None:
        """The events the job's earlier controllers recorded join this one's, under their
        ids: one run root holds them all (a store that cannot be read leaves them out)."""
        assert self._store is not None
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT):
                taken = await journal.take_events(self._store)
        except (TimeoutError, kv.UnavailableError) as error:
            logger.warning("job %s is taken over without its earlier events: %s",
                           journal.job, error or "the store did not answer in time")
            return
        added = store.insert_events(taken)
        logger.info("job %s: %d event(s) its earlier controllers recorded are kept here too",
                    journal.job, added)

    async def _run(self, job: cluster_job.ClusterJob) -> None:
        first = job.first
        run_dir = self.settings.run_root / first.job
        owner_only.make_dir(run_dir)
        store = sqlite.SqliteStore.open(run_dir / STORE_NAME)
        assert self._store is not None, "start first"
        assert self._leadership is not None
        journal = trailing.TrailingWriter(self._store, what=f"the record of job {first.job}",
                                          fence=self._leadership.fence)
        record = job_record.JobJournal(journal, first.job)
        if job.adopting:
            await self._take_events(record, store)
        events_recorder = job.recorder = recorder.EventRecorder(store, self._clock,
                                                                mirror=record.event)
        if self._on_event is not None:
            events_recorder.subscribe(self._on_event)
        agents = job.agents = cluster_agents.ClusterAgents(
            job.hosts, nproc_per_node=first.nproc_per_node, spares=job.spares,
            host_wait=self.settings.host_wait, taken=job.replaced)
        if self._intake is not None:
            intake = self._intake
            events_recorder.subscribe(
                lambda event: intake.job_event(first.job, agents.placement, event))
        try:
            controller = job.controller = job_controller.JobController(
                recovery_from_pb(first.recovery), job=first.job,
                world_size=first.nnodes * first.nproc_per_node, agent=agents,
                recorder=events_recorder, clock=self._clock, device_faults=self._device_faults,
                journal=record)
            resume, adopted = await self._take_over(job) if job.adopting else (None, None)
            tasks = [asyncio.create_task(agents.order_persists(first.persist_interval),
                                         name=f"job-{first.job}-persists"),
                     asyncio.create_task(journal.run(), name=f"job-{first.job}-journal")]
            try:
                result = await controller.run(resume=resume, adopted=adopted, restart_reason=(
                    f"spare hosts took node(s) {job.replaced}, whose host(s) did not register "
                    "again" if job.replaced else None))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                with contextlib.suppress(kv.UnavailableError, kv.FencedError):
                    await asyncio.wait_for(journal.flush(), FLUSH_TIMEOUT)
            self.results[first.job] = result
            end = pb.EndJob(
                exit_code=result.exit_code, outcome=str(result.outcome), reason=result.reason,
                generations=result.generations, restarts_used=result.restarts_used,
                resume_step=result.resume_step, wall_seconds=result.wall_seconds,
                errors=result.errors)
        except Exception as error:  # the hosts must hear it, not wait for a controller
            logger.exception("job %s failed in the controller", first.job)
            with contextlib.suppress(Exception):
                await agents.stop_workers()
                await agents.flush_checkpoints()
            end = pb.EndJob(exit_code=1, outcome=str(events.JobOutcome.FAILED),
                            reason=f"the controller failed: {type(error).__name__}: {error}")
        try:
            await agents.end_job(end)
        finally:
            store.close()
            self._jobs.pop(first.job, None)
            job.ended.set()
