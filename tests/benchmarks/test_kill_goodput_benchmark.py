"""The kill-a-minute goodput benchmark's pure parts: its kill plan, the figures it takes from a
job's timeline, its flags and its summary section (the measurement itself:
``python -m benchmarks.kill_goodput``, 10 minutes per tool)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import common, kill_goodput, snapshot_overhead, summary

RANKS = 4


class Timeline:
    """Marks as jobs/timeline.py writes them, one tenth of a second apart."""

    def __init__(self) -> None:
        self.marks: list[dict[str, Any]] = []
        self.now = 100.0

    def mark(self, event: str, *, rank: int, attempt: int, step: int) -> None:
        self.now += 0.1
        self.marks.append({"event": event, "rank": rank, "attempt": attempt, "pid": 1000 + rank,
                           "step": step, "mono": self.now, "wall": self.now})

    def attempt(self, attempt: int, *, resume: int, steps: int,
                last_rank_behind: bool = False) -> None:
        """Every rank restores ``resume`` and completes ``steps`` steps from there (the last
        rank one fewer, with ``last_rank_behind``)."""
        for rank in range(RANKS):
            self.mark("restored", rank=rank, attempt=attempt, step=resume)
        for step in range(resume, resume + steps):
            for rank in range(RANKS):
                self.mark("begin", rank=rank, attempt=attempt, step=step)
            for rank in range(RANKS):
                if not (last_rank_behind and rank == RANKS - 1 and step == resume + steps - 1):
                    self.mark("end", rank=rank, attempt=attempt, step=step)


def test_the_plan_kills_every_interval_but_at_the_end_and_repeats_with_its_seed() -> None:
    plan = kill_goodput.kill_plan(seconds=600, every=60, ranks=RANKS, seed=1)
    assert [kill.at for kill in plan] == [60 * number for number in range(1, 10)]
    assert all(0 <= kill.victim < RANKS for kill in plan)
    assert len({kill.victim for kill in plan}) > 1
    assert plan == kill_goodput.kill_plan(seconds=600, every=60, ranks=RANKS, seed=1)
    assert plan != kill_goodput.kill_plan(seconds=600, every=60, ranks=RANKS, seed=2)
    assert [kill.at for kill in kill_goodput.kill_plan(seconds=60, every=25, ranks=RANKS,
                                                       seed=1)] == [25, 50]
    assert kill_goodput.kill_plan(seconds=60, every=60, ranks=RANKS, seed=1) == []


def test_a_checkpoint_every_25_steps_redoes_what_came_after_it() -> None:
    timeline = Timeline()
    began = timeline.now
    timeline.attempt(0, resume=0, steps=30)  # steps 0..29; the checkpoint holds 25
    kill = kill_goodput.Kill(timeline.now + 0.05, victim=2, attempt=0)
    timeline.now += 5.0  # torchrun restarting every process
    timeline.attempt(1, resume=25, steps=15, last_rank_behind=True)  # 25..39, rank 3 to 38
    first_begins = [m["mono"] for m in timeline.marks
                    if m["event"] == "begin" and m["attempt"] == 1 and m["step"] == 25]
    ended = timeline.now + 1

    figures = kill_goodput.goodput(timeline.marks, [kill], began=began, ended=ended,
                                   ranks=RANKS)

    assert figures["useful_steps"] == 39  # every rank completed 0..38
    assert figures["seconds"] == pytest.approx(ended - began)
    assert figures["useful_steps_per_second"] == pytest.approx(39 / (ended - began))
    assert figures["steps_executed"] == 30 + 15
    assert figures["steps_redone"] == 5
    assert figures["kills"] == 1
    assert figures["recovering_at_end"] is False
    [done] = figures["kills_done"]
    assert done["victim_rank"] == 2
    assert done["attempt"] == 0
    assert done["at_seconds"] == pytest.approx(kill.at - began)
    assert done["steps_redone"] == 5
    assert done["recover_seconds"] == pytest.approx(max(first_begins) - kill.at)
    assert figures["median_recover_seconds"] == done["recover_seconds"]
    assert figures["median_step_seconds"] == pytest.approx(0.8)  # 8 marks of 0.1 s a step


def test_a_snapshot_every_step_redoes_nothing_over_several_kills() -> None:
    timeline = Timeline()
    began, kills = timeline.now, []
    for attempt in range(3):
        timeline.attempt(attempt, resume=10 * attempt, steps=10)
        kills.append(kill_goodput.Kill(timeline.now + 0.05, victim=attempt, attempt=attempt))
        timeline.now += 0.5
    timeline.attempt(3, resume=30, steps=4)

    figures = kill_goodput.goodput(timeline.marks, kills, began=began, ended=timeline.now,
                                   ranks=RANKS)

    assert figures["useful_steps"] == 34
    assert figures["steps_executed"] == 34
    assert figures["steps_redone"] == 0
    assert [kill["steps_redone"] for kill in figures["kills_done"]] == [0, 0, 0]
    assert all(kill["recover_seconds"] > 0 for kill in figures["kills_done"])


def test_a_job_still_recovering_at_the_end_keeps_only_where_it_resumed() -> None:
    timeline = Timeline()
    began = timeline.now
    timeline.attempt(0, resume=0, steps=10)
    timeline.attempt(1, resume=5, steps=20)
    kill = kill_goodput.Kill(timeline.now + 0.05, victim=0, attempt=1)
    timeline.mark("start", rank=0, attempt=2, step=0)  # not restored by the end

    figures = kill_goodput.goodput(timeline.marks, [kill], began=began,
                                   ended=timeline.now + 1, ranks=RANKS)

    assert figures["recovering_at_end"] is True
    assert figures["useful_steps"] == 5
    assert figures["steps_executed"] == 30
    assert figures["steps_redone"] == 5
    assert figures["kills_done"][0]["recover_seconds"] is None
    assert figures["kills_done"][0]["steps_redone"] is None


def test_no_restored_attempt_is_no_useful_step() -> None:
    figures = kill_goodput.goodput([], [], began=0.0, ended=10.0, ranks=RANKS)
    assert figures["useful_steps"] == 0
    assert figures["recovering_at_end"] is False
    assert figures["median_recover_seconds"] is None
    assert figures["median_step_seconds"] is None


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--minutes", "0", "argument --minutes: must be above 0, not 0"),
    ("--minutes", "-1", "argument --minutes: must be above 0, not -1"),
    ("--minutes", "nan", "argument --minutes: must be above 0, not nan"),
    ("--kill-every", "0", "argument --kill-every: must be above 0, not 0"),
    ("--kill-every", "soon", "argument --kill-every: not a number: 'soon'"),
    ("--width", "1.5", "argument --width: not a number: '1.5'"),
])
def test_bad_input_exits_2_naming_the_flag(flag: str, value: str, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        kill_goodput.main([flag, value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_help_explains_the_measurement(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        kill_goodput.main(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "useful steps per second" in shown
    assert "--kill-every" in shown
    assert "benchmarks/results/kill-goodput.json" in shown


def test_the_job_has_about_75_megabytes_of_state_per_rank() -> None:
    args = kill_goodput.parser().parse_args([])
    assert (args.minutes, args.kill_every, args.width) == (10, 60, kill_goodput.JOB.width)
    assert 74e6 < snapshot_overhead.state_bytes(args.width) < 76e6


def test_the_summary_shows_each_tool_and_the_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--minutes", "1", "--kill-every", "20", "--width", "64", "--output"]
    monkeypatch.setattr(sys, "argv", ["benchmarks/kill_goodput.py", *argv])
    args = kill_goodput.parser().parse_args(argv)
    plan = kill_goodput.kill_plan(seconds=60, every=20, ranks=RANKS, seed=1)
    tools = {}
    for tool, checkpoint_every in (("trainguard", 1), ("torchrun", 25)):
        timeline = Timeline()
        timeline.attempt(0, resume=0, steps=30)
        kill = kill_goodput.Kill(timeline.now + 0.05, victim=1, attempt=0)
        timeline.attempt(1, resume=30 - 30 % checkpoint_every, steps=20)
        tools[tool] = kill_goodput.goodput(timeline.marks, [kill], began=100.0,
                                           ended=timeline.now, ranks=RANKS)
    result = kill_goodput.report(args, arguments=argv, plan=plan, tools=tools)
    assert result["ratio"] == pytest.approx(50 / 45)
    assert result["met"] is True
    assert result["kill_plan"] == [{"at": 20.0, "victim": plan[0].victim},
                                   {"at": 40.0, "victim": plan[1].victim}]
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "kill-goodput.json").write_text(json.dumps(result))
    lines: list[str] = []
    summary._kill_goodput(lines)
    text = "\n".join(lines)
    assert "## Useful steps per second with a kill -9 every 20 s" in text
    assert "`python -m benchmarks.kill_goodput --minutes 1 --kill-every 20 --width 64 " \
           "--output`" in text
    assert "| trainguard | " in text
    assert " | 1 (1 left out) | 50 | 0 | " in text  # trainguard: 1 kill of 2 planned
    assert " | 1 (1 left out) | 50 | 5 | " in text  # torchrun redid 5
    assert "- trainguard ahead of torchrun (useful steps per second above 1x of it): met " \
           "(1.111x)" in text


def test_the_job_is_asked_to_stop_before_it_is_killed(tmp_path: Path) -> None:
    script = "trap 'echo stopping; exit 0' TERM; echo started; while :; do sleep 0.1; done"
    group = common.ProcessGroup(["sh", "-c", script], log=tmp_path / "log")
    common.wait_until("the script started", lambda: "started" in group.log.read_text(),
                      timeout=30, process=group.process)
    group.stop(grace=30)
    assert group.process.returncode == 0
    assert group.log.read_text().endswith("stopping\n")
