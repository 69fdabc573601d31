"""Write results/SUMMARY.md from the JSON results, with each target and whether it is met.
The sections on recovery and detection are here; those on what trainguard costs while nothing
fails are in :mod:`benchmarks.summary_costs`.

    python -m benchmarks.summary
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks import common, summary_costs
from benchmarks.summary_text import command, load, seconds, verdict

_RECOVERY_HEAD = ("| launcher | fault -> detected | fault -> every rank stepping again | "
                  "steps lost |", "|---|---|---|---|")


def _recovery_rows(medians: dict[str, dict[str, Any]]) -> list[str]:
    return [f"| {tool} | {seconds(values['detect_seconds'])} | "
            f"{seconds(values['recover_seconds'])} | {values['steps_lost']} |"
            for tool, values in medians.items()]


def _recovery(lines: list[str]) -> None:
    crash = load("recovery-crash")
    if crash is not None:
        medians = crash["medians"]
        ours, theirs = medians.get("trainguard", {}), medians.get("torchrun", {})
        lines += [
            f"## Recovery from a killed rank (kill -9), {crash['when']}",
            "", crash["setup"] + ".", "",
            f"`{command(crash)}` ({len(crash['trials'])} trials in all; medians)", "",
            *_RECOVERY_HEAD,
        ]
        peers = dict(medians)
        dlrover = load("recovery-dlrover")
        if dlrover is not None:
            peers.update(dlrover["medians"])
            lines.insert(len(lines) - 2, f"DLRover: `{command(dlrover)}`, {dlrover['when']}, "
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
            f"- recovery at most 1/3 of torchrun's: {verdict(met)}"
            + (f" ({ratio:.3f} of it)" if ratio is not None else ""),
            f"- 0 completed steps lost: {verdict(ours.get('steps_lost') == 0 if ours else None)}",
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
            f"`{command(wide)}` ({len(wide['trials'])} trials in all; medians)", "",
            *_RECOVERY_HEAD, *_recovery_rows(wide["medians"]), "",
            "- every rank stepping again within 0.5 s with 0 steps lost, every tool (the "
            f"target at 75 MB per rank): {verdict(slowest <= 0.5 and lost == 0)}", "",
        ]
    hang = load("recovery-hang")
    if hang is not None:
        values = hang["medians"].get("trainguard", {})
        detect = values.get("detect_seconds")
        worst = values.get("worst_detect_seconds", detect)  # older results have medians only
        trials = [t for t in hang["trials"] if t["tool"] == "trainguard"]
        inside = sum(1 for t in trials if t.get("moment") == "snapshot")
        lost = sorted(t["steps_lost"] for t in trials)
        lines += [
            f"## A hung rank (SIGSTOP), {hang['when']}", "",
            f"`{command(hang)}`: {len(hang['trials'])} trials ({inside} stopped inside the "
            "snapshot, the others at a random point after a step began); medians. Step time "
            "about 0.1 s.",
            "",
            f"- fault -> detected: {seconds(detect)} (worst {seconds(worst)}); fault -> every "
            f"rank stepping again: {seconds(values.get('recover_seconds'))}; steps lost "
            f"per trial: {lost}" + (" (the agent's log names the ranks that lacked the step, "
                                    "and why no replica stood in)" if any(lost) else ""),
            f"- hang detected within 3 s in every trial: "
            f"{verdict(None if worst is None else worst <= 3)}",
            "- torchrun, for comparison (FINDINGS.md, not re-measured): nothing for 30 minutes "
            "(gloo's timeout); about 96 s with a 60 s process-group timeout.",
            "",
        ]


def _host_loss(lines: list[str]) -> None:
    lost = load("host-loss")
    if lost is not None:
        medians = lost["medians"]
        ours, theirs = medians.get("trainguard", {}), medians.get("torchrun", {})
        lines += [
            f"## A host lost whole (SIGKILL to its launcher and workers), {lost['when']}", "",
            lost["setup"] + ".", "",
            f"`{command(lost)}` ({len(lost['trials'])} trials in all; medians, worst in "
            "brackets)", "",
            "| launcher | fault -> detected | fault -> every rank stepping again | steps lost "
            "| processes restarted |",
            "|---|---|---|---|---|",
        ]
        for tool, values in medians.items():
            lines.append(
                f"| {tool} | {seconds(values['detect_seconds'])} "
                f"({seconds(values.get('worst_detect_seconds'))}) | "
                f"{seconds(values['recover_seconds'])} "
                f"({seconds(values.get('worst_recover_seconds'))}) | {values['steps_lost']} "
                f"({values.get('worst_steps_lost')}) | {values['processes_restarted']} |")
        ratio = None
        if ours.get("recover_seconds") and theirs.get("recover_seconds"):
            ratio = theirs["recover_seconds"] / ours["recover_seconds"]
        worst_detect = ours.get("worst_detect_seconds")
        worst_recover = ours.get("worst_recover_seconds")
        lines += [
            "",
            "- detected within 2 s in every trial: "
            f"{verdict(None if worst_detect is None else worst_detect <= 2)}",
            "- every rank stepping within 3 s in every trial: "
            f"{verdict(None if worst_recover is None else worst_recover <= 3)}",
            f"- 0 completed steps lost in every trial: "
            f"{verdict(ours.get('worst_steps_lost') == 0 if ours else None)}",
            f"- at least 5x faster than torchrun: {verdict(None if ratio is None else ratio >= 5)}"
            + (f" ({ratio:.0f}x)" if ratio is not None else ""),
            "",
        ]
    killed = load("host-rank-kill")
    if killed is not None:
        values = killed["medians"].get("trainguard", {})
        lines += [
            f"## A rank killed (kill -9) in a job across 2 hosts, {killed['when']}", "",
            f"`{command(killed)}` ({len(killed['trials'])} trials): fault -> every rank "
            f"stepping again {seconds(values.get('recover_seconds'))} (worst "
            f"{seconds(values.get('worst_recover_seconds'))}), detected "
            f"{seconds(values.get('detect_seconds'))}, steps lost "
            f"{values.get('worst_steps_lost')} at worst.", "",
            "- the single-host targets (0.5 s, 0 lost) across hosts: "
            + verdict(None if values.get("worst_recover_seconds") is None else
                       values["worst_recover_seconds"] <= 0.5
                       and values.get("worst_steps_lost") == 0),
            "",
        ]


def _kill_goodput(lines: list[str]) -> None:
    result = load("kill-goodput")
    if result is None:
        return
    lines += [
        f"## Useful steps per second with a kill -9 every {result['kill_every_seconds']:g} s, "
        f"{result['when']}", "", f"`{command(result)}`", "", result["setup"] + ".", "",
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
            f"{seconds(values['median_recover_seconds'])} | "
            + ("-" if step is None else f"{step * 1000:.0f} ms") + " |")
    ratio = result["ratio"]
    lines += [
        "",
        f"- trainguard ahead of torchrun (useful steps per second above "
        f"{result['target']:g}x of it): {verdict(result['met'])}"
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
        recovered = in_place["recover_seconds"]
        lines.append(f"- recover-in-place, fault -> every rank stepping within 1.0 s: "
                     f"{verdict(recovered <= 1.0)} ({seconds(recovered)})")
    if retry is not None and retry.get("step_seconds"):
        steps = retry["recover_seconds"] / retry["step_seconds"]
        lines.append(f"- step retry within 2 step times: {verdict(steps <= 2)} "
                     f"({steps:.2f} step times of {seconds(retry['step_seconds'])})")
    for name, values in (("recover-in-place", in_place), ("step retry", retry)):
        if values is not None and best is not None:
            share = values["recover_seconds"] / best
            lines.append(f"- {name} at most 1/2 of the best peer measured "
                         f"({seconds(best)}): {verdict(share <= 0.5)} ({share:.3f} of it)")


def _fault_engine(lines: list[str]) -> None:
    result = load("fault_engine")
    if result is None:
        return
    memory, history, stream = result["memory"], result["history"], result["stream"]
    sweep = result["sweep"]
    levels = ", ".join(f"{level} {count:,}" for level, count in result["levels"].items())
    lines += [
        f"## Fault-level engine throughput and memory, {result['when']}", "",
        f"`{command(result)}`", "",
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
        f"{verdict(result['met'])} ({stream['events_per_second']:,} events/s)",
        "",
    ]


def _failover(lines: list[str]) -> None:
    found = load("controller-failover")
    if found is None:
        return
    medians = found["medians"]
    lines += [
        f"## A controller killed during a recovery, {found['when']}", "", found["setup"] + ".", "",
        f"`{command(found)}` ({len(found['trials'])} trials in all; medians, worst in brackets)",
        "", "| variant | rank killed -> every rank stepping again | steps lost | leader killed -> "
        "standby leads |", "|---|---|---|---|"]
    for variant, values in medians.items():
        lines.append(
            f"| {variant} | {seconds(values['recover_seconds'])} "
            f"({seconds(values.get('worst_recover_seconds'))}) | {values['steps_lost']} "
            f"({values.get('worst_steps_lost')}) | {seconds(values.get('takeover_seconds'))} "
            f"({seconds(values.get('worst_takeover_seconds'))}) |")
    worst = medians.get("leader-killed", {}).get("worst_takeover_seconds")
    lines += ["", "- a standby leads within 3 s of the leader's loss in every trial: "
              f"{verdict(None if worst is None else worst <= 3)}", ""]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _scale(lines: list[str]) -> None:
    found = load("controller-scale")
    if found is None:
        return
    lines += [
        f"## Controller scale: hosts reporting their devices every 5 s, {found['when']}", "",
        found["setup"] + ".", "", f"`{command(found)}`; target: {found['target']}.", "",
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
            f"{verdict(run['met'])} |")
    lines.append("")


def _latency(value: float | None) -> str:
    return _ms(value) if value is None or value < 1 else seconds(value)


def _detection(lines: list[str]) -> None:
    found = load("detection-latency")
    if found is None:
        return
    resolution = found["resolution"]
    lines += [
        f"## Detection latency on one host, per fault kind, {found['when']}", "",
        found["setup"] + f" (millisecond timestamps; the store read every "
        f"{resolution['poll_seconds'] * 1000:g} ms).", "",
        f"`{command(found)}`: median (worst) from the injection to the host's document "
        "showing the fault, the agent's detector noticing it, the controller grading it, and "
        "its decision.", "",
        "| fault | trials | document | shown in it | noticed | graded | decision | target |",
        "|---|---|---|---|---|---|---|---|"]
    verdicts, words = [], {"controller": "grading"}
    for kind, values in found["kinds"].items():
        if "trials" not in values:
            lines.append(f"| {kind} | - | - | - | - | - | - | {values.get('why', '')} |")
            verdicts.append(f"- {kind}: {verdict(None)} ({values.get('why', '')})")
            continue
        cells = [f"{_latency(values[f'median_{measure}_seconds'])} "
                 f"({_latency(values[f'worst_{measure}_seconds'])})"
                 if values[f"median_{measure}_seconds"] is not None else "-"
                 for measure in ("document", "noticed", "controller", "decision")]
        lines.append(f"| {kind} | {values['trials']} | {values.get('document', '')} | "
                     f"{' | '.join(cells)} | {values['target']} |")
        verdicts.append(f"- {kind}, {values['target']}, for the "
                        f"{', '.join(words.get(m, m) for m in values.get('checked', []))}: "
                        f"{verdict(values['met'])}")
    lines += ["", *verdicts, *(f"- {kind}: not measured ({why})"
                              for kind, why in found.get("not_measured", {}).items()), ""]


def _gpu(lines: list[str]) -> None:
    found = load("gpu-check")
    if found is None:
        return
    where, stall = found["environment"], found["snapshot"]
    arguments = found["machine"]["argv"][1:]
    if "--output" in arguments:  # where it wrote on that machine, not where it is kept
        del arguments[arguments.index("--output"):arguments.index("--output") + 2]
    pair, faults = found.get("nccl_two_ranks_one_gpu", {}), found["injected_faults"]
    refusal = next((line.split("]: ", 1)[-1].strip()
                    for line in pair.get("output_tail", "").splitlines()
                    if "Duplicate GPU" in line), "refused")
    recovery = found["recovery"]
    lines += [
        f"## GPU check, {found.get('when', '')}", "",
        f"{where.get('gpu', where['device'])}, torch {where['torch']}, CUDA "
        f"{where.get('cuda', '-')}, NCCL {where.get('nccl', '-')}; "
        f"`{' '.join(['benchmarks/gpu_check.sh', *arguments])}`.", "",
        f"- snapshot of {stall['state_bytes'] / 2**30:.1f} GiB on the device into a page-locked "
        f"slot: {_ms(stall['snapshot_seconds'])}, against {_ms(stall['raw_copy_seconds'])} "
        f"for a raw asynchronous copy into pinned memory "
        f"({stall['snapshot_over_raw_copy']:.2f}x; within 1.5x: "
        f"{verdict(stall['snapshot_over_raw_copy'] <= 1.5)}); pageable "
        f"{_ms(stall['snapshot_pageable_seconds'])}; restored onto "
        f"{', '.join(stall['restored_on'])} in "
        f"{seconds(stall['restore_seconds'])}, bit for bit: {stall['restored_bitwise']}"]
    if "nccl_abort" in found:
        abort = found["nccl_abort"]
        objects = abort.get("objects_over_nccl")  # absent from results before it was checked
        lines.append(f"- NCCL: a group aborted and left in "
                     f"{seconds(abort.get('leave_seconds'))}, the next one "
                     f"working: {abort['ok']}; two ranks on one GPU: "
                     + ("yes" if pair.get("ok") else f"no ({refusal})")
                     + ("" if objects is None else
                        f"; trainguard's object collectives over it: {objects}"))
    lines.append(f"- kill -9 of one of two ranks ({recovery['backend']}, CUDA tensors): every "
                 f"rank stepping again after {seconds(recovery['recover_seconds'])}, "
                 f"{recovery['steps_lost']} steps lost, the other process kept: "
                 f"{recovery['survivor_kept']}")
    for fault in faults["faults"]:
        lines.append(f"- {fault['kind']} injected at step {fault['at_step']} of one rank "
                     f"({faults['backend']}): stepping again after "
                     f"{seconds(fault.get('seconds'))}, {fault.get('steps_lost')} steps lost, "
                     f"process kept: {fault.get('process_kept')}")
    lines += [f"- every check passed: {verdict(found['ok'])}", ""]


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
    summary_costs.stall(lines)
    _gpu(lines)
    _fault_engine(lines)
    summary_costs.overhead(lines)
    summary_costs.snapshot_overhead(lines)
    for every in (3, 4, 5):
        summary_costs.snapshot_overhead(lines, f"snapshot-overhead-every-{every}",
                                        about=f": the demo's size, a snapshot every {every} "
                                              "steps within each run")
    summary_costs.snapshot_overhead(lines, "snapshot-overhead-floors",
                                    about=": the demo's size, with the floors under any "
                                          "snapshot (the state dicts alone, the per-rank parts "
                                          "alone)")
    summary_costs.snapshot_overhead(lines, "snapshot-overhead-16-cores", elsewhere=True)
    path = common.RESULTS / "SUMMARY.md"
    path.write_text("\n".join(lines))
    print(path.read_text())


if __name__ == "__main__":
    main()
