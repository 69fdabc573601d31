"""The snapshot-overhead benchmark runs at a tiny size: every variant, one JSON object (the full
measurement: ``python -m benchmarks.snapshot_overhead``)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks import common, snapshot_overhead, summary_costs

pytestmark = pytest.mark.e2e


def test_a_tiny_run_measures_the_variants_asked_for_against_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "snapshot-overhead.json"
    asked = ["whole, every step", "shares, every step"]
    assert snapshot_overhead.main(["--nproc-per-node", "2", "--steps", "12", "--sizes", "demo",
                                   "--variants", *asked, "--paired-every", "4",
                                   "--output", str(output)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == result
    [size] = result["sizes"]
    assert size["name"] == "demo"
    assert set(size["median_step_seconds"]) == {snapshot_overhead.BASELINE,
                                                snapshot_overhead.CONTROL, *asked}
    assert set(size["overhead"]) == set(asked)
    # The demo's steps are short: it runs ten times --steps, the first tenth left out.
    assert (size["steps_scale"], size["steps"]) == (10, 120)
    assert all(count == 2 * (120 - 12) for count in size["steps_measured"].values())
    assert size["met"] == {name: value <= snapshot_overhead.TARGET
                           for name, value in size["overhead"].items()}
    assert size["state_bytes_per_rank"] == snapshot_overhead.state_bytes(256)
    assert size["floor_copy_seconds"] > 0
    assert size["every_rank_copies_overhead"] == pytest.approx(2 * size["floor_overhead"])
    medians = size["median_step_seconds"]
    assert size["noise"] == pytest.approx(
        medians[snapshot_overhead.CONTROL] / medians[snapshot_overhead.BASELINE] - 1)
    assert set(size["overhead_by_round"]) == {snapshot_overhead.CONTROL, *asked}
    assert all(len(values) == 1 for values in size["overhead_by_round"].values())
    paired = size["paired"]
    # steps 15, 19, ..., 115 of 120 (the first 12 left out) have three steps after them, on
    # each of 2 ranks
    assert (paired["every"], paired["snapshots_compared"]) == (4, 52)
    assert paired["overhead"] == pytest.approx(
        paired["snapshot_seconds"] / paired["clean_step_seconds"])
    assert paired["met"] == (paired["overhead"] <= snapshot_overhead.TARGET)
    blocks = size["blocks"]
    # runs of 10 steps from step 20 (the first 12 left out): those from 30, 50, ..., 110
    # snapshot after every step, on each of 2 ranks; those from 30 to 90 have a run without
    # on either side
    assert (blocks["steps"], blocks["runs_compared"], blocks["neighbours_compared"]) == (
        10, 10, 4)
    block_medians = blocks["median_step_seconds"]
    assert blocks["median_of_rounds"] == pytest.approx(
        block_medians["shares, every step"] / block_medians["no snapshots"] - 1)
    low, high = blocks["interval"]
    assert low <= blocks["overhead"] <= high
    assert blocks["met"] == (high <= snapshot_overhead.TARGET)
    assert blocks["verdict"] == ("met" if blocks["met"] else "not met"
                                 if low > snapshot_overhead.TARGET else "not resolved")
    # the same estimate for a job that only builds the state dicts on those steps
    alone = size["state_dicts"]
    assert (alone["steps"], alone["runs_compared"], alone["neighbours_compared"]) == (10, 10, 4)
    assert set(alone["median_step_seconds"]) == {snapshot_overhead.STATE_DICTS,
                                                 snapshot_overhead.BASELINE}
    alone_low, alone_high = alone["interval"]
    assert alone_low <= alone["overhead"] <= alone_high
    # and for one whose snapshots on those steps hold no state (the per-rank parts alone)
    per_rank = size["per_rank"]
    assert (per_rank["steps"], per_rank["runs_compared"],
            per_rank["neighbours_compared"]) == (10, 10, 4)
    assert set(per_rank["median_step_seconds"]) == {snapshot_overhead.PER_RANK,
                                                    snapshot_overhead.BASELINE}
    per_rank_low, per_rank_high = per_rank["interval"]
    assert per_rank_low <= per_rank["overhead"] <= per_rank_high
    # and for a job that snapshots after every second step of those runs (the default)
    every = size["blocks_every"]
    assert (every["steps"], every["every"], every["runs_compared"],
            every["neighbours_compared"]) == (10, 2, 10, 4)
    assert set(every["median_step_seconds"]) == {"shares, every 2 steps",
                                                 snapshot_overhead.BASELINE}
    every_low, every_high = every["interval"]
    # each variant with snapshots, and the paired, blocks, state-dicts, per-rank and every-2
    # jobs, timed their snapshots' CPU (the state-dicts one, building the state dicts alone)
    cpu = size["checkpoint_cpu_seconds"]
    assert set(cpu) == {*asked, "paired", "blocks", "state_dicts", "per_rank", "blocks_every"}
    assert all(0 < seconds < 1 for seconds in cpu.values())
    # the summary renders it
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    lines: list[str] = []
    summary_costs.snapshot_overhead(lines)
    text = "\n".join(lines)
    assert "python -m benchmarks.snapshot_overhead --nproc-per-node 2 --steps 12" in text
    assert "| demo (2.4 MB) |" in text
    assert "- demo, shares, every step, at most 5% above no snapshots: " in text
    control = size["overhead_by_round"][snapshot_overhead.CONTROL][0]
    assert f"noise {size['noise']:+.1%}; by round " in text
    assert f"the control by round {control:+.1%})" in text
    assert (f"- demo, paired within each run (a snapshot every 4th step, shares; its two steps "
            f"against the next two, 52 snapshots): {paired['snapshot_seconds'] * 1000:.2f} ms "
            "per snapshot") in text
    assert (f"- demo, within each run (a snapshot after every step of every second run of 10 "
            f"steps, shares; 10 such runs against the runs between them): the rounds' median "
            f"steps {block_medians['shares, every step'] * 1000:.1f} ms against "
            f"{block_medians['no snapshots'] * 1000:.1f} ms; each against its neighbours, 4 runs: "
            f"mean {blocks['overhead']:+.1%}, 95% interval {low:+.1%} to {high:+.1%}: ") in text
    assert (f"- demo, within each run (a snapshot after every 2 steps of every second run "
            f"of 10 steps, shares; 10 such runs against the runs between them, 2 steps in a "
            f"row taken as one): the rounds' median steps "
            f"{every['median_step_seconds']['shares, every 2 steps'] * 1000:.1f} ms against "
            f"{every['median_step_seconds']['no snapshots'] * 1000:.1f} ms; each against its "
            f"neighbours, 4 runs: mean {every['overhead']:+.1%}, 95% interval "
            f"{every_low:+.1%} to {every_high:+.1%}: ") in text
    assert f", blocks every 2 steps {cpu['blocks_every'] * 1e6:.0f} us" in text
    assert (f"- demo, the floor under any snapshot made of state dicts (as within each run, "
            f"those runs building only each state's state_dict() and the random states, and "
            f"dropping them; 4 runs against their neighbours): mean {alone['overhead']:+.1%}, "
            f"95% interval {alone_low:+.1%} to {alone_high:+.1%} (by round ") in text
    assert (f"- demo, the floor under any snapshot, whatever the model's size (as within each "
            f"run, those runs snapshotting no state: the step and the random states alone; 4 "
            f"runs against their neighbours): mean {per_rank['overhead']:+.1%}, 95% interval "
            f"{per_rank_low:+.1%} to {per_rank_high:+.1%} (by round ") in text
    assert f", per rank {cpu['per_rank'] * 1e6:.0f} us" in text
    assert (f"- demo, CPU of a snapshot on the training thread (median): whole, every step "
            f"{cpu['whole, every step'] * 1e6:.0f} us, ") in text
    assert f", state dicts {cpu['state_dicts'] * 1e6:.0f} us" in text


def test_the_cpu_of_the_snapshots_is_read_from_every_rank_after_the_warmup(
        tmp_path: Path) -> None:
    (tmp_path / "checkpoint-cpu-0.json").write_text(json.dumps([9.0, 1.0, 2.0, 3.0]))
    (tmp_path / "checkpoint-cpu-1.json").write_text(json.dumps([9.0, 9.0, 4.0, 5.0]))
    assert snapshot_overhead.checkpoint_cpu(tmp_path, ranks=2, warmup=0.5) == [2.0, 3.0, 4.0,
                                                                                5.0]
    assert snapshot_overhead.checkpoint_cpu(tmp_path / "none", ranks=2, warmup=0.5) == []


def test_the_paired_cost_is_each_snapshots_two_steps_against_the_next_two() -> None:
    # A snapshot after every 4th step (steps 3, 7, ...) adds 2 s to its step and 1 s to the
    # next; the run drifts slower, which the pairing cancels.
    seconds = [10.0 + index / 100 for index in range(40)]
    for index in range(3, 39, 4):
        seconds[index] += 2
        seconds[index + 1] += 1
    cost, step, count = snapshot_overhead.paired_cost([seconds, seconds], every=4, skip=5)
    assert cost == pytest.approx(3 - 0.04)  # the two compared against are 2 steps later
    assert count == 2 * 8  # steps 7, 11, ..., 35 on each rank
    assert 10.05 < step < 10.4
    with pytest.raises(ValueError, match="at least 4"):
        snapshot_overhead.paired_cost([seconds], every=3, skip=0)
    with pytest.raises(ValueError, match="more --steps"):
        snapshot_overhead.paired_cost([seconds[:6]], every=4, skip=1)


def test_the_block_cost_sets_the_runs_with_snapshots_against_those_without() -> None:
    # Runs of 5 steps; every second one (steps 5-9, 15-19, ...) snapshots after each step,
    # adding 2 s to it, and its copy behind adds 1 s to the step after it. The first step of
    # each run is left out, so neither the run's first snapshot without a copy before it nor
    # the copy after the last counts.
    seconds = [10.0] * 40
    for index in range(40):
        if (index // 5) % 2:
            seconds[index] += 2 + (1 if index % 5 else 0)
        elif index and index % 5 == 0:
            seconds[index] += 1
    seconds[2] = 99.0  # in the warm-up, left out
    with_snapshots, without, runs = snapshot_overhead.block_cost([seconds, seconds], block=5,
                                                                 skip=3)
    assert (with_snapshots, without, runs) == (13.0, 10.0, 2 * 4)  # runs from 5, 15, 25, 35
    with pytest.raises(ValueError, match="at least 2"):
        snapshot_overhead.block_cost([seconds], block=1, skip=0)
    with pytest.raises(ValueError, match="more --steps"):
        snapshot_overhead.block_cost([seconds[:9]], block=5, skip=0)


def test_with_a_snapshot_every_second_step_two_steps_in_a_row_count_as_one() -> None:
    # Runs of 6 steps; in every second one (steps 6-11, 18-23, ...) a snapshot after every
    # second step (7, 9, 11, ...) adds 4 s to it. The median of single steps would say 4 s
    # a step (3 of the 5 steps left in hold one); pairs, each holding one snapshot, say 2 s.
    # The last step of a run (11) fills no pair and is left out with the first.
    seconds = [10.0] * 48
    for index in range(48):
        if (index // 6) % 2 and (index + 1) % 2 == 0:
            seconds[index] += 4
    assert snapshot_overhead.block_cost([seconds], block=6, skip=0)[:2] == (14.0, 10.0)
    with_snapshots, without, runs = snapshot_overhead.block_cost([seconds], block=6, skip=0,
                                                                 every=2)
    assert (with_snapshots, without, runs) == (12.0, 10.0, 4)
    assert snapshot_overhead.block_differences([seconds], block=6, skip=0,
                                               every=2) == pytest.approx([0.2, 0.2, 0.2])
    with pytest.raises(ValueError, match="runs of more than 4 steps"):
        snapshot_overhead.block_cost([seconds], block=4, skip=0, every=4)


def test_each_run_with_snapshots_is_set_against_its_neighbours_step_by_step() -> None:
    # Runs of 4 steps; the machine slows by 1 s a run, which the neighbours cancel; the runs
    # with snapshots (steps 4-7, 12-15, ...) are 10% slower. Rank 1 is slower at step 9 alone:
    # the median of the ranks' steps is that of ranks 0 and 2.
    base = [10.0 + index // 4 for index in range(32)]
    seconds = [value * (1.1 if (index // 4) % 2 else 1.0) for index, value in enumerate(base)]
    ranks = [seconds, [*seconds[:9], 99.0, *seconds[10:]], seconds]
    differences = snapshot_overhead.block_differences(ranks, block=4, skip=1)
    # after the warm-up, runs from 12 and 20 have a neighbour on either side; the runs from 4
    # (the first left in) and 28 (the last) do not
    assert differences == pytest.approx([0.1, 0.1])
    assert snapshot_overhead.block_differences(ranks, block=4, skip=0) == pytest.approx(
        [0.1, 0.1, 0.1])


def test_the_interval_of_the_mean_holds_it_and_narrows_with_more_values() -> None:
    values = [0.02, 0.05, -0.01, 0.03, 0.04, 0.00, 0.06, 0.01]
    low, high = snapshot_overhead.mean_interval(values)
    assert min(values) < low < statistics.fmean(values) < high < max(values)
    assert snapshot_overhead.mean_interval(values) == (low, high)  # the same every time
    wider = snapshot_overhead.mean_interval(values[:4])
    narrower = snapshot_overhead.mean_interval(values * 8)
    assert narrower[1] - narrower[0] < high - low < wider[1] - wider[0]
    assert snapshot_overhead.mean_interval([0.03, 0.03]) == (0.03, 0.03)
    with pytest.raises(ValueError, match="at least 2 values"):
        snapshot_overhead.mean_interval([0.1])


@pytest.mark.parametrize(("flag", "least"), [("--block-steps", 2), ("--paired-every", 4)])
def test_the_estimates_within_a_run_take_0_or_enough_steps_between_snapshots(
        capsys: pytest.CaptureFixture[str], flag: str, least: int) -> None:
    # --block-steps: a step after the first of each run; --paired-every: two clean steps
    # after each snapshot.
    with pytest.raises(SystemExit):
        snapshot_overhead.parser().parse_args([flag, str(least - 1)])
    assert f"must be 0 or at least {least}, got {least - 1}" in capsys.readouterr().err
    parsed = snapshot_overhead.parser().parse_args([flag, "0"])
    assert getattr(parsed, flag.removeprefix("--").replace("-", "_")) == 0


def test_the_large_size_holds_about_75_megabytes_per_rank() -> None:
    size = next(size for size in snapshot_overhead.SIZES if size.name == "75MB")
    assert 74e6 < snapshot_overhead.state_bytes(size.width) < 76e6


@pytest.mark.parametrize(("number", "written"), [
    (1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"),
    (21, "21st"), (22, "22nd"), (101, "101st"), (111, "111th")])
def test_how_often_is_written_as_an_english_ordinal(number: int, written: str) -> None:
    assert common.ordinal(number) == written
