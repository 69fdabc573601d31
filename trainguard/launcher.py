"""``trainguard run``: one host's agent, and on one node the controller and state store too.

Wiring only. On one node the state store is SQLite in the run directory and the controller
drives this host's agent through in-process queues; across hosts the agent joins the job's
controller (:mod:`trainguard.agent.joining`) and is driven over its gRPC stream, and the job's
end is what the controller says (``_ControllerAway``). SIGINT/SIGTERM (torchrun's
``--signals-to-handle``) stop the job gracefully with a dying checkpoint; a second signal stops
it at once.

Why one module past 500 lines: both ways of being driven share everything else here (the
directories, the store, the snapshot memory, the agent, its background tasks, the host's
detectors, the summary) and differ only in the ``_Driver`` and where the host's device reports
go (to the job's controller here, in process, or over gRPC). The driver here is a few dozen
lines; the one away (about 100: rejoining a successor controller, stopping alone when none
takes the host back) needs the agent and the registration this module builds, and the layers
allow it nowhere lower (it joins the agent's side and the controller's results). If it grows
further, ``launcher`` becomes a package with the driver away as its own module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from trainguard import __version__, names, owner_only
from trainguard import clock as clocks
from trainguard.agent import (
    checkpoint_memory,
    controller_link,
    device_watch,
    host_detectors,
    joining,
    node_agent,
    persister_client,
    rendezvous_stores,
    slow_node_watch,
    snapshot_pacing,
    snapshot_slots,
    standby_client,
    step_statistics,
    workers,
)
from trainguard.controller import (
    agent_proxy,
    cluster_view,
    device_levels,
    fault_config,
    fault_history,
    job_controller,
    local_centre,
    policy,
    service,
)
from trainguard.detect import heartbeat, slow_node
from trainguard.faults import process
from trainguard.faults.device import device_health
from trainguard.faults.node import node_faults
from trainguard.ipc import checkpoint_layout
from trainguard.job import events
from trainguard.proto import channel, control_pb2, grpc_channel
from trainguard.store import api as store_api
from trainguard.store import recorder, sqlite, sqlite_kv
from trainguard.telemetry import live, metrics

__all__ = [
    "CHECKPOINT_BEHIND_EXIT_CODE",
    "LaunchError",
    "RunObserver",
    "RunReport",
    "RunSettings",
    "base_environment",
    "run",
]

logger = logging.getLogger(__name__)

STORE_NAME = "state.db"
LIVE_INTERVAL = 1.0  # seconds between updates of the live document and the metrics' rank view
SNAPSHOT_REVIEW_INTERVAL = 2.0  # seconds between reviews of the snapshot interval
CHECKPOINT_BEHIND_EXIT_CODE = 3
CONTROLLER_LINK_TIMEOUT = 10.0  # seconds for this host's agent to first report to the controller
"""The exit code of a job that succeeded while its checkpoint on disk is behind its state in
memory (the checkpoint directory filled up or turned read-only): the run is not done as far as
a later resume is concerned. torchrun's codes are kept otherwise: 0 success, 1 failure."""


class LaunchError(RuntimeError):
    """A problem found before any worker starts; the message names it."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
    agent: node_agent.AgentSettings
    heartbeat: heartbeat.HeartbeatSettings = dataclasses.field(
        default_factory=heartbeat.HeartbeatSettings)
    checkpoint: checkpoint_memory.CheckpointSettings = dataclasses.field(
        default_factory=checkpoint_memory.CheckpointSettings)
    recovery: policy.RecoverySettings = dataclasses.field(
        default_factory=policy.RecoverySettings)
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                                           signal.SIGQUIT)
    snapshot_memory: int = 0
    """Bytes of snapshot memory to reserve per slot (two per rank) before any worker starts, so
    that too little memory is an error at once; 0 reserves at the first snapshot."""
    progress_interval: float = 5.0
    """Seconds between progress lines on the console and step-progress events (0: none)."""
    fault_config_dir: Path | None = None
    """A directory with the original's fault configuration files (faultCode.json,
    faultCustomization.json, ...), re-read when one changes; None: the shipped defaults."""
    fault_config_interval: float = 2.0
    """Seconds between looks for changed fault configuration files, and between evaluations
    of the devices' levels, which time alone can change (> 0)."""
    metrics_port: int | None = None
    """Serve Prometheus metrics at /metrics on this port (0: a free port, printed at start);
    unset: no metrics."""
    metrics_address: str = "0.0.0.0"
    """Address the metrics endpoint listens on: every interface, as exporters do for a scraper
    on another host; 127.0.0.1 keeps it on this host."""
    detectors: host_detectors.DetectorSettings = dataclasses.field(
        default_factory=host_detectors.DetectorSettings)
    node_name: str | None = None
    """This host's name in its documents on one host (across hosts: ``cluster.node_name``);
    None: the host name, lower-cased, or localhost when that is no node name."""
    cluster: joining.ClusterSettings | None = None
    """A job across hosts: this host's agent joins the controller named there, which drives
    the job; None: the controller runs here, for this host alone."""

    def __post_init__(self) -> None:
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics-port must be 0 to 65535, got {self.metrics_port}")
        if self.snapshot_memory < 0:
            raise ValueError(f"snapshot-memory must be >= 0 bytes, got {self.snapshot_memory}")
        if not self.progress_interval >= 0:  # NaN fails this too
            raise ValueError(f"progress-interval must be >= 0 seconds, got "
                             f"{self.progress_interval}")
        if not self.fault_config_interval > 0:
            raise ValueError("fault-config-interval must be > 0 seconds, got "
                             f"{self.fault_config_interval}")
        if self.node_name is not None:
            names.node_name(self.node_name, what="node-name")


@dataclasses.dataclass(frozen=True)
class RunReport:
    result: job_controller.JobResult
    run_dir: Path
    store_path: Path
    checkpoint_dir: Path
    step_seconds: float | None  # median time from one step's start to the next's, rank 0
    snapshot_seconds: float | None  # median time training was blocked per snapshot
    training_seconds: float | None  # first step started -> job ended
    checkpoint_lag: checkpoint_memory.CheckpointLag | None = None  # the disk is behind memory
    snapshot_every: int = 1  # steps between snapshots at the end (--snapshot-every)

    @property
    def exit_code(self) -> int:
        """The job's own, unless it succeeded with its checkpoint on disk behind."""
        if self.result.exit_code == 0 and self.checkpoint_lag is not None:
            return CHECKPOINT_BEHIND_EXIT_CODE
        return self.result.exit_code

    @property
    def goodput(self) -> float | None:
        """Share of the training time that produced the final state: steps kept x step time."""
        return events.goodput(steps_completed=self.result.resume_step,
                              step_seconds=self.step_seconds,
                              training_seconds=self.training_seconds)


class RunObserver(Protocol):
    def started(self, *, run_dir: Path, store_path: Path, checkpoint_dir: Path) -> None: ...
    def event(self, event: events.Event) -> None: ...
    def progress(self, progress: step_statistics.Progress) -> None: ...
    def serving_metrics(self, *, url: str) -> None: ...


def base_environment(nproc_per_node: int, environ: Mapping[str, str] = os.environ
                     ) -> dict[str, str]:
    """The workers' shared environment: ours, with two defaults where ours has none:
    OMP_NUM_THREADS=1 for several ranks (as torchrun), and THP_MEM_ALLOC_ENABLE=1, which has
    torch's CPU allocator put tensors of 2 MB and more on transparent huge pages (where the
    kernel allows them: ``madvise`` or ``always``). A killed rank is seen only once the kernel
    has freed its memory, and huge pages free faster: a 400 MB process is reaped 22-47 ms
    after kill -9 against 55-80 ms (README). The standby process gets this environment too:
    torch reads the variable once, at its first allocation, which the standby makes when it
    imports torch."""
    env = dict(environ)
    if nproc_per_node > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = "1"
    env.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return env


async def run(settings: RunSettings, *, observer: RunObserver | None = None) -> RunReport:
    """Run the job to its end.

    Raises:
        LaunchError: the checkpoint directory or the snapshot memory is unusable (nothing has
            started).
    """
    agent_settings = settings.agent
    if settings.fault_config_dir is not None and not settings.fault_config_dir.is_dir():
        raise LaunchError(f"fault-config-dir: {settings.fault_config_dir} is not a directory")
    try:
        slow = slow_node_watch.asked(settings.detectors.slow_node)
    except slow_node.SlowNodeSettingsError as error:
        raise LaunchError(f"slow-node: {error}") from error
    joined = None
    if settings.cluster is not None:
        joined, agent_settings = await _join(settings, settings.cluster)
    if slow is not None and not agent_settings.profiling_switch.any:
        # Its step times come from the step marks (the original turns light profiling on).
        agent_settings = dataclasses.replace(agent_settings, profiling="light")
    try:
        return await _run(settings, agent_settings, joined, observer, slow)
    finally:
        if joined is not None:
            await joined.connection.disconnect()


@dataclasses.dataclass
class _Joined:
    """A host of a job across hosts: its stream to the controller, and how it registered."""

    connection: grpc_channel.AgentConnection
    register: control_pb2.Register
    cluster: joining.ClusterSettings


async def _join(settings: RunSettings, cluster: joining.ClusterSettings
                ) -> tuple[_Joined, node_agent.AgentSettings]:
    """Register this host with the job's controller; its settings, placed.

    Raises:
        LaunchError: refused, or the controller was not reached in time.
    """
    agent = settings.agent
    try:
        address = cluster.local_addr or joining.local_address(cluster.endpoints[0])
    except OSError as error:
        raise LaunchError(f"no route to the controller at {cluster.endpoint}: {error}") from error
    program = agent.program
    register = control_pb2.Register(
        job=agent.run_id, nnodes=cluster.nnodes, max_nodes=cluster.places,
        nproc_per_node=agent.nproc_per_node,
        program=shlex.join([program.target, *program.args]), version=__version__,
        host=cluster.node_name, address=address, dp_size=agent.dp_size or 0,
        recovery=service.recovery_to_pb(settings.recovery),
        persist_interval=settings.checkpoint.persist_interval)
    if cluster.node_rank is not None:
        register.node_rank = cluster.node_rank
    try:
        connection, placement = await joining.join(cluster, register,
                                                   on_retry=logger.warning)
    except joining.JoinRefusedError as error:
        raise LaunchError(str(error)) from error
    logger.warning("joined job %s at %s %s", agent.run_id, cluster.endpoint,
                   "as a spare host" if placement.spare else
                   f"as node {placement.node_rank} of {placement.nnodes}")
    return _Joined(connection, register, cluster), agent.placed(
        node_rank=placement.node_rank, nnodes=placement.nnodes, address=address,
        spare=placement.spare)


def _checkpoint_dir(explicit: Path | None, agent: node_agent.AgentSettings) -> Path:
    """``--checkpoint-dir`` (default: the run directory's ``checkpoints``); across hosts, the
    node's own under the job's (``<dir>/node-<k>``, default dir ``<run root>/<job>/checkpoints``):
    a spare that takes node k's ranks goes on in node k's, where a shared disk, or that host
    come back, holds its checkpoints."""
    if agent.nnodes == 1:
        return explicit or agent.run_dir / "checkpoints"
    root = explicit or agent.run_dir.parent / "checkpoints"
    return checkpoint_layout.node_directory(root, agent.node_rank)


async def _run(settings: RunSettings, agent_settings: node_agent.AgentSettings,
               joined: _Joined | None, observer: RunObserver | None,
               slow: slow_node.SlowNodeSettings | None) -> RunReport:
    run_dir = agent_settings.run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)  # the run root may be shared by users
    owner_only.make_dir(run_dir)
    directory = checkpoint_layout.CheckpointDirectory(
        _checkpoint_dir(settings.checkpoint.checkpoint_dir, agent_settings))
    slots = snapshot_slots.SnapshotSlots()
    clock = clocks.SystemClock()
    tally = live.JobTally(max_restarts=settings.recovery.max_restarts, clock=clock)
    exporter = (metrics.MetricsExporter(run=agent_settings.run_id, tally=tally, clock=clock)
                if settings.metrics_port is not None else None)
    try:
        directory.ensure_writable()
        store = sqlite.SqliteStore.open(run_dir / STORE_NAME)
        for rank in agent_settings.ranks:
            for slot in range(snapshot_slots.SLOTS_PER_RANK):
                if settings.snapshot_memory:
                    slots.grant(rank, slot, settings.snapshot_memory)
        server = _serve_metrics(exporter, settings)
    except (checkpoint_layout.CheckpointError, store_api.StoreError,
            snapshot_slots.SnapshotMemoryError) as error:
        slots.close()
        raise LaunchError(str(error)) from error
    except LaunchError:
        slots.close()
        raise
    events_recorder = recorder.EventRecorder(store, clock)
    env = base_environment(agent_settings.nproc_per_node)
    if agent_settings.nnodes > 1:
        # gloo finds its address from the hostname, and falls back to loopback when that does
        # not resolve: peers on other hosts would then be told 127.0.0.1. The interface that
        # reaches the controller reaches the other hosts.
        interface = joining.interface_of(agent_settings.master_addr)
        if interface is not None and "GLOO_SOCKET_IFNAME" not in env:
            env["GLOO_SOCKET_IFNAME"] = interface
    memory = checkpoint_memory.CheckpointMemory(
        settings.checkpoint, job=agent_settings.run_id, world_size=agent_settings.world_size,
        ranks=agent_settings.ranks,
        directory=directory, slots=slots, persister=persister_client.PersisterClient(env=env),
        record=events_recorder.record, clock=clock, persist_on_order=joined is not None)

    def note_injection(rank: int, kind: object, at_step: int | None) -> None:
        events_recorder.record(events.FaultInjectionRequested(
            job=agent_settings.run_id, rank=rank, kind=str(kind), at_step=at_step))

    agent = node_agent.NodeAgent(
        agent_settings, detector=heartbeat.HangDetector(settings.heartbeat), checkpoints=memory,
        clock=clock, base_env=env, on_injection=note_injection, record=events_recorder.record)
    config = (fault_config.FaultConfigDirectory(settings.fault_config_dir)
              if settings.fault_config_dir is not None else None)
    if config is not None:
        _, problems = config.poll()
        events_recorder.record(events.FaultConfigLoaded(
            job=agent_settings.run_id, directory=str(config.directory), reloaded=False,
            problems=[problem.describe() for problem in problems]))
    table, customization = ((config.config.codes, config.config.customization)
                            if config is not None else (None, None))
    held = contextlib.AsyncExitStack()
    engine: device_health.FaultEngine
    if joined is None:
        # The devices' fault history outlives this run: a run again with the same id
        # counts it. (Across hosts, the job's controller keeps it.)
        history_store = sqlite_kv.SqliteKeyValueStore.open(run_dir / service.KV_NAME)
        held.push_async_callback(history_store.close)
        engine = await held.enter_async_context(fault_history.kept(
            history_store, table=table, customization=customization))
    else:
        engine = device_health.FaultEngine(table=table, customization=customization)
    driver: _Driver
    send: device_watch.ReportSink
    node = (joined.cluster.node_name if joined is not None
            else settings.node_name or _local_node_name())
    if joined is None:
        # The controller drives this host's agent through the controller protocol, as it
        # would an agent on another host; here the messages go through in-process queues.
        agent_end, controller_end = channel.in_process_pair()
        proxy = agent_proxy.AgentProxy(controller_end)
        controller = job_controller.JobController(
            settings.recovery, job=agent_settings.run_id, world_size=agent_settings.world_size,
            agent=proxy, recorder=events_recorder, clock=clock, device_faults=engine, node=node)
        driver = _ControllerHere(
            controller_link.ControllerLink(agent, agent_end, host=socket.gethostname()), proxy,
            controller)
        centre = await local_centre.opened(
            held, history_store, engine, controller, job=agent_settings.run_id, node=node,
            clock=clock, config=config.config if config is not None else None)
        events_recorder.subscribe(centre.job_event)
        send = centre.reports.take
    else:
        driver = _ControllerAway(agent, joined, clock=clock)
        send = device_watch.to_controllers(joined.cluster.endpoints, joined.cluster.security)
    try:
        devices = host_detectors.build(
            settings.detectors, node=node, job=agent_settings.run_id,
            devices=agent_settings.nproc_per_node + agent_settings.spare_devices, table=table,
            customization=customization,
            node_table=config.config.node if config is not None else None,
            switch_table=config.config.switch if config is not None else None, send=send,
            record=events_recorder.record, publish=events_recorder.publish, clock=clock,
            # One host: nothing takes its ranks, so it stops with a dying checkpoint. (Across
            # hosts the controller reads the node document.)
            node_unhealthy=(lambda why: driver.request_stop(
                why, exit_code=node_faults.UNHEALTHY_EXIT_CODE))
            if joined is None else lambda why: None)
    except host_detectors.DetectorSettingsError as error:
        raise LaunchError(f"--{error}") from error
    agent.device_injector = devices.inject
    pacer = snapshot_pacing.SnapshotPacer(agent_settings, agent=agent,
                                          record=events_recorder.record, clock=clock)
    events_recorder.subscribe(tally.event)
    events_recorder.subscribe(pacer.event)
    if exporter is not None:
        events_recorder.subscribe(exporter.event)
    if observer is not None:
        events_recorder.subscribe(observer.event)
        observer.started(run_dir=run_dir, store_path=store.path, checkpoint_dir=directory.root)
        if server is not None:
            observer.serving_metrics(url=server.url)
    main = asyncio.current_task()
    assert main is not None
    with _signals_stop(settings.signals, driver, main):
        progress = asyncio.create_task(_report_progress(agent, observer, settings))
        publishing = asyncio.create_task(_publish_live(agent, events_recorder, tally, exporter,
                                                       clock=clock))
        sampling = asyncio.create_task(_record_progress(
            agent, events_recorder.record, clock, job=agent_settings.run_id,
            interval=settings.progress_interval))
        pacing = asyncio.create_task(pacer.run(interval=SNAPSHOT_REVIEW_INTERVAL))
        watch = asyncio.create_task(device_levels.watch(
            [engine, devices.engine], config=config, interval=settings.fault_config_interval,
            record=events_recorder.record, clock=clock, job=agent_settings.run_id,
            changed=centre.intake.level_changed if joined is None else None,
            reconfigured=centre.reconfigure if joined is None else None))
        watching_devices = asyncio.create_task(devices.run())
        watching_steps = asyncio.create_task(slow_node_watch.SlowNodeWatch(
            slow, ranks=agent_settings.ranks, records=agent.profiling_dir, node=node,
            job=agent_settings.run_id, record=events_recorder.record).run()
            if slow is not None else asyncio.sleep(0))
        try:
            try:
                await agent.start()
            except standby_client.StandbyError as error:
                raise LaunchError(f"the standby process did not start: {error}") from error
            except rendezvous_stores.RendezvousError as error:
                raise LaunchError(str(error)) from error
            result = await driver.run()
            lag = memory.lag()
            measured = events.RunMeasured(
                job=agent_settings.run_id, steps_completed=result.resume_step,
                step_seconds=agent.statistics.step_seconds,
                snapshot_seconds=agent.statistics.median_snapshot_seconds,
                training_seconds=(clock.monotonic() - agent.statistics.first_step_at
                                  if agent.statistics.first_step_at is not None else None))
            events_recorder.record(measured)
        finally:
            progress.cancel()
            sampling.cancel()
            pacing.cancel()
            watch.cancel()
            watching_devices.cancel()
            watching_steps.cancel()
            publishing.cancel()
            await asyncio.gather(progress, sampling, pacing, watch, watching_devices,
                                 watching_steps, publishing, return_exceptions=True)
            await agent.close()
            _publish_once(agent, events_recorder, tally, exporter, clock=clock)
            if server is not None:
                server.close()
            await held.aclose()
            store.close()
    return RunReport(
        result=result, run_dir=run_dir, store_path=store.path, checkpoint_dir=memory.directory.root,
        step_seconds=measured.step_seconds, snapshot_seconds=measured.snapshot_seconds,
        training_seconds=measured.training_seconds, checkpoint_lag=lag,
        snapshot_every=agent.snapshot_every)


def _local_node_name() -> str:
    """This host's name as a node name (lower case, as Kubernetes names nodes), or localhost."""
    try:
        return names.node_name(socket.gethostname().lower(), what="host name")
    except names.InvalidNameError:
        return "localhost"


class _Driver(Protocol):
    """Whoever decides this host's job: a controller here, or the job's controller away."""

    def request_stop(self, reason: str, *, exit_code: int) -> None: ...
    async def run(self) -> job_controller.JobResult: ...


class _ControllerHere:
    """One host: the controller runs in this process."""

    def __init__(self, link: controller_link.ControllerLink, proxy: agent_proxy.AgentProxy,
                 controller: job_controller.JobController) -> None:
        self._link = link
        self._proxy = proxy
        self._controller = controller

    def request_stop(self, reason: str, *, exit_code: int) -> None:
        self._controller.request_stop(reason, exit_code=exit_code)

    async def run(self) -> job_controller.JobResult:
        serving = asyncio.create_task(self._link.serve(), name="trainguard-controller-link")
        try:
            await self._proxy.connect(timeout=CONTROLLER_LINK_TIMEOUT)
            return await self._controller.run()
        finally:
            await self._proxy.close()
            self._link.close()
            await asyncio.gather(serving, return_exceptions=True)


class _ControllerAway:
    """A job across hosts: the job's controller drives this host's agent over its stream and
    says how the job ended. A stop asked of this host (a signal) ends this host's generation
    as a stop request, which the controller turns into a graceful stop of every host. When
    the controller goes away, the host registers again with the next one that leads (the
    controllers of --rdzv-endpoint), training on meanwhile."""

    def __init__(self, agent: node_agent.NodeAgent, joined: _Joined, *,
                 clock: clocks.Clock) -> None:
        self._agent = agent
        self._joined = joined
        self._clock = clock
        self._controller_wait = joined.cluster.controller_wait
        self._link = controller_link.ControllerLink(agent, joined.connection.channel,
                                                    host=joined.cluster.node_name)

    def request_stop(self, reason: str, *, exit_code: int) -> None:
        self._agent.request_stop(reason)

    async def run(self) -> job_controller.JobResult:
        started = self._clock.monotonic()
        rejoined: list[grpc_channel.AgentConnection] = []
        try:
            while (end := await self._link.serve()) is None:
                connection = await self._rejoin()
                if connection is None:
                    return await self._orphaned(started)
                rejoined.append(connection)
                self._link = controller_link.ControllerLink(
                    self._agent, connection.channel, host=self._joined.cluster.node_name)
        finally:
            for connection in rejoined:
                await connection.disconnect()
        if end.host_leaves:  # the job goes on elsewhere: what this host did is all it knows
            generation = self._agent.generation
            return self._result(events.JobOutcome(end.outcome), end.reason,
                                exit_code=end.exit_code, started=started,
                                generation=generation)
        return job_controller.JobResult(
            outcome=events.JobOutcome(end.outcome), reason=end.reason, exit_code=end.exit_code,
            faults=(), generations=end.generations, restarts_used=end.restarts_used,
            wall_seconds=end.wall_seconds, resume_step=end.resume_step, errors=end.errors)

    async def _rejoin(self) -> grpc_channel.AgentConnection | None:
        """Register with the controller that leads now, within the controller wait."""
        agent = self._agent
        register = control_pb2.Register()
        register.CopyFrom(self._joined.register)
        register.node_rank = agent.settings.node_rank
        register.rejoin.spare = agent.settings.spare
        register.rejoin.wait = self._controller_wait
        if agent.generation is not None:
            register.rejoin.generation = agent.generation.number
        logger.error("the job's controller is gone (its stream ended without ending the job); "
                     "training goes on while this host registers again with the controller "
                     "that leads next (for up to %g s)", self._controller_wait)
        try:
            connection, _ = await joining.rejoin(self._joined.cluster, register,
                                                 within=self._controller_wait)
        except joining.JoinRefusedError as error:
            logger.error("no controller took this host back: %s", error)
            return None
        logger.warning("registered again with the job's controller")
        return connection

    async def _orphaned(self, started: float) -> job_controller.JobResult:
        """No controller took this host back within the controller wait (the controllers are
        gone, or this host was cut off and is being replaced): stop, after a dying checkpoint
        if the generation still runs; nothing here can recover a fault."""
        agent = self._agent
        generation = agent.generation
        wait = self._controller_wait
        if generation is None:
            return self._result(events.JobOutcome.FAILED, "the job's controller went away "
                                "before this host held any ranks", exit_code=1, started=started,
                                generation=None)
        if not generation.outcome.done():
            await agent.graceful_stop(cluster_view.stop_step(
                w.begun_step for w in generation.workers.values()))
            await agent.flush_checkpoints()
            return self._result(events.JobOutcome.STOPPED, f"the job's controller was gone "
                                f"for {wait:g} s: stopped after a dying checkpoint", exit_code=1,
                                started=started, generation=generation)
        outcome = generation.outcome.result()
        await agent.stop_workers()
        await agent.flush_checkpoints()
        if outcome.kind is process.OutcomeKind.SUCCEEDED:
            return self._result(events.JobOutcome.SUCCEEDED, "every rank of this host "
                                "finished (the controller was gone)", exit_code=0,
                                started=started, generation=generation)
        what = outcome.fault.describe() if outcome.fault is not None else outcome.detail
        return self._result(events.JobOutcome.FAILED, f"the job's controller is gone, and "
                            f"nothing recovers this host's fault: {what}", exit_code=1,
                            started=started, generation=generation)

    def _result(self, outcome: events.JobOutcome, reason: str, *, exit_code: int,
                started: float, generation: workers.Generation | None
                ) -> job_controller.JobResult:
        """This host's own figures, its ranks resuming after the highest step they completed."""
        logger.error("%s", reason)
        completed = generation.completed_step if generation is not None else None
        return job_controller.JobResult(
            outcome=outcome, reason=reason, exit_code=exit_code, faults=(),
            generations=generation.number + 1 if generation is not None else 0,
            restarts_used=0, wall_seconds=self._clock.monotonic() - started,
            resume_step=completed + 1 if completed is not None else 0)


@contextlib.contextmanager
def _signals_stop(signals: tuple[signal.Signals, ...], controller: _Driver,
                  main: asyncio.Task[RunReport]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def handle(signum: signal.Signals) -> None:
        if received:
            logger.warning("second signal %s: stopping the workers now", signum.name)
            main.cancel()
            return
        received.append(signum)
        logger.warning("received %s: stopping the job after a dying checkpoint (send it again "
                       "to stop at once)", signum.name)
        controller.request_stop(f"received {signum.name}", exit_code=128 + signum)

    installed = []
    for signum in signals:
        with contextlib.suppress(ValueError, RuntimeError):
            loop.add_signal_handler(signum, handle, signum)
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


async def _report_progress(agent: node_agent.NodeAgent, observer: RunObserver | None,
                           settings: RunSettings) -> None:
    if observer is None or settings.progress_interval <= 0:
        return
    while True:
        await asyncio.sleep(settings.progress_interval)
        observer.progress(agent.progress())


def _serve_metrics(exporter: metrics.MetricsExporter | None, settings: RunSettings
                   ) -> metrics.MetricsServer | None:
    """Raises: LaunchError when the metrics port cannot be listened on."""
    if exporter is None or settings.metrics_port is None:
        return None
    try:
        return exporter.serve(port=settings.metrics_port, address=settings.metrics_address)
    except OSError as error:
        raise LaunchError(f"metrics-port {settings.metrics_port}: cannot listen on "
                          f"{settings.metrics_address or '*'}: {error}") from error


async def _publish_live(agent: node_agent.NodeAgent, events_recorder: recorder.EventRecorder,
                        tally: live.JobTally, exporter: metrics.MetricsExporter | None, *,
                        clock: clocks.Clock) -> None:
    """Every LIVE_INTERVAL: the live document for ``trainguard status``, the metrics' view."""
    while True:
        _publish_once(agent, events_recorder, tally, exporter, clock=clock)
        await asyncio.sleep(LIVE_INTERVAL)


def _publish_once(agent: node_agent.NodeAgent, events_recorder: recorder.EventRecorder,
                  tally: live.JobTally, exporter: metrics.MetricsExporter | None, *,
                  clock: clocks.Clock) -> None:
    activity = agent.activity()
    if exporter is not None:
        exporter.observe(activity, agent.statistics)
    job = agent.settings.run_id
    document = live.LiveDocument.of(job=job, tally=tally, activity=activity, clock=clock)
    try:
        events_recorder.publish(live.document_name(job), document.to_data())
    except store_api.StoreError as error:
        logger.warning("the live status was not updated: %s", error)


async def _record_progress(agent: node_agent.NodeAgent, record: Callable[[events.Event], int],
                           clock: clocks.Clock, *, job: str, interval: float) -> None:
    """Sample the furthest step every ``interval`` seconds into the events, for reports."""
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        progress = agent.progress()
        if progress.step is not None:
            record(events.StepProgress(job=job, generation=progress.generation,
                                       step=progress.step,
                                       steps_per_second=progress.steps_per_second,
                                       at=clock.monotonic()))
