"""The metrics exporter: events and the agent's rank view in, Prometheus text out."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import parser

from trainguard.agent import step_statistics
from trainguard.cli import run_command
from trainguard.job import events
from trainguard.telemetry import live, metrics


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.wall_now = 1_800_000_000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def exporter(clock: FakeClock) -> metrics.MetricsExporter:
    tally = live.JobTally(max_restarts=3, clock=clock)
    exporter = metrics.MetricsExporter(run="job", tally=tally, clock=clock)
    for event in (
        events.DecisionMade(job="job", generation=0, strategy="exit", reason="r",
                            restarts_left=2),
        events.RecoveryCompleted(job="job", generation=1, fault_rank=1, strategy="exit",
                                 detect_seconds=0.2, recover_seconds=3.0, steps_lost=4,
                                 restore_source="memory", restore_step=6),
        events.CheckpointPersisted(job="job", step=6, path="p", nbytes=1000, seconds=0.1),
    ):
        tally.event(event)
        exporter.event(event)
    return exporter


@pytest.fixture
def server(exporter: metrics.MetricsExporter) -> Iterator[metrics.MetricsServer]:
    served = exporter.serve(port=0, address="127.0.0.1")
    yield served
    served.close()


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {sample.name + "".join(f"|{key}={value}" for key, value in sample.labels.items()):
            sample.value for family in parser.text_string_to_metric_families(text)
            for sample in family.samples}


def test_events_and_the_rank_view_become_metrics(exporter: metrics.MetricsExporter,
                                                  server: metrics.MetricsServer,
                                                  clock: FakeClock) -> None:
    statistics = step_statistics.StepStatistics()
    for at in (90.0, 90.5, 91.0):
        statistics.began(0, at)
    statistics.heard(0, 99.0)
    statistics.snapshot(0, step=9, nbytes=512, seconds=0.02, at=99.0)
    exporter.observe([statistics.activity(0, pid=1, device=0, step=9)], statistics)
    clock.now, clock.wall_now = 101.0, clock.wall_now + 30
    samples = scrape(server.url)
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    assert samples["trainguard_recoveries_total|strategy=exit"] == 1
    assert samples["trainguard_recovery_seconds_sum"] == 3.0
    assert samples["trainguard_steps_lost_total"] == 4
    assert samples["trainguard_restarts_left"] == 2
    assert samples["trainguard_rank_step|rank=0"] == 9
    assert samples["trainguard_rank_steps_per_second|rank=0"] == 2.0
    assert samples["trainguard_rank_heartbeat_age_seconds|rank=0"] == 2.0
    assert samples["trainguard_snapshot_size_bytes|rank=0"] == 512
    assert samples["trainguard_snapshot_stall_seconds_count"] == 1
    assert samples["trainguard_checkpoint_persisted_step"] == 6
    assert samples["trainguard_checkpoint_persisted_age_seconds"] == 30.0
    assert samples["trainguard_checkpoint_size_bytes"] == 1000
    assert 0 < samples["trainguard_goodput_ratio"] <= 1
    assert "trainguard_faults_total" not in samples  # no fault yet: the family has no samples


def test_each_run_has_a_registry_of_its_own(exporter: metrics.MetricsExporter,
                                            clock: FakeClock) -> None:
    other = metrics.MetricsExporter(run="other", tally=live.JobTally(max_restarts=0,
                                                                     clock=clock), clock=clock)
    assert other.registry is not exporter.registry
    assert other.registry.get_sample_value("trainguard_steps_lost_total") == 0
    assert exporter.registry.get_sample_value("trainguard_steps_lost_total") == 4


def test_a_port_in_use_is_an_error(exporter: metrics.MetricsExporter,
                                   server: metrics.MetricsServer) -> None:
    with pytest.raises(OSError, match="in use"):
        exporter.serve(port=server.port, address="127.0.0.1")


def test_the_metrics_port_flag_is_off_by_default_and_checked(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    arguments = run_command.parser().parse_args
    assert run_command.build_settings(arguments([str(script)])).metrics_port is None
    assert run_command.build_settings(arguments(["--metrics-port", "0", str(script)])
                                      ).metrics_port == 0
    with pytest.raises(run_command.UsageError, match="metrics-port must be 0 to 65535, got -1"):
        run_command.build_settings(arguments(["--metrics-port", "-1", str(script)]))
