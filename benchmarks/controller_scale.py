"""Controller-scale benchmark: simulated hosts x 16 devices report their devices every 5 s (the
original's refresh) to one ``trainguard controller`` with etcd behind it.

The controller runs pinned to one core (CPU 0); etcd (one member on loopback) and this process,
which plays every host over a few gRPC channels, share the other. Each host reports at its own
offset within the period, so the reports arrive evenly. Once a second one host's report brings a
new fault code on one of its devices (a memory error, graded at once), and its next report
clears it. Measured over ``--seconds`` after a warm-up period:

- reports per second the controller answered (against the offered hosts / 5 s);
- the controller's CPU, in cores (its user + system time over the window);
- bytes per second etcd received from its clients (etcd's own counter; the controller is its
  only client);
- the time from sending a report to its answer: p50 / p99 of every report, and of the reports
  that brought a fault (the answer carries the graded level: the decision).

    python -m benchmarks.controller_scale --hosts 1000,10000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import psutil

from benchmarks import common
from trainguard.proto import control_pb2 as pb
from trainguard.proto import grpc_channel
from trainguard.testing import etcd_cluster

PERIOD = 5.0
DEVICES = 16
CHANNELS = 8
FAULT_CODE = "80E01801"
TARGET_P99 = 0.100


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _etcd_received(endpoint: str) -> float:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("etcd_network_client_grpc_received_bytes_total"):
                return float(line.split()[-1])
    return 0.0


def _report(node: str, fault_on: int | None) -> pb.DeviceReport:
    report = pb.DeviceReport(node=node)
    for device in range(DEVICES):
        report.devices.add(device=device, codes=[FAULT_CODE] if device == fault_on else [])
    return report


async def _load(address: str, hosts: int, *, seconds: float, rng: random.Random
                ) -> dict[str, Any]:
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    calls = [channel.unary_unary(grpc_channel.REPORT_DEVICES,
                                 request_serializer=pb.DeviceReport.SerializeToString,
                                 response_deserializer=pb.DeviceReportAck.FromString)
             for channel in channels]
    names = [f"bench-host-{index}" for index in range(hosts)]
    faulty: dict[int, int] = {}  # host -> device holding a fault code now
    latencies: list[float] = []
    fault_latencies: list[float] = []
    errors = 0
    pending: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()
    start = loop.time()
    warm_until = start + PERIOD
    end = warm_until + seconds
    counted = 0

    async def send(index: int, fault: bool) -> None:
        nonlocal errors, counted
        report = _report(names[index], faulty.get(index))
        sent = loop.time()
        try:
            await calls[index % CHANNELS](report, timeout=30)
        except grpc.aio.AioRpcError:
            errors += 1
            return
        took = loop.time() - sent
        if sent >= warm_until and loop.time() <= end:
            counted += 1
            latencies.append(took)
            if fault:
                fault_latencies.append(took)

    due = 0
    next_fault = warm_until
    while (now := loop.time()) < end:
        should = int((now - start) / PERIOD * hosts)
        while due < should:
            index = due % hosts
            fault = False
            if index in faulty:
                del faulty[index]  # its fault clears with this report
            elif now >= next_fault:
                faulty[index] = rng.randrange(DEVICES)
                fault, next_fault = True, next_fault + 1.0
            task = asyncio.create_task(send(index, fault))
            pending.add(task)
            task.add_done_callback(pending.discard)
            due += 1
        await asyncio.sleep(0.005)
    lag = (loop.time() - start) / PERIOD * hosts - due
    await asyncio.gather(*pending, return_exceptions=True)
    for channel in channels:
        await channel.close()
    return {"answered": counted, "errors": errors, "latencies": latencies,
            "fault_latencies": fault_latencies, "unsent_at_end": max(0, int(lag))}


def measure(hosts: int, *, seconds: float, root: Path, rng: random.Random) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"hosts-{hosts}-", dir=root))
    with etcd_cluster.EtcdCluster(workdir / "etcd") as etcd:
        port = etcd_cluster.free_ports(1)[0]
        controller = common.ProcessGroup(
            ["taskset", "-c", "0", sys.executable, "-m", "trainguard", "controller", "--listen",
             f"127.0.0.1:{port}", "--insecure", "--run-root", str(workdir / "controller"),
             "--store", etcd.url("scale")], log=workdir / "controller.log")
        try:
            common.wait_until("the controller", lambda: "listening on" in
                              controller.log.read_text(errors="replace"), timeout=60,
                              process=controller.process)
            for member in etcd.members:
                assert member.process is not None
                psutil.Process(member.process.pid).cpu_affinity([1])
            process = psutil.Process(controller.process.pid)
            endpoint = etcd.members[0].endpoint

            async def run() -> tuple[dict[str, Any], float, float, float]:
                loop = asyncio.get_running_loop()
                measuring = loop.create_task(_load(f"127.0.0.1:{port}", hosts, seconds=seconds,
                                                   rng=rng))
                await asyncio.sleep(PERIOD)  # the warm-up period
                cpu = sum(process.cpu_times()[:2])
                received = _etcd_received(endpoint)
                began = time.monotonic()
                await asyncio.sleep(seconds)
                window = time.monotonic() - began
                used = sum(process.cpu_times()[:2]) - cpu
                written = _etcd_received(endpoint) - received
                return await measuring, used / window, written / window, window

            psutil.Process().cpu_affinity([1])
            load, cores, etcd_bytes, window = asyncio.run(run())
        finally:
            controller.stop()
    latencies, faults = load["latencies"], load["fault_latencies"]
    p99_fault = _percentile(faults, 0.99)
    return {"hosts": hosts, "devices_per_host": DEVICES, "seconds": window,
            "offered_reports_per_second": hosts / PERIOD,
            "reports_per_second": load["answered"] / window, "errors": load["errors"],
            "unsent_at_end": load["unsent_at_end"], "controller_cores": cores,
            "etcd_bytes_per_second": etcd_bytes,
            "p50_seconds": _percentile(latencies, 0.5), "p99_seconds": _percentile(latencies, 0.99),
            "fault_reports": len(faults), "fault_p50_seconds": _percentile(faults, 0.5),
            "fault_p99_seconds": p99_fault,
            "met": None if p99_fault is None else bool(
                p99_fault <= TARGET_P99 and cores <= 1.0
                and load["answered"] / window >= 0.95 * hosts / PERIOD)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1000,10000",
                        help="comma-separated numbers of simulated hosts, one run each")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    rng = random.Random(args.seed)
    runs = []
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-") as root:
        for hosts in (int(part) for part in args.hosts.split(",")):
            result = measure(hosts, seconds=args.seconds, root=Path(root), rng=rng)
            runs.append(result)
            print(result, flush=True)
    common.write_result("controller-scale", {
        "runs": runs, "target": f"every report answered, p99 fault report -> decision under "
        f"{TARGET_P99 * 1000:.0f} ms, controller on one core",
        "setup": "simulated hosts x 16 devices, a report every 5 s each over 8 gRPC channels "
                 "(plain text, loopback); one fault a second; the controller pinned to CPU 0, "
                 "etcd 3.4 (one member) and the simulated hosts on CPU 1"}, args.output)


if __name__ == "__main__":
    main()
