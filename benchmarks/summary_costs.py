"""The SUMMARY.md sections of what trainguard costs while nothing fails: the checkpoint stall,
the step-time overhead against torchrun, and a snapshot every step. Apart from the sections on
recovery and detection (benchmarks/summary.py), since each changes with its own benchmarks'
results (the snapshot overhead's estimates above all)."""

from __future__ import annotations

from typing import Any

from benchmarks import common
from benchmarks.summary_text import command, load, seconds, verdict

__all__ = ["overhead", "percents", "snapshot_overhead", "stall"]


def stall(lines: list[str]) -> None:
    stall = load("checkpoint-stall")
    if stall is None:
        return
    lines += [
        f"## Checkpoint stall and restore, {stall['when']}", "", f"`{command(stall)}`", "",
        "One rank on CPU; parameters and both Adam moments, float32; medians of 5. Snapshot: the "
        "time `Session.checkpoint` blocks training once the memory is reserved. Raw copy: the "
        "same bytes into memory reserved beforehand. torch.save: to the local disk, no fsync. "
        "Restore: the worker's `Session.restore`; before it, the agent chose and verified the "
        "state (plan), which for disk means reading and checksumming every shard.", "",
        "| parameters | state | snapshot | raw copy | torch.save | torch.load | restore: memory "
        "(plan) | restore: disk (plan) | snapshot / raw | snapshot / torch.save |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in stall["sizes"]:
        lines.append(
            f"| {size['parameters'] / 1e6:.0f}M | {size['state_bytes'] / 2**30:.2f} GiB | "
            f"{seconds(size['snapshot_seconds'])} | {seconds(size['raw_copy_seconds'])} | "
            f"{seconds(size['torch_save_seconds'])} | {seconds(size['torch_load_seconds'])} | "
            f"{seconds(size['restore_memory_seconds'])} "
            f"({seconds(size.get('plan_memory_seconds'))}) | "
            f"{seconds(size['restore_disk_seconds'])} "
            f"({seconds(size.get('plan_disk_seconds'))}) | "
            f"{size.get('snapshot_over_raw_copy', 0):.2f} | "
            f"{size.get('snapshot_over_torch_save', 0):.3f} |")
    worst_raw = max((s.get("snapshot_over_raw_copy", 99) for s in stall["sizes"]), default=None)
    worst_save = max((s.get("snapshot_over_torch_save", 99) for s in stall["sizes"]),
                     default=None)
    lines += [
        "",
        "On this 23 GiB machine the restore from memory after the crash runs while the job's two "
        "snapshot slots (2.2x the state) stay resident and the new process allocates the state "
        "again; at 500M parameters that is 21 GiB and the allocation crawls. The restore from "
        "disk runs in a new job without those slots, and its reads were checksummed by the "
        "agent first (plan), so the worker finds the file in the page cache.",
        "",
        f"- snapshot stall at most 1.5x the raw copy: "
        f"{verdict(None if worst_raw is None else worst_raw <= 1.5)}",
        f"- snapshot stall at most 10% of torch.save: "
        f"{verdict(None if worst_save is None else worst_save <= 0.10)}",
        "",
    ]


def overhead(lines: list[str]) -> None:
    result = load("overhead")
    if result is None:
        return
    lines += [
        f"## Step-time overhead without faults, against torchrun, {result['when']}", "",
        f"`{command(result)}`", "", result["setup"] + ". On a machine shared with other "
        "work, a few percent either way is noise: a negative overhead means none measurable.",
        "",
        "| launcher and script | median step time | overhead against torchrun |",
        "|---|---|---|",
    ]
    verdicts = []
    for variant in result["variants"]:
        if not variant["measured"]:
            lines.append(f"| {variant['name']} | not measured: {variant['why']} | - |")
            verdicts.append(f"- {variant['name']} under {result['target']:.0%}: "
                            f"{verdict(None)}")
            continue
        lines.append(f"| {variant['name']} | {variant['median_step_seconds'] * 1000:.1f} ms | "
                     f"{variant['overhead']:+.1%} |")
        if variant["met"] is not None:
            verdicts.append(f"- {variant['name']} under {result['target']:.0%}: "
                            f"{verdict(variant['met'])} ({variant['overhead']:+.1%})")
    lines += ["", *verdicts, ""]


def percents(values: list[float]) -> str:
    return ", ".join(f"{value:+.1%}" for value in values)


_FLOORS = {
    "state_dicts": ("the floor under any snapshot made of state dicts",
                    "those runs building only each state's state_dict() and the random states, "
                    "and dropping them"),
    "per_rank": ("the floor under any snapshot, whatever the model's size",
                 "those runs snapshotting no state: the step and the random states alone"),
}
"""The blocks estimates of what part of a snapshot costs: what each is, and what its job does
(a recording from before one was measured lacks it)."""


def snapshot_overhead(lines: list[str], result_name: str = "snapshot-overhead", *,
                      elsewhere: bool = False, about: str = "") -> None:
    """The step-time benchmark's result ``result_name``: this machine's, or another's
    (``elsewhere``: the same benchmark run where a device was lent, whose cores are named);
    ``about``: what a further recording here was made for, said in its heading."""
    result = load(result_name)
    if result is None:
        return
    variants = [name for name in result["sizes"][0]["overhead"]]
    cores = result["machine"]["cpus"]
    lines += [
        f"## Step-time cost of a snapshot every step, {result['when']}"
        + (f", on a machine with {cores} cores" if elsewhere else "") + about,
        "",
        f"`{command(result)}`", "", result["setup"] + ".", "",
        f"| state per rank | no snapshots | {' | '.join(variants)} | floor "
        "(one replica's copy) | every rank copying its whole state | noise (no snapshots, "
        "run again) |",
        "|---" * (len(variants) + 5) + "|",
    ]
    verdicts = []
    for size in result["sizes"]:
        medians, overheads = size["median_step_seconds"], size["overhead"]
        cells = [f"{medians[name] * 1000:.1f} ms ({overheads[name]:+.1%})" for name in variants]
        noise = f"{size['noise']:+.1%}" if "noise" in size else "not measured"
        lines.append(f"| {size['name']} ({size['state_bytes_per_rank'] / 1e6:.1f} MB) | "
                     f"{medians['no snapshots'] * 1000:.1f} ms | {' | '.join(cells)} | "
                     f"{size['floor_copy_seconds'] * 1000:.1f} ms ({size['floor_overhead']:+.1%}) "
                     f"| {size['every_rank_copies_overhead']:+.1%} | {noise} |")
        rounds = size.get("overhead_by_round", {})
        verdicts += [f"- {size['name']}, {name}, at most {result['target']:.0%} above no "
                     f"snapshots: {verdict(met)} ({overheads[name]:+.1%}; noise {noise}"
                     + (f"; by round {percents(rounds[name])}, the control by round "
                        f"{percents(rounds['no snapshots, again'])})" if name in rounds
                        else ")")
                     for name, met in size["met"].items()]
        if "paired" in size:
            paired = size["paired"]
            verdicts.append(
                f"- {size['name']}, paired within each run (a snapshot every "
                f"{common.ordinal(paired['every'])} step, shares; its two steps against the "
                f"next two, "
                f"{paired['snapshots_compared']} snapshots): "
                f"{paired['snapshot_seconds'] * 1000:.2f} ms per snapshot, "
                f"{paired['overhead']:+.1%} of a {paired['clean_step_seconds'] * 1000:.1f} ms "
                f"step: {verdict(paired['met'])} "
                f"(by round {percents(paired['overhead_by_round'])})")
        verdicts += [_blocks_line(size["name"], size[name])
                     for name in ("blocks", "blocks_every") if name in size]
        for name, (floor, job) in _FLOORS.items():
            if name in size:
                alone = size[name]
                low, high = alone["interval"]
                verdicts.append(
                    f"- {size['name']}, {floor} (as within each run, {job}; "
                    f"{alone['neighbours_compared']} runs against their neighbours): mean "
                    f"{alone['overhead']:+.1%}, 95% interval "
                    f"{low:+.1%} to {high:+.1%} (by round "
                    f"{percents(alone['overhead_by_round'])})")
        if size.get("checkpoint_cpu_seconds"):
            words = {"blocks_every": f"blocks every {size.get('blocks_every', {}).get('every')} "
                                     "steps"}
            verdicts.append(
                f"- {size['name']}, CPU of a snapshot on the training thread (median): "
                + ", ".join(f"{words.get(name, name.replace('_', ' '))} {cpu * 1e6:.0f} us"
                            for name, cpu in size["checkpoint_cpu_seconds"].items()))
    lines += ["", *verdicts, ""]


def _blocks_line(size: str, blocks: dict[str, Any]) -> str:
    """One blocks estimate in words: the rounds' median steps, and its verdict. A recording
    from before snapshots every N-th step were estimated so has no ``every``: every step."""
    every = blocks.get("every", 1)
    snapshots, grouped = (("every step", "") if every == 1 else
                          (f"every {every} steps", f", {every} steps in a row taken as one"))
    medians = blocks["median_step_seconds"]
    [variant] = [name for name in medians if name != "no snapshots"]
    low, high = blocks["interval"]
    decided = (f"each against its neighbours, {blocks['neighbours_compared']} runs: mean "
               f"{blocks['overhead']:+.1%}, 95% interval {low:+.1%} to {high:+.1%}: "
               + ("**not resolved**" if blocks["verdict"] == "not resolved"
                  else verdict(blocks["met"])))
    return (f"- {size}, within each run (a snapshot after {snapshots} of every second run of "
            f"{blocks['steps']} steps, shares; {blocks['runs_compared']} such runs against the "
            f"runs between them{grouped}): the rounds' median steps "
            f"{medians[variant] * 1000:.1f} ms against {medians['no snapshots'] * 1000:.1f} ms; "
            f"{decided} (by round {percents(blocks['overhead_by_round'])})")
