"""Marks a benchmark job writes: one JSON line per event, per rank, with both clocks.

Written by the job itself so that torchrun and trainguard are measured the same way.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Timeline:
    def __init__(self) -> None:
        directory = Path(os.environ["BENCH_TIMELINE_DIR"])
        self.rank = int(os.environ["RANK"])
        self._stream = (directory / f"timeline-{self.rank}.jsonl").open("a")

    @property
    def attempt(self) -> int:
        """The restart count, read at each mark: a process that survives a recovery gets a
        new one in its environment (trainguard's Session.run sets it)."""
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    def mark(self, event: str, step: int | None = None, **extra: object) -> None:
        record = {"event": event, "rank": self.rank, "attempt": self.attempt, "pid": os.getpid(),
                  "step": step, "mono": time.monotonic(), "wall": time.time(), **extra}
        self._stream.write(json.dumps(record) + "\n")
        self._stream.flush()
