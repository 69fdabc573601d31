"""A host's slow-node detection: an event when its slow ranks change, none while they stay,
from the step marks its ranks write."""

from __future__ import annotations

from pathlib import Path

from trainguard.agent import slow_node_watch
from trainguard.detect.slow_node import SlowNodeSettings
from trainguard.job import events
from trainguard.job.profiling_switch import PRESETS
from trainguard.train import profiling


class Steps:
    """A rank's step marks, each as long as asked."""

    def __init__(self, root: Path, rank: int) -> None:
        self.now = 0
        self.step = 0
        self.recorder = profiling.ProfilingRecorder(root, task="job", rank=rank,
                                                    switch=PRESETS["light"],
                                                    clock_ns=lambda: self.now)

    def take(self, *seconds: float) -> None:
        for length in seconds:
            mark = self.recorder.start(f"step {self.step}")
            self.now += int(length * 1e9)
            self.recorder.end(mark)
            self.step += 1
        self.recorder.flush()


def test_an_event_when_the_slow_ranks_change_and_none_while_they_stay(tmp_path: Path) -> None:
    said: list[events.Event] = []
    watch = slow_node_watch.SlowNodeWatch(
        SlowNodeSettings(), ranks=[0, 1], records=tmp_path / "job", node="host-0", job="job",
        record=said.append)
    ranks = [Steps(tmp_path, 0), Steps(tmp_path, 1)]
    for rank in ranks:
        rank.take(*[0.1] * 23)
    watch.detect()
    ranks[1].take(0.2, 0.2, 0.2)
    watch.detect()
    ranks[1].take(0.2)
    watch.detect()  # still slow; rank 0 took no step: its verdict stands
    ranks[0].take(0.3, 0.3, 0.3)
    watch.detect()
    for rank in ranks:
        rank.take(0.1)
    watch.detect()
    assert [(type(e).__name__, getattr(e, "ranks", None), getattr(e, "degradation_level", None))
            for e in said] == [("SlowNodeDetected", [1], "100.00%"),
                               ("SlowNodeDetected", [0, 1], "200.00%"),
                               ("SlowNodeRecovered", None, None)]


def test_a_feat_conf_with_slow_node_0_asks_for_no_detection(tmp_path: Path) -> None:
    path = tmp_path / "FeatConf.json"
    path.write_text('{"slowNode": 0}')
    assert slow_node_watch.asked(path) is None
    assert slow_node_watch.asked(None) is None
    path.write_text("{}")
    assert slow_node_watch.asked(path) == SlowNodeSettings()
