"""GPU check: the CUDA paths that a CPU cannot run, on one machine with a GPU, in minutes.

1. snapshot stall against a raw copy: a state of ``--state-mb`` on the device, copied by
   trainguard's snapshot into a slot in ``/dev/shm`` (page-locked with cudaHostRegister, and
   pageable for comparison) and by a raw asynchronous copy into a pinned buffer (the bound);
   then restored onto its device and compared bit for bit;
2. NCCL: a one-rank NCCL group aborted and left as trainguard leaves a generation, then a new
   group formed; and whether two ranks can share the GPU under NCCL (NCCL refuses two ranks on
   one device on many versions: then the job below runs over gloo with CUDA tensors, and the
   NCCL part is the one-rank check: "1 rank + gloo");
3. kill -9 of one of two ranks under ``trainguard run`` (``Session.run``, a snapshot every step):
   seconds until every rank steps again, steps lost, whether the surviving process was kept.

Prints one JSON object and writes it to ``--output``; exits 0 when every check passed, 1 when
one failed, 2 when there is no GPU (unless ``--device cpu``, which runs every check that
applies on CPU with gloo, to check this script where there is no GPU).

    benchmarks/gpu_check.sh                       # picks the python, then runs this
    python -m benchmarks.gpu_check --device cpu --state-mb 4 --steps 60 --width 32
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from benchmarks import common
from trainguard.train import collectives, process_group, snapshot

_PROBE_TIMEOUT = 60.0


def _environment(device: str) -> dict[str, Any]:
    found: dict[str, Any] = {"torch": torch.__version__, "python": sys.executable,
                             "device": device}
    if device == "cuda":
        found.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
                     gpus=torch.cuda.device_count(),
                     nccl=".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
                     if dist.is_nccl_available() else None)
    return found


def _state(megabytes: int, device: torch.device) -> dict[str, Any]:
    """Parameters and two Adam-like moments, float32, ``megabytes`` in all, in 16 tensors."""
    per_tensor = max(1, megabytes * 2**20 // 4 // 16)
    generator = torch.Generator().manual_seed(0)
    return {"tensors": [torch.randn(per_tensor, generator=generator).to(device)
                        for _ in range(16)], "step": 1}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(action: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Seconds per call, the first (warm-up: it also registers a slot) included first; work
    queued before is finished first."""
    seconds = []
    for _ in range(repeats + 1):
        _synchronize(device)
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def _slot_path(nbytes: int, name: str) -> Path:
    directory = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    path = directory / f"trainguard-gpu-check-{os.getpid()}-{name}"
    with path.open("wb") as stream:
        stream.truncate(nbytes)
    return path


def snapshot_stall(megabytes: int, device: torch.device, repeats: int) -> dict[str, Any]:
    tree = _state(megabytes, device)
    prepared = snapshot.prepare(tree)
    nbytes = sum(t.numel() * t.element_size() for t in tree["tensors"])
    pinned = device.type == "cuda"
    bound = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    bound.fill_(0)

    def raw_copy() -> None:
        offset = 0
        for tensor in tree["tensors"]:
            size = tensor.numel() * tensor.element_size()
            bound[offset : offset + size].view(tensor.dtype).copy_(tensor, non_blocking=pinned)
            offset += size
        _synchronize(device)

    result: dict[str, Any] = {"state_bytes": nbytes,
                              "raw_copy_seconds": statistics.median(
                                  _timed(raw_copy, device, repeats)[1:])}
    for registered in (True, False):
        path = _slot_path(prepared.nbytes, f"slot-{registered}")
        slot = snapshot.MappedSlot(str(path), register_with_cuda=registered)
        try:
            def write(slot: snapshot.MappedSlot = slot) -> None:
                slot.write(prepared, step=1, generation=0, rank=0, world_size=1)

            seconds = _timed(write, device, repeats)
            locked = slot.page_locked
        finally:
            slot.close()
        key = "snapshot_seconds" if registered else "snapshot_pageable_seconds"
        result[key] = statistics.median(seconds[1:])
        if registered:
            result["first_snapshot_seconds"] = seconds[0]  # with cudaHostRegister
            result["slot_page_locked"] = locked
            started = time.perf_counter()
            _, restored = snapshot.read_snapshot(str(path))
            _synchronize(device)
            result["restore_seconds"] = time.perf_counter() - started
            result["restored_on"] = sorted({str(t.device) for t in restored["tensors"]})
            result["restored_bitwise"] = all(
                torch.equal(a, b) for a, b in zip(restored["tensors"], tree["tensors"],
                                                   strict=True))
        path.unlink()
    result["snapshot_over_raw_copy"] = result["snapshot_seconds"] / result["raw_copy_seconds"]
    result["gigabytes_per_second"] = nbytes / result["snapshot_seconds"] / 1e9
    result["ok"] = (result["restored_bitwise"]
                    and result["restored_on"] == [str(tree["tensors"][0].device)])
    return result


def _probe(kind: str, rank: int, directory: Path) -> None:
    """Run in a child process: ``abort`` (one rank) or ``pair`` (two ranks on GPU 0)."""
    world = 1 if kind == "abort" else 2
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{directory / 'store-0'}", rank=rank,
                            world_size=world)
    value = torch.ones(1, device="cuda")
    dist.all_reduce(value)
    if kind == "pair":
        print(json.dumps({"sum": value.item(), "ok": value.item() == 2.0}), flush=True)
        os._exit(0)  # no teardown of the group: what is measured is that it formed
    # trainguard's own collectives (checkpoints without an agent, the replicas' comparison)
    # over a group that carries only CUDA tensors.
    objects = [collectives.from_rank0(("from rank 0", 1)), collectives.to_rank0(("to rank 0", 2))]
    objects_ok = objects == [("from rank 0", 1), [("to rank 0", 2)]]
    started = time.perf_counter()
    aborted = process_group.abort_nccl()
    groups = process_group.drop()
    left = time.perf_counter() - started
    # the next generation: a new group, as Session.run forms one
    dist.init_process_group("nccl", init_method=f"file://{directory / 'store-1'}", rank=0,
                            world_size=1)
    again = torch.full((1,), 2.0, device="cuda")
    dist.all_reduce(again)
    print(json.dumps({"aborted": aborted, "left_groups": len(groups), "leave_seconds": left,
                      "next_generation_sum": again.item(), "objects_over_nccl": objects_ok,
                      "ok": aborted == 1 and again.item() == 2.0 and objects_ok}), flush=True)
    os._exit(0)  # the left groups are abandoned: no destructor of theirs runs


def _run_probe(kind: str) -> dict[str, Any]:
    """Every rank of the probe as a child; their last JSON lines, or why there are none."""
    with tempfile.TemporaryDirectory(prefix="trainguard-gpu-probe-") as scratch:
        ranks = range(1 if kind == "abort" else 2)
        children = [subprocess.Popen(
            [sys.executable, "-m", "benchmarks.gpu_check", "--probe", kind, "--probe-rank",
             str(rank), "--probe-dir", scratch], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True) for rank in ranks]
        outputs, codes = [], []
        deadline = time.monotonic() + _PROBE_TIMEOUT
        for child in children:
            try:
                output, _ = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                output, _ = child.communicate()
            outputs.append(output.decode(errors="replace"))
            codes.append(child.returncode)
    if all(code == 0 for code in codes):
        found: dict[str, Any] = json.loads(outputs[0].strip().splitlines()[-1])
        return found
    return {"ok": False, "exit_codes": codes, "output_tail": outputs[0][-1500:]}


def recovery(*, device: str, backend: str, steps: int, width: int, kill_at: int,
             workdir: Path) -> dict[str, Any]:
    command = _job_command(ranks=2, workdir=workdir, name="gpu-check", device=device,
                           backend=backend, steps=steps, width=width, extra=[])
    timeline = common.TimelineReader(workdir)
    with common.ProcessGroup(command, log=workdir / "launcher.log",
                             env={"BENCH_TIMELINE_DIR": str(workdir)}) as group:
        mark = common.wait_until(
            f"rank 1 at step {kill_at}",
            lambda: next((m for m in timeline.read() if m["event"] == "begin"
                          and m["rank"] == 1 and m["step"] >= kill_at), None),
            timeout=240, process=group.process)
        fault = time.monotonic()
        os.kill(mark["pid"], signal.SIGKILL)
        attempt = mark["attempt"]

        def every_rank_stepping() -> float | None:
            firsts: dict[int, float] = {}
            for item in timeline.read():
                if item["event"] == "begin" and item["attempt"] > attempt:
                    firsts.setdefault(item["rank"], item["mono"])
            return max(firsts.values()) if len(firsts) == 2 else None

        back = common.wait_until("every rank stepping again", every_rank_stepping,
                                 timeout=240, process=group.process)
        code = group.process.wait(300)
    marks = timeline.read()
    done = max(m["step"] for m in marks if m["event"] == "end" and m["attempt"] <= attempt)
    resumed = min(m["step"] for m in marks if m["event"] == "begin" and m["attempt"] > attempt)
    pids = {(m["rank"], m["attempt"] > attempt): m["pid"] for m in marks}
    stalls = [m["seconds"] for m in marks if m["event"] == "snapshot" and m["seconds"]]
    sources = sorted({m["source"] for m in marks
                      if m["event"] == "restored" and m["attempt"] > attempt})
    result = {"backend": backend, "recover_seconds": back - fault,
              "steps_lost": max(0, done + 1 - resumed), "resumed_at": resumed,
              "survivor_kept": pids[(0, False)] == pids[(0, True)],
              "restored_from": sources, "median_snapshot_seconds": common.median(stalls),
              "job_exit_code": code}
    result["ok"] = code == 0 and result["steps_lost"] == 0 and result["survivor_kept"]
    return result


def _job_command(*, ranks: int, workdir: Path, name: str, device: str, backend: str,
                 steps: int, width: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "trainguard", "run", "--nproc-per-node", str(ranks),
            "--max-restarts", "3", "--run-root", str(workdir / "runs"), "--rdzv-id", name,
            "--persist-interval", "1000", *extra, str(common.JOBS / "gpu_job.py"), "--steps",
            str(steps), "--width", str(width), "--device", device, "--backend", backend]


def injected_faults(*, device: str, backend: str, steps: int, width: int,
                    workdir: Path) -> dict[str, Any]:
    """One rank under ``Session.run`` on the job's own backend (one rank of NCCL needs no
    second GPU): an uncorrectable memory error, which is retried in place (the same process
    leaves its generation, so its NCCL communicator is aborted and a new group formed), then a
    crash, which restarts the process; each restored from memory onto the device."""
    workdir.mkdir(parents=True, exist_ok=True)
    faults = {"memory-error": steps // 4, "crash": steps // 2}
    inject = ",".join(f"{kind}:0:{step}" for kind, step in faults.items())
    command = _job_command(ranks=1, workdir=workdir, name="gpu-check-faults", device=device,
                           backend=backend, steps=steps, width=width,
                           extra=["--inject", inject])
    with common.ProcessGroup(command, log=workdir / "launcher.log",
                             env={"BENCH_TIMELINE_DIR": str(workdir)}) as group:
        try:
            code = group.process.wait(300)
        except subprocess.TimeoutExpired:
            code = None
    marks = common.TimelineReader(workdir).read()
    found = []
    for (kind, step), attempt in zip(faults.items(), (1, 2), strict=True):
        before = [m for m in marks if m["attempt"] == attempt - 1]
        after = [m for m in marks if m["attempt"] == attempt]
        begins = [m for m in after if m["event"] == "begin"]
        if not begins:
            found.append({"kind": kind, "at_step": step, "recovered": False})
            continue
        done = max(m["step"] for m in marks
                   if m["event"] == "end" and m["attempt"] < attempt)
        faulted = max((m for m in before if m["event"] == "begin"), key=lambda m: m["mono"])
        found.append({
            "kind": kind, "at_step": step, "recovered": True,
            "steps_lost": max(0, done + 1 - begins[0]["step"]),
            "seconds": begins[0]["mono"] - faulted["mono"],
            "process_kept": begins[0]["pid"] == faulted["pid"],
            "restored_from": [m["source"] for m in after if m["event"] == "restored"]})
    result: dict[str, Any] = {"backend": backend, "faults": found, "job_exit_code": code}
    memory_error, crash = found
    result["ok"] = (code == 0 and all(f["recovered"] and f["steps_lost"] == 0
                                      and f["restored_from"] == ["memory"] for f in found)
                    and memory_error["process_kept"] and not crash["process_kept"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--state-mb", type=int, default=2048,
                        help="megabytes of state for the stall measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="steps of the recovery job")
    parser.add_argument("--width", type=int, default=1024, help="the recovery job's MLP width")
    parser.add_argument("--output", type=Path, default=common.RESULTS / "gpu-check.json")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="run the recovery job in DIR and keep it (its logs and timeline), "
                             "instead of a temporary folder removed afterwards")
    parser.add_argument("--probe", choices=("abort", "pair"), help=argparse.SUPPRESS)
    parser.add_argument("--probe-rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--probe-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        _probe(args.probe, args.probe_rank, args.probe_dir)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no GPU: torch {torch.__version__} (CUDA build: "
              f"{torch.version.cuda or 'none'}) sees no CUDA device. Run it on a machine "
              "with a GPU, or pass --device cpu to check the CPU path of this script.",
              file=sys.stderr)
        return 2
    common.exit_cleanly_on_sigterm()
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    result: dict[str, Any] = {"check": "gpu", "when": common.recorded_at(),
                              "environment": _environment(args.device),
                              "machine": common.machine()}
    result["snapshot"] = snapshot_stall(args.state_mb, device, args.repeats)
    backend = "gloo"
    if args.device == "cuda":
        result["nccl_abort"] = _run_probe("abort")
        result["nccl_two_ranks_one_gpu"] = _run_probe("pair")
        backend = "nccl" if result["nccl_two_ranks_one_gpu"]["ok"] else "gloo"
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(str(args.keep)) if args.keep
          else tempfile.TemporaryDirectory(prefix="trainguard-gpu-check-")) as scratch:
        result["recovery"] = recovery(device=args.device, backend=backend, steps=args.steps,
                                      width=args.width, kill_at=args.steps // 4,
                                      workdir=Path(scratch))
        result["injected_faults"] = injected_faults(
            device=args.device, backend="nccl" if args.device == "cuda" else "gloo",
            steps=args.steps, width=args.width, workdir=Path(scratch) / "faults")
    checks = [result["snapshot"]["ok"], result["recovery"]["ok"],
              result["injected_faults"]["ok"]]
    if "nccl_abort" in result:
        checks.append(result["nccl_abort"]["ok"])
    result["ok"] = all(checks)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
