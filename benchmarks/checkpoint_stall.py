"""Checkpoint stall: how long training is blocked to save its state, and to restore it.

For each model size (parameters with Adam state, one rank on CPU) under ``trainguard run``:
trainguard's snapshot into the agent's shared memory, copied at once (the optimizer's tensors
not left to the copy behind, which would hide the copy from this job); a raw copy of the same
bytes into memory reserved beforehand (the physical bound); torch.save to disk; torch.load;
trainguard's restore from memory (after a crash) and from disk (a new run, page cache dropped
when allowed). A restore has two parts: the agent choosing and verifying the state before
the workers start (plan_*_seconds; for disk it reads and checksums every shard) and the worker
loading it.

    python -m benchmarks.checkpoint_stall --sizes 100,500
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from benchmarks import common
from trainguard import testing


def _run(workdir: Path, size: int, repeats: int, out: Path, *, log: str) -> int:
    command = [sys.executable, "-m", "trainguard", "run", "--nproc-per-node", "1",
               "--max-restarts", "1", "--run-root", str(workdir / "runs"), "--rdzv-id", "stall",
               "--persist-interval", "1000000000", "--heartbeat-busy-timeout", "3600",
               str(common.JOBS / "stall_job.py"), "--params-millions", str(size),
               "--repeats", str(repeats), "--scratch", str(workdir), "--out", str(out)]
    # The whole copy, as the stall of a snapshot every step would be without the copy behind
    # (train/copy_behind.py): with it, the job's back-to-back snapshots wait for nothing.
    with common.ProcessGroup(command, log=workdir / log,
                             env={"TRAINGUARD_SNAPSHOT_COPY_BEHIND": "0"}) as group:
        return group.process.wait(3600)


def _plan_seconds(workdir: Path) -> dict[str, float]:
    """How long the agent took to choose and verify each generation's state, by source."""
    return {event.data["restore_source"]: event.data["plan_seconds"]
            for event in testing.recorded_events(workdir / "runs" / "stall", "generation-started")}


def _drop_page_cache() -> bool:
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    return False


def measure(size: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="trainguard-stall-") as scratch:
        workdir = Path(scratch)
        out = workdir / "results.jsonl"
        first = _run(workdir, size, repeats, out, log="run-1.log")
        cold = _drop_page_cache()
        second = _run(workdir, size, repeats, out, log="run-2.log")
        planned = _plan_seconds(workdir)
        phases = {}
        for line in out.read_text().splitlines():
            record = json.loads(line)
            phases[record.pop("phase")] = record
        if first != 0 or second != 0 or "restore-disk" not in phases:
            raise RuntimeError(f"size {size}M: runs exited {first} and {second}:\n"
                               + (workdir / "run-1.log").read_text()[-3000:])
    def median(phase: str) -> float | None:
        seconds = phases[phase]["seconds"]
        return common.median(seconds if isinstance(seconds, list) else [seconds])

    result = {
        "parameters": phases["state"]["parameters"], "state_bytes": phases["state"]["bytes"],
        "snapshot_seconds": median("snapshot"), "first_snapshot_seconds": median(
            "first-snapshot"),
        "raw_copy_seconds": median("raw-copy"), "torch_save_seconds": median("torch-save"),
        "torch_load_seconds": median("torch-load"),
        "restore_memory_seconds": median("restore-memory"),
        "restore_disk_seconds": median("restore-disk"), "disk_cache_dropped": cold,
        "plan_memory_seconds": planned.get("memory"), "plan_disk_seconds": planned.get("disk"),
        "raw": phases,
    }
    snapshot, raw, save = (result["snapshot_seconds"], result["raw_copy_seconds"],
                           result["torch_save_seconds"])
    if snapshot and raw and save:
        result["snapshot_over_raw_copy"] = snapshot / raw
        result["snapshot_over_torch_save"] = snapshot / save
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,500", help="millions of parameters")
    parser.add_argument("--repeats", type=int, default=5)
    common.add_output_argument(parser)
    args = parser.parse_args()
    common.exit_cleanly_on_sigterm()
    results = []
    for size in (int(text) for text in args.sizes.split(",")):
        # The state (parameters and two Adam moments, float32) lives in the job, in two slots of
        # 1.1 times its size, and once more while it is restored after the crash.
        needed = size * 1e6 * 4 * 3 * 3.6
        if needed > psutil.virtual_memory().available:
            print(f"skipping {size}M parameters: needs about {needed / 2**30:.0f} GiB",
                  flush=True)
            continue
        result = measure(size, args.repeats)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "raw"}), flush=True)
    common.write_result("checkpoint-stall", {"sizes": results}, args.output)


if __name__ == "__main__":
    main()
