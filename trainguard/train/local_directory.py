"""The state in a checkpoint directory, written by the training processes themselves: how a
:class:`~trainguard.train.Session` script runs under plain ``python`` or ``torchrun``.

Same on-disk format as under ``trainguard run`` (:mod:`trainguard.ipc.checkpoint_layout`,
``docs/checkpoint-format.md``), so either can resume from the other's checkpoints. Every
``every``-th step to resume at is saved: each rank writes its own shard (a committed snapshot,
checksummed, ``fsync``-ed, renamed into place) into a ``.partial-`` directory that rank 0 names;
once every rank has reported its shard (a gather over ``torch.distributed``, which is the
barrier: :mod:`.collectives`), rank 0 writes the manifest and publishes the directory under its
final name, then keeps the newest ``keep``. A checkpoint that cannot be written is skipped with
a warning, and training goes on. A restore loads the newest complete checkpoint that verifies,
for this world size; every rank reads the same directory and so picks the same step.

Settings come from the environment of ``trainguard run``'s own options where one exists:
``TRAINGUARD_CHECKPOINT_DIR``, ``TRAINGUARD_KEEP_CHECKPOINTS``, and
``TRAINGUARD_CHECKPOINT_EVERY`` for this mode only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trainguard import clock as clocks
from trainguard.ipc import checkpoint_layout, snapshot_layout
from trainguard.train import collectives, replica_shares, snapshot, state_backend

__all__ = ["LocalDirectoryBackend", "LocalDirectorySettings"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LocalDirectorySettings:
    directory: Path = Path("checkpoints")
    """Where checkpoints go (``TRAINGUARD_CHECKPOINT_DIR``); relative to the working directory.
    Default ``./checkpoints``: beside the script's own outputs, where a user looks first."""
    every: int = 100
    """Save when the step to resume at is a multiple of this (>= 1;
    ``TRAINGUARD_CHECKPOINT_EVERY``). 100: a few seconds of work lost at typical step times, a
    disk write rare enough not to matter."""
    keep: int = 3
    """Complete checkpoints kept (>= 1; ``TRAINGUARD_KEEP_CHECKPOINTS``), as
    ``trainguard run --keep-checkpoints``."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 step, got {self.every}")
        if self.keep < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep}")

    @classmethod
    def from_env(cls, *, every: int | None = None, directory: str | Path | None = None,
                 environ: Mapping[str, str] = os.environ) -> LocalDirectorySettings:
        """The script's values (``every``, ``directory``) over the defaults, and the
        environment's over both, as an option's variable is over its default.

        Raises:
            StateError: a variable or value that breaks its rule, named.
        """
        values: dict[str, Any] = {}
        if directory is not None:
            values["directory"] = Path(directory)
        if every is not None:
            values["every"] = every
        if environ.get("TRAINGUARD_CHECKPOINT_DIR"):
            values["directory"] = Path(environ["TRAINGUARD_CHECKPOINT_DIR"])
        for field, variable in (("every", "TRAINGUARD_CHECKPOINT_EVERY"),
                                ("keep", "TRAINGUARD_KEEP_CHECKPOINTS")):
            text = environ.get(variable, "").strip()
            if text:
                try:
                    values[field] = int(text)
                except ValueError:
                    raise state_backend.StateError(
                        f"{variable}={text!r} is not a whole number") from None
        try:
            return cls(**values)
        except ValueError as error:
            raise state_backend.StateError(str(error)) from None


class _NotWrittenError(Exception):
    """A rank could not write its part of a checkpoint."""


class LocalDirectoryBackend:
    def __init__(self, settings: LocalDirectorySettings, *, rank: int, world_size: int) -> None:
        """Check that this rank can write into the directory (creating it).

        Raises:
            StateError: the directory cannot be written, named with the system's reason.
        """
        self.settings = settings
        self._directory = checkpoint_layout.CheckpointDirectory(settings.directory)
        self._rank = rank
        self._world_size = world_size
        try:
            self._directory.ensure_writable()
        except checkpoint_layout.CheckpointError as error:
            raise state_backend.StateError(
                f"{error} (set TRAINGUARD_CHECKPOINT_DIR to a writable directory)") from error

    def due(self, step: int) -> bool:
        return step % self.settings.every == 0

    def flush(self) -> None:
        """Every save is complete when it returns: a checkpoint on disk is a collective."""

    def slow_save_expected(self) -> bool:
        """A write to disk always is (without an agent, nobody is told)."""
        return True

    def save(self, tree: dict[str, Any], *, step: int, generation: int, started: float,
             optimizers: Sequence[torch.optim.Optimizer] = (), whole: bool = False) -> float:
        """Write this rank's shard; rank 0 then completes the checkpoint (a collective call:
        every rank saves the same step).

        Raises:
            StateError: several ranks but no process group to agree through.
        """
        if self._world_size > 1 and not collectives.grouped():
            raise state_backend.StateError(
                f"checkpoint() with WORLD_SIZE={self._world_size} outside trainguard run needs "
                "torch.distributed initialised (init_process_group), so that rank 0 completes "
                "the checkpoint once every rank has written its part")
        prepared = snapshot.prepare(tree)
        partial, problem = "", ""
        if self._rank == 0:
            try:
                target = self._directory.partial_dir(step)
                target.mkdir(mode=0o700)
                partial = str(target)
            except OSError as error:
                problem = f"cannot create a directory in {self._directory.root}: {error}"
        partial = collectives.from_rank0(partial)
        written: checkpoint_layout.ShardRecord | str = problem  # rank 0's, or none
        if partial:
            try:
                written = self._write_shard(Path(partial), prepared, step=step,
                                            generation=generation)
            except OSError as error:
                written = f"rank {self._rank}: {error}"
        reports = collectives.to_rank0(written)
        if reports is not None:
            self._complete(Path(partial) if partial else None, step, reports)
        return time.perf_counter() - started

    def _write_shard(self, partial: Path, prepared: snapshot.Prepared, *, step: int,
                     generation: int) -> checkpoint_layout.ShardRecord:
        """This rank's committed, checksummed snapshot, durable under its final name."""
        name = checkpoint_layout.shard_name(self._rank)
        temporary = partial / (name + ".tmp")
        descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(descriptor, prepared.nbytes)
            mapped = snapshot.MappedSlot(str(temporary))
            try:
                seq = mapped.write(prepared, step=step, generation=generation, rank=self._rank,
                                   world_size=self._world_size)
                header = snapshot_layout.SnapshotHeader.unpack(mapped.memory)
                checksum = snapshot_layout.compute_checksum(mapped.memory, header)
                snapshot_layout.write_checksum(mapped.memory, checksum, seq)
                mapped.memory.flush()
            finally:
                mapped.close()
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        temporary.rename(partial / name)
        return checkpoint_layout.ShardRecord(self._rank, name, prepared.nbytes, checksum)

    def _complete(self, partial: Path | None, step: int,
                  reports: list[checkpoint_layout.ShardRecord | str]) -> None:
        """Rank 0, once every rank has written: manifest, publish, retention."""
        problems = [report for report in reports if isinstance(report, str) and report]
        records = [report for report in reports if not isinstance(report, str)]
        try:
            if partial is None or problems:
                raise _NotWrittenError("; ".join(problems))
            checkpoint_layout.sync_directory(partial)
            manifest = checkpoint_layout.Manifest(
                step=step, world_size=self._world_size, created=clocks.iso_utc(time.time()),
                shards=tuple(sorted(records, key=lambda record: record.rank)))
            self._directory.commit_manifest(partial, manifest)
            self._directory.publish(partial, step)
        except (_NotWrittenError, OSError) as error:
            if partial is not None:
                shutil.rmtree(partial, ignore_errors=True)
            logger.warning("checkpoint of step %d not written: %s", step, error)
            return
        self._directory.retain(self.settings.keep)

    def load(self) -> state_backend.Loaded:
        skipped = []
        for _, path in self._directory.step_dirs():
            try:
                manifest = self._directory.check(path, world_size=self._world_size)
                shard = next(s for s in manifest.shards if s.rank == self._rank)
                absent: list[snapshot.Absent] = []
                header, tree = snapshot.read_snapshot(str(path / shard.file), absent=absent)
                replica_shares.fill_from_files(  # written as shares: see replica_shares
                    absent, {s.rank: str(path / s.file) for s in manifest.shards})
            except (checkpoint_layout.CheckpointError, snapshot.SnapshotError) as error:
                skipped.append(f"{path} skipped ({error})")
                continue
            return state_backend.Loaded("disk", header.step, tree, "; ".join(skipped))
        return state_backend.Loaded("none", 0, None, "; ".join(skipped))

    def close(self) -> None:
        """Nothing is held between checkpoints."""

