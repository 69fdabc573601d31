"""Prometheus metrics of one running job, served by ``trainguard run --metrics-port``.

Counters and histograms follow the recorded events (a recorder listener); per-rank gauges and
ages come from the agent's view of each rank, which the launcher hands over about once a second
on the job's event loop. A scrape reads only that handed-over copy, in the server's thread, so
it never touches state the loop is changing. Every run has its own registry.

Names (labels): ``trainguard_faults_total`` (kind), ``trainguard_recoveries_total`` (strategy),
``trainguard_fault_detect_seconds`` and ``trainguard_recovery_seconds`` (histograms),
``trainguard_steps_lost_total``, ``trainguard_restarts_left``, ``trainguard_generation``,
``trainguard_rank_step`` and ``trainguard_rank_steps_per_second`` and
``trainguard_rank_heartbeat_age_seconds`` and ``trainguard_snapshot_size_bytes`` (rank),
``trainguard_snapshot_stall_seconds`` (histogram), ``trainguard_checkpoint_persisted_step``,
``trainguard_checkpoint_persisted_age_seconds``, ``trainguard_checkpoint_size_bytes``,
``trainguard_goodput_ratio`` and ``trainguard_run_info`` (run).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from wsgiref import simple_server

import prometheus_client
from prometheus_client import core, registry

from trainguard import clock as clocks
from trainguard.agent import step_statistics
from trainguard.job import events
from trainguard.telemetry import live

__all__ = ["MetricsExporter", "MetricsServer"]

_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_STALL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclasses.dataclass(frozen=True)
class _Seen:
    """The agent's view at one moment (monotonic), handed from the loop to the scrapes."""

    at: float
    ranks: tuple[step_statistics.RankActivity, ...] = ()
    goodput: float | None = None


class MetricsExporter:
    def __init__(self, *, run: str, tally: live.JobTally, clock: clocks.Clock) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self._tally = tally
        self._clock = clock
        self._seen = _Seen(at=clock.monotonic())
        self._stalls_seen = 0
        self._checkpoint_bytes: int | None = None
        into = self.registry
        self._faults = prometheus_client.Counter(
            "trainguard_faults_total", "Faults detected, by kind.", ["kind"], registry=into)
        self._recoveries = prometheus_client.Counter(
            "trainguard_recoveries_total", "Recoveries completed, by strategy.", ["strategy"],
            registry=into)
        self._detect = prometheus_client.Histogram(
            "trainguard_fault_detect_seconds", "From a fault to its detection.",
            buckets=_SECONDS_BUCKETS, registry=into)
        self._recover = prometheus_client.Histogram(
            "trainguard_recovery_seconds", "From a fault to every rank stepping again.",
            buckets=_SECONDS_BUCKETS, registry=into)
        self._steps_lost = prometheus_client.Counter(
            "trainguard_steps_lost_total", "Completed steps that had to be redone.",
            registry=into)
        self._stall = prometheus_client.Histogram(
            "trainguard_snapshot_stall_seconds", "How long training was blocked per snapshot.",
            buckets=_STALL_BUCKETS, registry=into)
        prometheus_client.Info("trainguard_run", "The run these metrics are of.",
                               registry=into).info({"run": run})
        self.registry.register(_LiveCollector(self))

    def event(self, event: events.Event) -> None:
        """A recorder listener."""
        match event:
            case events.FaultDetected(fault_kind=kind, detect_seconds=seconds):
                self._faults.labels(kind=str(kind)).inc()
                if seconds is not None:
                    self._detect.observe(seconds)
            case events.RecoveryCompleted(strategy=strategy, recover_seconds=seconds,
                                          steps_lost=lost):
                self._recoveries.labels(strategy=strategy).inc()
                self._recover.observe(seconds)
                self._steps_lost.inc(lost)
            case events.CheckpointPersisted(nbytes=nbytes):
                self._checkpoint_bytes = nbytes

    def observe(self, activity: list[step_statistics.RankActivity],
                statistics: step_statistics.StepStatistics) -> None:
        """The agent's view now; called on the job's event loop."""
        stalls = statistics.snapshot_seconds
        for seconds in stalls[self._stalls_seen:]:
            self._stall.observe(seconds)
        self._stalls_seen = len(stalls)
        now = self._clock.monotonic()
        self._seen = _Seen(at=now, ranks=tuple(activity),
                           goodput=_goodput(activity, statistics, now))

    def collect_live(self) -> Iterable[core.Metric]:
        seen, tally, now = self._seen, self._tally, self._clock.monotonic()
        rank_gauges = {
            "step": ("trainguard_rank_step", "The step each rank is in."),
            "rate": ("trainguard_rank_steps_per_second", "Each rank's recent steps per second."),
            "heard": ("trainguard_rank_heartbeat_age_seconds",
                      "Seconds since each rank was last heard from."),
            "bytes": ("trainguard_snapshot_size_bytes", "Size of each rank's newest snapshot."),
        }
        families = {key: core.GaugeMetricFamily(name, text, labels=["rank"])
                    for key, (name, text) in rank_gauges.items()}
        for rank in seen.ranks:
            label = [str(rank.rank)]
            for key, value in (("step", rank.step), ("rate", rank.steps_per_second),
                               ("heard", None if rank.heard_at is None else now - rank.heard_at),
                               ("bytes", rank.snapshot_bytes)):
                if value is not None:
                    families[key].add_metric(label, value)
        yield from families.values()
        yield core.GaugeMetricFamily("trainguard_restarts_left", "Job-level restarts left.",
                                     value=tally.restarts_left)
        yield core.GaugeMetricFamily("trainguard_generation", "The current generation.",
                                     value=tally.generation)
        optional = (
            ("trainguard_checkpoint_persisted_step",
             "The step the newest checkpoint on disk resumes at.", tally.persisted_step),
            ("trainguard_checkpoint_persisted_age_seconds",
             "Seconds since the newest checkpoint was persisted.",
             None if tally.persisted_wall is None else self._clock.wall() - tally.persisted_wall),
            ("trainguard_checkpoint_size_bytes", "Size of the newest persisted checkpoint.",
             self._checkpoint_bytes),
            ("trainguard_goodput_ratio",
             "Share of the training time so far that produced the current state.", seen.goodput),
        )
        for name, text, value in optional:
            if value is not None:
                yield core.GaugeMetricFamily(name, text, value=value)

    def serve(self, *, port: int, address: str) -> MetricsServer:
        """Serve ``/metrics`` on ``address``:``port`` (0: a free port) in a daemon thread.

        Raises:
            OSError: the address cannot be listened on.
        """
        server, thread = prometheus_client.start_http_server(port, addr=address,
                                                             registry=self.registry)
        return MetricsServer(server, thread, address)


def _goodput(activity: list[step_statistics.RankActivity],
             statistics: step_statistics.StepStatistics, now: float) -> float | None:
    """Share of the training time so far that the furthest rank's steps account for."""
    started, step_seconds = statistics.first_step_at, statistics.step_seconds
    steps = max((rank.step for rank in activity if rank.step is not None), default=None)
    if started is None or steps is None or now <= started:
        return None
    return events.goodput(steps_completed=steps, step_seconds=step_seconds,
                          training_seconds=now - started)


class _LiveCollector(registry.Collector):
    def __init__(self, exporter: MetricsExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterable[core.Metric]:
        return self._exporter.collect_live()


class MetricsServer:
    def __init__(self, server: simple_server.WSGIServer, thread: threading.Thread,
                 address: str) -> None:
        self._server = server
        self._thread = thread
        self.port: int = server.server_port
        host = "127.0.0.1" if address in ("", "0.0.0.0") else address
        self.url = f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
