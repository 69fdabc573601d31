"""Fault-level engine: events per second on one core, and memory, for a large cluster.

The workload is synthetic and deterministic from the seed: ``--devices`` devices named like
``node-0123/npu-5`` (8 per node), first ``--history-hours`` of history, then ``--events``
further events continuing the timeline (the measured stream). Everything is generated before
any timing starts. Each device has faults at random times (a Poisson process), on average
``--events-per-device-day`` events a day; a share of devices (``--bad-devices``) is flaky and
has 5 times as many, more of them serious, so that escalation has work to do. A fault is one
of (each an ``occur`` and a later ``recover`` unless said otherwise):

- not_handle: a NotHandleFault chip code of faultCode.json, gone after 1 s to 1 h;
- link_flap: the RoCE link down 81078603 for 5 to 60 s (log-uniform: 44% of them last more
  than the default FaultDuration timeout of 20 s, which raises the device to PreSeparateNPU,
  and 5 such timeouts in 24 h raise it to ManuallySeparateNPU);
- link_outage: 81078603 for 10 min to 12 h (a broken cable);
- separate: a SeparateNPU code, gone after 10 min to 6 h (the chip replaced or reset);
- uce: the uncorrectable memory error 80E01801, a ``once`` (2 in 24 h: ManuallySeparateNPU);
- hbm: 80E18005 for 1 to 30 s (3 in 24 h: ManuallySeparateNPU);
- other: a RestartRequest, RestartBusiness, FreeRestartNPU, RestartNPU or SubHealthFault code
  for 1 s to 10 min.

Measured, on one core (the process is pinned to one CPU unless ``--no-pin``; the engine is
single-threaded): ``FaultEngine.report`` over the history and, separately, over the stream
(each report evaluates that device and builds its DeviceHealth, the level hand-over); then a
sweep evaluating every device with state (``FaultEngine.devices()``) once at the end of the
timeline, as the controller's polling does every interval, which gives the level counts.
Memory: the process's RSS before the engine exists and after the stream (the workload's events
exist throughout, so the difference is what the engine allocated, less any memory the
generator freed that the engine reused), and the bytes reachable from the engine minus those
of an empty engine (sys.getsizeof over the object graph: it also counts the device names and
times the engine shares with the events). ``--tracemalloc`` adds a separate, slower pass that
reports tracemalloc's current and peak bytes. The cyclic GC stays on; the pre-generated events
are frozen (gc.freeze) so that collections scan only what the engine allocates, as they would
in a process without them.

The run fails (exit status 1, nothing written) unless, at the end, some devices are
ManuallySeparateNPU and some PreSeparateNPU with a FaultDuration reason: a benchmark of an
engine that escalates nothing measures nothing. One JSON object goes to stdout, progress to
stderr; ``--output`` also writes it to benchmarks/results/fault_engine.json (or the path given).

Target (the issue): at least 100,000 events per second on one core, with 100,000 devices and a
day of history.

    python -m benchmarks.fault_engine --devices 100000 --history-hours 24 --events 1000000 --seed 1
"""

from __future__ import annotations

import argparse
import bisect
import collections
import enum
import gc
import itertools
import json
import math
import operator
import os
import platform
import random
import sys
import time
import tracemalloc
import types
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import psutil

from benchmarks import common
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent, UpgradeType
from trainguard.faults.levels import Level

NAME = "fault_engine"
_time = operator.attrgetter("time")
TARGET_EVENTS_PER_SECOND = 100_000
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: times are wall seconds, as for real devices
NPUS_PER_NODE = 8
BAD_FACTOR = 5  # a flaky device has this many times the events of a healthy one

UCE, HBM, LINK_DOWN = "80E01801", "80E18005", "81078603"

# kind -> (seconds until the recovery, log-uniform; None: a ``once``)
_DURATIONS: dict[str, tuple[float, float] | None] = {
    "not_handle": (1, 3600), "link_flap": (5, 60), "link_outage": (600, 43200),
    "separate": (600, 21600), "uce": None, "hbm": (1, 30), "other": (1, 600)}
# the share of each kind among the faults of a healthy and of a flaky device
_MIX = {
    "healthy": {"not_handle": 0.60, "link_flap": 0.28, "link_outage": 0.01, "separate": 0.01,
                "uce": 0.01, "hbm": 0.003, "other": 0.087},
    "flaky": {"not_handle": 0.20, "link_flap": 0.45, "link_outage": 0.02, "separate": 0.02,
              "uce": 0.25, "hbm": 0.03, "other": 0.03},
}
_OTHER_LISTS = ("RestartRequestCodes", "RestartBusinessCodes", "FreeRestartNPUCodes",
                "RestartNPUCodes", "SubHealthFaultCodes")


def _log(message: str) -> None:
    print(f"[fault_engine] {message}", file=sys.stderr, flush=True)


class Workload:
    """The devices, the history and the measured stream, in time order."""

    def __init__(self, names: list[str], history: list[DeviceFaultEvent],
                 stream: list[DeviceFaultEvent], faults: dict[str, int],
                 flaky: int) -> None:
        self.names = names
        self.history = history
        self.stream = stream
        self.faults = faults  # how many faults of each kind the history and stream begin
        self.flaky = flaky


def _code_lists() -> dict[str, list[str]]:
    """The codes each kind draws from, spelled as in faultCode.json; network codes apart."""
    document = json.loads(resources.files("trainguard.faults").joinpath(
        "data", "faultCode.json").read_text())
    table = fault_codes.default_table()
    special = {fault_codes.code_key(code) for code in (UCE, HBM, LINK_DOWN)}

    def chip_codes(*lists: str) -> list[str]:
        codes = {code.strip(): None for name in lists for code in document.get(name, [])}
        return [code for code in codes if not table.is_network(fault_codes.code_key(code))
                and fault_codes.code_key(code) not in special]

    return {"not_handle": chip_codes("NotHandleFaultCodes"), "link_flap": [LINK_DOWN],
            "link_outage": [LINK_DOWN], "separate": chip_codes("SeparateNPUCodes"),
            "uce": [UCE], "hbm": [HBM], "other": chip_codes(*_OTHER_LISTS)}


def device_names(devices: int) -> list[str]:
    return [f"node-{index // NPUS_PER_NODE:04d}/npu-{index % NPUS_PER_NODE}"
            for index in range(devices)]


def generate(*, devices: int, history_hours: float, events: int, per_device_day: float,
             flaky_share: float, seed: int) -> Workload:
    """The workload: faults start as a Poisson process over the cluster; each is one or two
    events. Events are generated until the timeline holds ``events`` after the history."""
    rng = random.Random(seed)
    names = device_names(devices)
    flaky = min(devices, round(devices * flaky_share))
    flaky_devices = sorted(rng.sample(range(devices), flaky))
    healthy_devices = sorted(set(range(devices)) - set(flaky_devices))
    lists = _code_lists()
    kinds = list(_DURATIONS)
    groups = []
    weight_sum = len(healthy_devices) + BAD_FACTOR * flaky
    per_device = per_device_day / 86400 * devices / weight_sum  # a healthy device's events/s
    rate = 0.0
    for group, members, factor in (("healthy", healthy_devices, 1),
                                   ("flaky", flaky_devices, BAD_FACTOR)):
        if not members:
            continue
        mix = _MIX[group]
        events_per_fault = sum(share * (1 if _DURATIONS[kind] is None else 2)
                               for kind, share in mix.items()) / sum(mix.values())
        rate += len(members) * factor * per_device / events_per_fault
        cumulative = list(itertools.accumulate([mix[kind] for kind in kinds]))
        groups.append((rate, members, cumulative))
    history_end = history_hours * 3600
    cluster_events_per_second = per_device_day * devices / 86400
    end = history_end + 1.1 * events / cluster_events_per_second + 600
    # Events are made as faults start, then sorted: the memory the generator frees is mostly
    # whole arenas at the end, so that the engine does not grow into it unseen by the RSS.
    timeline: list[DeviceFaultEvent] = []
    faults = dict.fromkeys(kinds, 0)
    start = 0.0
    while True:
        while start < end:
            start += rng.expovariate(rate)
            pick = rng.random() * rate
            _, members, cumulative = next(group for group in groups if pick < group[0])
            name = names[members[rng.randrange(len(members))]]
            kind = kinds[min(bisect.bisect(cumulative, rng.random() * cumulative[-1]),
                             len(kinds) - 1)]
            faults[kind] += 1
            kind_codes = lists[kind]
            code = kind_codes[rng.randrange(len(kind_codes))] if len(kind_codes) > 1 \
                else kind_codes[0]
            duration = _DURATIONS[kind]
            if duration is None:
                timeline.append(DeviceFaultEvent(name, code, Assertion.ONCE, EPOCH + start))
                continue
            timeline.append(DeviceFaultEvent(name, code, Assertion.OCCUR, EPOCH + start))
            low, high = duration
            recovered = start + math.exp(rng.uniform(math.log(low), math.log(high)))
            timeline.append(DeviceFaultEvent(name, code, Assertion.RECOVER, EPOCH + recovered))
        after = sum(1 for event in timeline
                    if EPOCH + history_end <= event.time < EPOCH + end)
        if after >= events:
            break
        end += end - history_end  # too few by chance: continue the timeline

    timeline.sort(key=_time)  # stable: an occur stays before its recover at the same time
    split = bisect.bisect_left(timeline, EPOCH + history_end, key=_time)
    history, stream = timeline[:split], timeline[split:split + events]
    del timeline
    return Workload(names, history, stream, faults, flaky)


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _feed(engine: device_health.FaultEngine, events: Sequence[DeviceFaultEvent]
          ) -> dict[str, float]:
    """Report every event; the wall and CPU seconds it took."""
    report = engine.report
    wall, cpu = time.perf_counter(), time.process_time()
    for event in events:
        report(event)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return _rates(len(events), wall, cpu, "events")


def _rates(count: int, wall: float, cpu: float, unit: str) -> dict[str, float]:
    return {unit: count, "seconds": round(wall, 4), "cpu_seconds": round(cpu, 4),
            f"{unit}_per_second": round(count / wall) if wall > 0 else 0,
            f"{unit}_per_cpu_second": round(count / cpu) if cpu > 0 else 0}


_NOT_STATE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
              enum.Enum)


def reachable_bytes(root: object) -> tuple[int, int]:
    """sys.getsizeof summed over what ``root`` reaches (each object once), not descending into
    classes, modules, functions and enum members; and the number of objects."""
    seen: set[int] = set()
    stack = [root]
    total = count = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, _NOT_STATE):
            continue
        total += sys.getsizeof(item)
        count += 1
        stack.extend(gc.get_referents(item))
    return total, count


def sweep(engine: device_health.FaultEngine, names: Sequence[str], now: float
          ) -> tuple[dict[str, float], dict[str, int], dict[str, int]]:
    """Evaluate every device with state at ``now``, as the controller's polling does
    (trainguard.controller.device_levels): the rate, the level counts of all ``names`` (a device
    without state is NormalNPU) and the upgrade reasons."""
    levels: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    health = engine.health
    wall, cpu = time.perf_counter(), time.process_time()
    states = [health(device, now) for device in sorted(engine.devices())]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    for state in states:
        levels[str(state.level)] += 1
        for reason in state.reasons:
            reasons[f"{reason.fault_code} {reason.upgrade_type} {reason.fault_level}"] += 1
    levels[str(Level.NORMAL_NPU)] += len(set(names) - {state.device for state in states})
    ordered = {str(level): levels[str(level)] for level in Level if levels[str(level)]}
    return _rates(len(states), wall, cpu, "devices"), ordered, dict(sorted(reasons.items()))


def sanity(levels: dict[str, int], reasons: dict[str, int]) -> list[str]:
    """What is wrong with the end state, if anything."""
    problems = []
    if not levels.get(str(Level.MANUALLY_SEPARATE_NPU)):
        problems.append("no device is ManuallySeparateNPU: frequency escalation did not fire")
    if not levels.get(str(Level.PRE_SEPARATE_NPU)):
        problems.append("no device is PreSeparateNPU")
    if not any(f" {UpgradeType.FAULT_DURATION} " in reason for reason in reasons):
        problems.append("no FaultDuration reason: the 81078603 duration rule did not fire")
    return problems


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _pin(cpu: int | None) -> int | None:
    """Run on one CPU: ``cpu``, or the first this process may use."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    chosen = min(os.sched_getaffinity(0)) if cpu is None else cpu
    os.sched_setaffinity(0, {chosen})
    return chosen


def _tracemalloc_pass(workload: Workload) -> dict[str, int]:
    """A fresh engine fed everything under tracemalloc: what it allocated and kept, and the
    peak. Slow; its times are not reported."""
    tracemalloc.start()
    engine = device_health.FaultEngine()
    for events in (workload.history, workload.stream):
        for event in events:
            engine.report(event)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    devices = len(workload.names)
    return {"tracemalloc_current_bytes": current, "tracemalloc_peak_bytes": peak,
            "tracemalloc_current_bytes_per_device": round(current / devices),
            "tracemalloc_peak_bytes_per_device": round(peak / devices)}


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    began = time.perf_counter()
    pinned = None if args.no_pin else _pin(args.cpu)
    _log(f"pinned to CPU {pinned}" if pinned is not None else "not pinned")
    _log(f"generating {args.devices} devices, {args.history_hours} h of history at "
         f"{args.events_per_device_day} events per device and day, then {args.events} events")
    wall = time.perf_counter()
    workload = generate(devices=args.devices, history_hours=args.history_hours,
                        events=args.events, per_device_day=args.events_per_device_day,
                        flaky_share=args.bad_devices, seed=args.seed)
    history, stream = workload.history, workload.stream
    _log(f"generated {len(history)} history and {len(stream)} stream events in "
         f"{time.perf_counter() - wall:.1f} s")
    engine = device_health.FaultEngine()
    empty = device_health.FaultEngine()
    gc.collect()
    gc.freeze()  # the workload is not the engine's: collections need not scan it
    rss_before = _rss()

    _log("loading the history")
    history_rates = _feed(engine, history)
    rss_history = _rss()
    _log(f"history: {history_rates['events_per_second']:,} events/s")
    _log("feeding the measured stream")
    stream_rates = _feed(engine, stream)
    rss_after = _rss()
    _log(f"stream: {stream_rates['events_per_second']:,} events/s")

    end = stream[-1].time if stream else (history[-1].time if history else EPOCH)
    due = len(engine.devices_due())
    sweep_rates, levels, reasons = sweep(engine, workload.names, end)
    _log(f"sweep: {sweep_rates['devices_per_second']:,} devices/s; levels {levels}")
    memory: dict[str, Any] = {
        "rss_before_bytes": rss_before, "rss_after_history_bytes": rss_history,
        "rss_after_bytes": rss_after, "rss_engine_bytes": rss_after - rss_before,
        "rss_bytes_per_device": round((rss_after - rss_before) / args.devices),
    }
    if not args.no_reachable:
        _log("counting the bytes the engine reaches")
        full, objects = reachable_bytes(engine)
        base, base_objects = reachable_bytes(empty)
        memory.update({"engine_reachable_bytes": full - base,
                       "engine_reachable_objects": objects - base_objects,
                       "reachable_bytes_per_device": round((full - base) / args.devices)})
    gc.unfreeze()
    if args.tracemalloc:
        _log("tracemalloc pass (slow)")
        memory.update(_tracemalloc_pass(workload))

    problems = sanity(levels, reasons)
    rate = stream_rates["events_per_second"]
    machine = {**common.machine(), "argv": [str(Path(__file__)), *argv],
               "cpu_model": cpu_model(), "pinned_cpu": pinned,
               "load_average": [round(load, 2) for load in os.getloadavg()]}
    return {
        "benchmark": NAME, "when": common.recorded_at(),
        "machine": machine, "python": platform.python_version(), "cpu_model": machine["cpu_model"],
        "devices": args.devices, "events": len(stream), "history_events": len(history),
        "history_hours": args.history_hours,
        "workload": {
            "seed": args.seed, "events_per_device_day": args.events_per_device_day,
            "flaky_devices": workload.flaky, "flaky_factor": BAD_FACTOR,
            "timeline_seconds": round(end - EPOCH, 1), "faults": workload.faults,
            "engine_devices": len(set(engine.devices())), "devices_due_at_end": due,
        },
        "history": history_rates, "stream": stream_rates, "sweep": sweep_rates,
        "memory": memory, "levels": levels, "reasons": reasons,
        "gc": "on; the pre-generated events frozen (gc.freeze)",
        "seconds": round(time.perf_counter() - began, 2),
        "target": f"at least {TARGET_EVENTS_PER_SECOND:,} events per second on one core "
                  "(the measured stream, wall clock)",
        "target_events_per_second": TARGET_EVENTS_PER_SECOND,
        "met": rate >= TARGET_EVENTS_PER_SECOND and not problems,
        "sanity": problems or "ok",
    }


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--devices", type=int, default=100_000)
    result.add_argument("--history-hours", type=float, default=24.0)
    result.add_argument("--events", type=int, default=1_000_000,
                        help="events in the measured stream, after the history")
    result.add_argument("--events-per-device-day", type=float, default=10.0,
                        help="average over all devices, flaky ones included")
    result.add_argument("--bad-devices", type=float, default=0.01,
                        help="the share of flaky devices")
    result.add_argument("--seed", type=int, default=1)
    result.add_argument("--cpu", type=int, default=None,
                        help="the CPU to pin to (default: the first this process may use)")
    result.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    result.add_argument("--no-reachable", action="store_true",
                        help="skip counting the bytes reachable from the engine")
    result.add_argument("--tracemalloc", action="store_true",
                        help="add a separate pass measuring tracemalloc's current and peak")
    result.add_argument("--output", nargs="?", type=Path, const=common.RESULTS / f"{NAME}.json",
                        default=None, help="also write the JSON here (default when given "
                        "without a path: benchmarks/results/fault_engine.json)")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.devices < 1 or args.events < 1:
        raise SystemExit("--devices and --events must be at least 1")
    common.exit_cleanly_on_sigterm()
    result = run(args, argv)
    text = json.dumps(result, indent=1)
    if result["sanity"] != "ok":
        print(text, file=sys.stderr)
        for problem in result["sanity"]:
            _log(f"BROKEN ENGINE: {problem}")
        _log("nothing written: the engine escalated nothing it should have")
        return 1
    print(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
        _log(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
