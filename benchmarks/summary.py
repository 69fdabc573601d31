"""Write results/SUMMARY.md from the JSON results, with each target and whether it is met.

    python -m benchmarks.summary
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import common


def _load(name: str) -> dict[str, Any] | None:
    path = common.RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _command(result: dict[str, Any]) -> str:
    argv = result["machine"]["argv"]
    return " ".join(["python -m benchmarks." + Path(argv[0]).stem, *argv[1:]])


def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[ok]


_RECOVERY_HEAD = ("| launcher | fault -> detected | fault -> every rank stepping again | "
                  "steps lost |", "|---|---|---|---|")


def _recovery_rows(medians: dict[str, dict[str, Any]]) -> list[str]:
    return [f"| {tool} | {_seconds(values['detect_seconds'])} | "
            f"{_seconds(values['recover_seconds'])} | {values['steps_lost']} |"
            for tool, values in medians.items()]


def _recovery(lines: list[str]) -> None:
    crash = _load("recovery-crash")
    if crash is not None:
        medians = crash["medians"]
        ours, theirs = medians.get("trainguard", {}), medians.get("torchrun", {})
        lines += [
            f"## Recovery from a killed rank (kill -9), {crash['when']}",
            "", crash["setup"] + ".", "",
            f"`{_command(crash)}` ({len(crash['trials'])} trials in all; medians)", "",
            *_RECOVERY_HEAD,
        ]
        peers = dict(medians)
        dlrover = _load("recovery-dlrover")
        if dlrover is not None:
            peers.update(dlrover["medians"])
            lines.insert(len(lines) - 2, f"DLRover: `{_command(dlrover)}`, {dlrover['when']}, "
                         "the same trial positions (seed 1).")
            lines.insert(len(lines) - 2, "")
        lines += _recovery_rows(peers)
        _strategies(lines, medians, peers)
        ratio = None
        if ours.get("recover_seconds") and theirs.get("recover_seconds"):
            ratio = ours["recover_seconds"] / theirs["recover_seconds"]
        met = None if ratio is None else ratio <= 1 / 3
        lines += [
            "",
            f"- recovery at most 1/3 of torchrun's: {_verdict(met)}"
            + (f" ({ratio:.3f} of it)" if ratio is not None else ""),
            f"- 0 completed steps lost: {_verdict(ours.get('steps_lost') == 0 if ours else None)}",
            "",
        ]
    for path in sorted(common.RESULTS.glob("recovery-crash-width-*.json")):
        wide = json.loads(path.read_text())  # the same job at another size (--width)
        medians = wide["medians"].values()
        # A tool with no recovery measured (None) fails the target.
        slowest = max(values["recover_seconds"] if values["recover_seconds"] is not None
                      else float("inf") for values in medians)
        lost = max(values["steps_lost"] if values["steps_lost"] is not None else 1
                   for values in medians)
        lines += [
            f"## Recovery from a killed rank (kill -9), a larger model, {wide['when']}",
            "", wide["setup"] + ".", "",
            f"`{_command(wide)}` ({len(wide['trials'])} trials in all; medians)", "",
            *_RECOVERY_HEAD, *_recovery_rows(wide["medians"]), "",
            "- every rank stepping again within 0.5 s with 0 steps lost, every tool (the "
            f"target at 75 MB per rank): {_verdict(slowest <= 0.5 and lost == 0)}", "",
        ]
    hang = _load("recovery-hang")
    if hang is not None:
        values = hang["medians"].get("trainguard", {})
        detect = values.get("detect_seconds")
        worst = values.get("worst_detect_seconds", detect)  # older results have medians only
        trials = [t for t in hang["trials"] if t["tool"] == "trainguard"]
        inside = sum(1 for t in trials if t.get("moment") == "snapshot")
        lost = sorted(t["steps_lost"] for t in trials)
        lines += [
            f"## A hung rank (SIGSTOP), {hang['when']}", "",
            f"`{_command(hang)}`: {len(hang['trials'])} trials ({inside} stopped inside the "
            "snapshot, the others at a random point after a step began); medians. Step time "
            "about 0.1 s.",
            "",
            f"- fault -> detected: {_seconds(detect)} (worst {_seconds(worst)}); fault -> every "
            f"rank stepping again: {_seconds(values.get('recover_seconds'))}; steps lost "
            f"per trial: {lost}" + (" (the agent's log names the ranks that lacked the step, "
                                    "and why no replica stood in)" if any(lost) else ""),
            f"- hang detected within 3 s in every trial: "
            f"{_verdict(None if worst is None else worst <= 3)}",
            "- torchrun, for comparison (FINDINGS.md, not re-measured): nothing for 30 minutes "
            "(gloo's timeout); about 96 s with a 60 s process-group timeout.",
            "",
        ]


def _host_loss(lines: list[str]) -> None:
    lost = _load("host-loss")
    if lost is not None:
        medians = lost["medians"]
        ours, theirs = medians.get("trainguard", {}), medians.get("torchrun", {})
        lines += [
            f"## A host lost whole (SIGKILL to its launcher and workers), {lost['when']}", "",
            lost["setup"] + ".", "",
            f"`{_command(lost)}` ({len(lost['trials'])} trials in all; medians, worst in "
            "brackets)", "",
            "| launcher | fault -> detected | fault -> every rank stepping again | steps lost "
            "| processes restarted |",
            "|---|---|---|---|---|",
        ]
        for tool, values in medians.items():
            lines.append(
                f"| {tool} | {_seconds(values['detect_seconds'])} "
                f"({_seconds(values.get('worst_detect_seconds'))}) | "
                f"{_seconds(values['recover_seconds'])} "
                f"({_seconds(values.get('worst_recover_seconds'))}) | {values['steps_lost']} "
                f"({values.get('worst_steps_lost')}) | {values['processes_restarted']} |")
        ratio = None
        if ours.get("recover_seconds") and theirs.get("recover_seconds"):
            ratio = theirs["recover_seconds"] / ours["recover_seconds"]
        worst_detect = ours.get("worst_detect_seconds")
        worst_recover = ours.get("worst_recover_seconds")
        lines += [
            "",
            "- detected within 2 s in every trial: "
            f"{_verdict(None if worst_detect is None else worst_detect <= 2)}",
            "- every rank stepping within 3 s in every trial: "
            f"{_verdict(None if worst_recover is None else worst_recover <= 3)}",
            f"- 0 completed steps lost in every trial: "
            f"{_verdict(ours.get('worst_steps_lost') == 0 if ours else None)}",
            f"- at least 5x faster than torchrun: {_verdict(None if ratio is None else ratio >= 5)}"
            + (f" ({ratio:.0f}x)" if ratio is not None else ""),
            "",
        ]
    killed = _load("host-rank-kill")
    if killed is not None:
        values = killed["medians"].get("trainguard", {})
        lines += [
            f"## A rank killed (kill -9) in a job across 2 hosts, {killed['when']}", "",
            f"`{_command(killed)}` ({len(killed['trials'])} trials): fault -> every rank "
            f"stepping again {_seconds(values.get('recover_seconds'))} (worst "
            f"{_seconds(values.get('worst_recover_seconds'))}), detected "
            f"{_seconds(values.get('detect_seconds'))}, steps lost "
            f"{values.get('worst_steps_lost')} at worst.", "",
            "- the single-host targets (0.5 s, 0 lost) across hosts: "
            + _verdict(None if values.get("worst_recover_seconds") is None else
                       values["worst_recover_seconds"] <= 0.5
                       and values.get("worst_steps_lost") == 0),
            "",
        ]


def _kill_goodput(lines: list[str]) -> None:
    result = _load("kill-goodput")
    if result is None:
        return
    lines += [
        f"## Useful steps per second with a kill -9 every {result['kill_every_seconds']:g} s, "
        f"{result['when']}", "", f"`{_command(result)}`", "", result["setup"] + ".", "",
        "| launcher | useful steps/s | useful steps | seconds | kills | steps executed | steps "
        "redone | kill -> every rank stepping again (median) | median step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for tool, values in result["tools"].items():
        left_out = len(result["kill_plan"]) - values["kills"]
        step = values["median_step_seconds"]
        lines.append(
            f"| {tool} | {values['useful_steps_per_second']:.2f} | {values['useful_steps']}"
            + (" (at least: recovering at the end)" if values["recovering_at_end"] else "")
            + f" | {values['seconds']:.0f} | {values['kills']}"
            + (f" ({left_out} left out)" if left_out else "")
            + f" | {values['steps_executed']} | {values['steps_redone']} | "
            f"{_seconds(values['median_recover_seconds'])} | "
            + ("-" if step is None else f"{step * 1000:.0f} ms") + " |")
    ratio = result["ratio"]
    lines += [
        "",
        f"- trainguard ahead of torchrun (useful steps per second above "
        f"{result['target']:g}x of it): {_verdict(result['met'])}"
        + ("" if ratio is None else f" ({ratio:.3f}x)"),
        "",
    ]


def _strategies(lines: list[str], medians: dict[str, Any], peers: dict[str, Any]) -> None:
    """Issue 3's targets for the process-level strategies."""
    best = min((values["recover_seconds"] for tool, values in peers.items()
                if not tool.startswith("trainguard") and values.get("recover_seconds")),
               default=None)
    in_place, retry = medians.get("trainguard-in-place"), medians.get("trainguard-retry")
    lines.append("")
    if in_place is not None:
        seconds = in_place["recover_seconds"]
        lines.append(f"- recover-in-place, fault -> every rank stepping within 1.0 s: "
                     f"{_verdict(seconds <= 1.0)} ({_seconds(seconds)})")
    if retry is not None and retry.get("step_seconds"):
        steps = retry["recover_seconds"] / retry["step_seconds"]
        lines.append(f"- step retry within 2 step times: {_verdict(steps <= 2)} "
                     f"({steps:.2f} step times of {_seconds(retry['step_seconds'])})")
    for name, values in (("recover-in-place", in_place), ("step retry", retry)):
        if values is not None and best is not None:
            share = values["recover_seconds"] / best
            lines.append(f"- {name} at most 1/2 of the best peer measured "
                         f"({_seconds(best)}): {_verdict(share <= 0.5)} ({share:.3f} of it)")


def _stall(lines: list[str]) -> None:
    stall = _load("checkpoint-stall")
    if stall is None:
        return
    lines += [
        f"## Checkpoint stall and restore, {stall['when']}", "", f"`{_command(stall)}`", "",
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
            f"{_seconds(size['snapshot_seconds'])} | {_seconds(size['raw_copy_seconds'])} | "
            f"{_seconds(size['torch_save_seconds'])} | {_seconds(size['torch_load_seconds'])} | "
            f"{_seconds(size['restore_memory_seconds'])} "
            f"({_seconds(size.get('plan_memory_seconds'))}) | "
            f"{_seconds(size['restore_disk_seconds'])} "
            f"({_seconds(size.get('plan_disk_seconds'))}) | "
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
        f"{_verdict(None if worst_raw is None else worst_raw <= 1.5)}",
        f"- snapshot stall at most 10% of torch.save: "
        f"{_verdict(None if worst_save is None else worst_save <= 0.10)}",
        "",
    ]


def _fault_engine(lines: list[str]) -> None:
    result = _load("fault_engine")
    if result is None:
        return
    memory, history, stream = result["memory"], result["history"], result["stream"]
    sweep = result["sweep"]
    levels = ", ".join(f"{level} {count:,}" for level, count in result["levels"].items())
    lines += [
        f"## Fault-level engine throughput and memory, {result['when']}", "",
        f"`{_command(result)}`", "",
        f"{result['devices']:,} devices, {result['history_hours']:g} h of history "
        f"({history['events']:,} events), then {stream['events']:,} events measured; "
        f"one core ({result['cpu_model']}, Python {result['python']}, pinned to CPU "
        f"{result['machine'].get('pinned_cpu')}). Each report evaluates its device and builds "
        "its DeviceHealth; the sweep evaluates every device with state once at the end, as the "
        "controller's polling does every interval. Memory: RSS growth from before the engine "
        "existed to after the stream, and the bytes reachable from the engine, divided by the "
        "devices.", "",
        "| phase | events or devices | seconds | per second | per CPU second |",
        "|---|---|---|---|---|",
        f"| history load | {history['events']:,} | {history['seconds']:.2f} | "
        f"{history['events_per_second']:,} | {history['events_per_cpu_second']:,} |",
        f"| measured stream | {stream['events']:,} | {stream['seconds']:.2f} | "
        f"{stream['events_per_second']:,} | {stream['events_per_cpu_second']:,} |",
        f"| sweep of every device | {sweep['devices']:,} | {sweep['seconds']:.2f} | "
        f"{sweep['devices_per_second']:,} | {sweep['devices_per_cpu_second']:,} |",
        "",
        f"- memory: RSS {memory['rss_engine_bytes'] / 2**20:.0f} MiB "
        f"({memory['rss_bytes_per_device']:,} bytes per device)"
        + (f"; reachable from the engine {memory['engine_reachable_bytes'] / 2**20:.0f} MiB "
           f"({memory['reachable_bytes_per_device']:,} bytes per device)"
           if "engine_reachable_bytes" in memory else ""),
        f"- levels at the end: {levels}",
        f"- at least {result['target_events_per_second']:,} events per second on one core: "
        f"{_verdict(result['met'])} ({stream['events_per_second']:,} events/s)",
        "",
    ]


def _overhead(lines: list[str]) -> None:
    result = _load("overhead")
    if result is None:
        return
    lines += [
        f"## Step-time overhead without faults, against torchrun, {result['when']}", "",
        f"`{_command(result)}`", "", result["setup"] + ". On a machine shared with other "
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
                            f"{_verdict(None)}")
            continue
        lines.append(f"| {variant['name']} | {variant['median_step_seconds'] * 1000:.1f} ms | "
                     f"{variant['overhead']:+.1%} |")
        if variant["met"] is not None:
            verdicts.append(f"- {variant['name']} under {result['target']:.0%}: "
                            f"{_verdict(variant['met'])} ({variant['overhead']:+.1%})")
    lines += ["", *verdicts, ""]


def _percents(values: list[float]) -> str:
    return ", ".join(f"{value:+.1%}" for value in values)


def _snapshot_overhead(lines: list[str]) -> None:
    result = _load("snapshot-overhead")
    if result is None:
        return
    variants = [name for name in result["sizes"][0]["overhead"]]
    lines += [
        f"## Step-time cost of a snapshot every step, {result['when']}", "",
        f"`{_command(result)}`", "", result["setup"] + ".", "",
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
                     f"snapshots: {_verdict(met)} ({overheads[name]:+.1%}; noise {noise}"
                     + (f"; by round {_percents(rounds[name])}, the control by round "
                        f"{_percents(rounds['no snapshots, again'])})" if name in rounds
                        else ")")
                     for name, met in size["met"].items()]
        if "paired" in size:
            paired = size["paired"]
            verdicts.append(
                f"- {size['name']}, paired within each run (a snapshot every "
                f"{paired['every']}th step, shares; its two steps against the next two, "
                f"{paired['snapshots_compared']} snapshots): "
                f"{paired['snapshot_seconds'] * 1000:.2f} ms per snapshot, "
                f"{paired['overhead']:+.1%} of a {paired['clean_step_seconds'] * 1000:.1f} ms "
                f"step: {_verdict(paired['met'])} "
                f"(by round {_percents(paired['overhead_by_round'])})")
        if "blocks" in size:
            blocks = size["blocks"]
            medians = blocks["median_step_seconds"]
            verdicts.append(
                f"- {size['name']}, within each run (a snapshot after every step of every "
                f"second run of {blocks['steps']} steps, shares; {blocks['runs_compared']} such "
                f"runs against the runs between them): the rounds' median steps "
                f"{medians['shares, every step'] * 1000:.1f} ms against "
                f"{medians['no snapshots'] * 1000:.1f} ms; the median of the rounds' "
                f"overheads {blocks['overhead']:+.1%}: "
                f"{_verdict(blocks['met'])} (by round {_percents(blocks['overhead_by_round'])})")
        if size.get("checkpoint_cpu_seconds"):
            verdicts.append(
                f"- {size['name']}, CPU of a snapshot on the training thread (median): "
                + ", ".join(f"{name} {seconds * 1e6:.0f} us"
                            for name, seconds in size["checkpoint_cpu_seconds"].items()))
    lines += ["", *verdicts, ""]


def _failover(lines: list[str]) -> None:
    found = _load("controller-failover")
    if found is None:
        return
    medians = found["medians"]
    lines += [
        f"## A controller killed during a recovery, {found['when']}", "", found["setup"] + ".", "",
        f"`{_command(found)}` ({len(found['trials'])} trials in all; medians, worst in brackets)",
        "", "| variant | rank killed -> every rank stepping again | steps lost | leader killed -> "
        "standby leads |", "|---|---|---|---|"]
    for variant, values in medians.items():
        lines.append(
            f"| {variant} | {_seconds(values['recover_seconds'])} "
            f"({_seconds(values.get('worst_recover_seconds'))}) | {values['steps_lost']} "
            f"({values.get('worst_steps_lost')}) | {_seconds(values.get('takeover_seconds'))} "
            f"({_seconds(values.get('worst_takeover_seconds'))}) |")
    worst = medians.get("leader-killed", {}).get("worst_takeover_seconds")
    lines += ["", "- a standby leads within 3 s of the leader's loss in every trial: "
              f"{_verdict(None if worst is None else worst <= 3)}", ""]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _scale(lines: list[str]) -> None:
    found = _load("controller-scale")
    if found is None:
        return
    lines += [
        f"## Controller scale: hosts reporting their devices every 5 s, {found['when']}", "",
        found["setup"] + ".", "", f"`{_command(found)}`; target: {found['target']}.", "",
        "| hosts x 16 devices | reports/s answered (offered) | controller CPU | etcd received "
        "| report -> answer p50 / p99 | fault report -> decision p50 / p99 | target |",
        "|---|---|---|---|---|---|---|"]
    for run in found["runs"]:
        lines.append(
            f"| {run['hosts']:,} | {run['reports_per_second']:.0f} "
            f"({run['offered_reports_per_second']:.0f}) | {run['controller_cores']:.2f} cores "
            f"| {run['etcd_bytes_per_second']:.0f} B/s | {_ms(run['p50_seconds'])} / "
            f"{_ms(run['p99_seconds'])} | {_ms(run['fault_p50_seconds'])} / "
            f"{_ms(run['fault_p99_seconds'])} ({run['fault_reports']} faults) | "
            f"{_verdict(run['met'])} |")
    lines.append("")


def _latency(value: float | None) -> str:
    return _ms(value) if value is None or value < 1 else _seconds(value)


def _detection(lines: list[str]) -> None:
    found = _load("detection-latency")
    if found is None:
        return
    resolution = found["resolution"]
    lines += [
        f"## Detection latency on one host, per fault kind, {found['when']}", "",
        found["setup"] + f" (millisecond timestamps; the store read every "
        f"{resolution['poll_seconds'] * 1000:g} ms).", "",
        f"`{_command(found)}`: median (worst) from the injection to the host's document "
        "showing the fault, the agent's detector noticing it, the controller grading it, and "
        "its decision.", "",
        "| fault | trials | document | shown in it | noticed | graded | decision | target |",
        "|---|---|---|---|---|---|---|---|"]
    verdicts, words = [], {"controller": "grading"}
    for kind, values in found["kinds"].items():
        if "trials" not in values:
            lines.append(f"| {kind} | - | - | - | - | - | - | {values.get('why', '')} |")
            verdicts.append(f"- {kind}: {_verdict(None)} ({values.get('why', '')})")
            continue
        cells = [f"{_latency(values[f'median_{measure}_seconds'])} "
                 f"({_latency(values[f'worst_{measure}_seconds'])})"
                 if values[f"median_{measure}_seconds"] is not None else "-"
                 for measure in ("document", "noticed", "controller", "decision")]
        lines.append(f"| {kind} | {values['trials']} | {values.get('document', '')} | "
                     f"{' | '.join(cells)} | {values['target']} |")
        verdicts.append(f"- {kind}, {values['target']}, for the "
                        f"{', '.join(words.get(m, m) for m in values.get('checked', []))}: "
                        f"{_verdict(values['met'])}")
    lines += ["", *verdicts, *(f"- {kind}: not measured ({why})"
                              for kind, why in found.get("not_measured", {}).items()), ""]


def main() -> None:
    lines = ["# Benchmark results", "",
             "Written by `python -m benchmarks.summary` from the JSON files beside it; each "
             "section names the command that produced it. Machine: 2 cores, no GPU.", ""]
    _recovery(lines)
    _host_loss(lines)
    _failover(lines)
    _scale(lines)
    _detection(lines)
    _kill_goodput(lines)
    _stall(lines)
    _fault_engine(lines)
    _overhead(lines)
    _snapshot_overhead(lines)
    path = common.RESULTS / "SUMMARY.md"
    path.write_text("\n".join(lines))
    print(path.read_text())


if __name__ == "__main__":
    main()
