"""Lightweight profiling records of one rank (SPEC D10), in the files and the format of the
original's training agent (its MSPTI monitor), so that what reads those reads these.

Files: ``<root>/<task id>/<global rank>/<unix seconds>``, one JSON object a line, written out
every :data:`FLUSH_SECONDS` (and when the rank closes its session); a new file once the current
one passes :data:`FILE_LIMIT` bytes. When the task's folder passes ``disk_limit`` bytes, the
oldest fifth of this rank's files go, :data:`KEEP_FILES` kept at least; nothing that is not
named by a number is touched.

A mark's two records are :mod:`trainguard.job.profiling_records`'. Its names: ``step 17``,
``forward``, ``dataloader``, ``save_checkpoint`` in the ``default`` domain; a communication
operator in the ``communication`` domain, its name a JSON string of the operator's fields.
trainguard's marks are taken on the host; the original takes step and forward marks on the
device too, which needs the device's own tracing (MSPTI, CUPTI) and is not done here.

Steps and snapshots are marked by the session itself; forward passes, data-loader fetches and
all-reduces where the script hands them over (:meth:`ProfilingRecorder.watch_forward`,
:meth:`~ProfilingRecorder.loader`, :meth:`~ProfilingRecorder.watch_communication`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from trainguard.job import profiling_records, profiling_switch

__all__ = ["DISK_LIMIT", "FILE_LIMIT", "FLUSH_SECONDS", "KEEP_FILES", "ProfilingRecorder",
           "task_id"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

FLUSH_SECONDS = 5.0
FILE_LIMIT = 10 * 1024 * 1024
DISK_LIMIT = 5000 * 1024 * 1024
"""The original's default for the whole profiling folder (5000 MB)."""
KEEP_FILES = 3



def task_id(env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The task's folder: ``MINDX_TASK_ID`` (the agent sets it to the job's id unless the job
    has its own), else ``default_task_id_<unix seconds>`` as the original names it."""
    return env.get("MINDX_TASK_ID") or f"default_task_id_{int(time.time())}"


class ProfilingRecorder:
    """One rank's marks, switched on and off while it trains (:attr:`switch`)."""

    def __init__(self, root: Path, *, task: str, rank: int,
                 switch: profiling_switch.ProfilingSwitch | None = None,
                 disk_limit: int = DISK_LIMIT,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.switch = switch or profiling_switch.ProfilingSwitch()
        self._task_dir = root / task
        self._dir = self._task_dir / str(rank)
        self._disk_limit = disk_limit
        self._now_ns = clock_ns
        self._lines: list[str] = []
        self._lock = threading.Lock()  # communication marks end on gloo's thread
        self._next_id = 1
        self._file: Path | None = None
        self._file_bytes = 0
        self._flushed_at = time.monotonic()
        self._pid = os.getpid()

    @classmethod
    def from_env(cls, *, rank: int) -> ProfilingRecorder:
        """Where the agent says (``TRAINGUARD_PROFILING_DIR``; without one, ``./profiling``),
        with the marks ``TRAINGUARD_PROFILING`` switches on (a preset's name or the original's
        JSON; default off).

        Raises:
            profiling_switch.SwitchError: ``TRAINGUARD_PROFILING`` cannot be read.
        """
        setting = os.environ.get("TRAINGUARD_PROFILING", "").strip()
        switch = profiling_switch.ProfilingSwitch.parse(setting) if setting else None
        root = Path(os.environ.get("TRAINGUARD_PROFILING_DIR") or "profiling")
        return cls(root, task=task_id(), rank=rank, switch=switch)

    @contextlib.contextmanager
    def mark(self, name: str, *, domain: str = "default") -> Iterator[None]:
        """Record the time the block takes (call only where the switch has the mark on)."""
        mark_id = self.start(name, domain=domain)
        try:
            yield
        finally:
            self.end(mark_id)

    def start(self, name: str, *, domain: str = "default") -> int:
        with self._lock:
            mark_id = self._next_id
            self._next_id += 1
            self._add(profiling_records.START, mark_id, name, domain)
        return mark_id

    def end(self, mark_id: int) -> None:
        with self._lock:
            self._add(profiling_records.END, mark_id, "", "")
            if time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
                self._flush()

    def watch_forward(self, module: torch.nn.Module) -> None:
        """Mark each forward pass of ``module`` (``forward``) while FP is switched on."""
        pending: list[int] = []

        def before(_module: torch.nn.Module, _inputs: Any) -> None:
            pending.append(self.start("forward") if self.switch.fp else 0)

        def after(_module: torch.nn.Module, _inputs: Any, _output: Any) -> None:
            if pending and (mark := pending.pop()):
                self.end(mark)

        module.register_forward_pre_hook(before)
        module.register_forward_hook(after, always_call=True)

    def loader(self, batches: Iterable[T]) -> Iterator[T]:
        """``batches``, each fetched under a ``dataloader`` mark while DataLoader is on."""
        iterator = iter(batches)
        while True:
            mark = self.start("dataloader") if self.switch.dataloader else 0
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                if mark:
                    self.end(mark)
            yield batch

    def watch_communication(self, model: DistributedDataParallel) -> None:
        """Mark each gradient all-reduce of ``model`` (``communication`` domain) while
        CommunicationOperator is switched on: it registers torch's default all-reduce as the
        model's communication hook, with the mark around it (not for a model with a hook of
        its own)."""
        group = model.process_group

        def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            if not self.switch.communication_operator:
                return default_hooks.allreduce_hook(state, bucket)
            buffer = bucket.buffer()
            mark = self.start(json.dumps({
                "streamId": "0", "count": str(buffer.numel()),
                "dataType": str(buffer.dtype).removeprefix("torch."), "opName": "allreduce",
                "groupName": str(getattr(group, "group_name", "default_group"))},
                separators=(",", ":")), domain="communication")
            reduced = default_hooks.allreduce_hook(state, bucket)

            def ended(done: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
                self.end(mark)
                return done.value()

            return reduced.then(ended)

        # DDP compares the hook's annotations with these classes; postponed (strings), they
        # would not match.
        hook.__annotations__.update({"bucket": dist.GradBucket,
                                     "return": torch.futures.Future[torch.Tensor]})
        model.register_comm_hook(group, hook)

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _add(self, flag: int, mark_id: int, name: str, domain: str) -> None:
        self._lines.append(profiling_records.marker(
            flag, mark_id, name, domain, timestamp=self._now_ns(), process=self._pid,
            thread=threading.get_native_id()))

    def _flush(self) -> None:
        self._flushed_at = time.monotonic()
        if not self._lines:
            return
        data = ("\n".join(self._lines) + "\n").encode()
        self._lines.clear()
        try:
            if self._file is None or self._file_bytes >= FILE_LIMIT:
                self._file = self._new_file()
                self._file_bytes = 0
            with self._file.open("ab") as out:
                out.write(data)
            self._file_bytes += len(data)
        except OSError as error:  # profiling must never stop training
            logger.warning("profiling records not written to %s: %s", self._dir, error)
            self._file = None

    def _new_file(self) -> Path:
        """A file named by the second it starts (the next free one), after making room."""
        self._dir.mkdir(parents=True, exist_ok=True)
        self._make_room()
        second = int(self._now_ns() // 1_000_000_000)
        while (self._dir / str(second)).exists():
            second += 1
        return self._dir / str(second)

    def _make_room(self) -> None:
        """Past the disk limit, the oldest fifth of this rank's numbered files go."""
        total = sum(path.stat().st_size for path in self._task_dir.rglob("*") if path.is_file())
        if total <= self._disk_limit:
            return
        numbered = profiling_records.files(self._dir)
        doomed = numbered[:min(max(len(numbered) // 5, 1), max(len(numbered) - KEEP_FILES, 0))]
        for path in doomed:
            path.unlink(missing_ok=True)
        if doomed:
            logger.warning("profiling folder %s passed %d MB: deleted this rank's %d oldest "
                           "file(s)", self._task_dir, self._disk_limit // (1024 * 1024),
                           len(doomed))
