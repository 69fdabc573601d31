"""Persisted checkpoints: one directory per step, complete only when its manifest says so.

Written by the agent's persister under ``trainguard run``, and by the training process itself
outside it (``trainguard.train.local_checkpoints``): both sides share this module, so the format
has one implementation.

Layout under the checkpoint directory::

    step-000000120/
        rank-00000.tgsnap     one rank's snapshot, byte for byte as in shared memory, with its
        rank-00001.tgsnap     checksum filled in (trainguard.ipc.snapshot_layout)
        manifest.json         written last, by atomic rename, after every shard is durable

manifest.json: ``{"format": "trainguard-checkpoint", "version": 1, "step", "world_size",
"created" (ISO-8601 UTC), "shards": [{"rank", "file", "nbytes", "xxh3_64" (16 hex digits),
"source" (only when another rank's snapshot stands in: its data-parallel replica)}]}``.
A job across hosts keeps one such directory per host, each listing only its own ranks' shards
(the ranks of ``world_size`` that host holds).
A checkpoint is written in ``step-000000120.partial-<nonce>/`` and renamed to its final name once
its manifest is durable, so a writer that dies leaves only a ``.partial-`` directory, which is
never loaded and is removed later. A step directory without a valid manifest is never loaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xxhash

from trainguard import owner_only
from trainguard.ipc import snapshot_layout

__all__ = [
    "MANIFEST_NAME",
    "CheckpointDirectory",
    "CheckpointError",
    "Manifest",
    "ShardRecord",
    "node_directory",
    "shard_name",
]

MANIFEST_NAME = "manifest.json"
_FORMAT = "trainguard-checkpoint"
_VERSION = 1
_READ_CHUNK = 8 << 20
_PARTIAL = ".partial-"


class CheckpointError(RuntimeError):
    """A checkpoint directory that cannot be used; the message says why."""


def shard_name(rank: int) -> str:
    return f"rank-{rank:05d}.tgsnap"


def step_dir_name(step: int) -> str:
    return f"step-{step:09d}"


def node_directory(root: Path, node: int) -> Path:
    """Where node ``node`` of a job across hosts keeps its ranks' part of every step, under the
    job's checkpoint directory ``root``: apart from the other nodes', even on a shared disk."""
    return root / f"node-{node}"


@dataclasses.dataclass(frozen=True)
class ShardRecord:
    rank: int
    file: str
    nbytes: int
    checksum: int
    source: int | None = None  # the replica whose snapshot this is, when not the rank's own

    @property
    def writer(self) -> int:
        """The rank that wrote the snapshot (its header says so)."""
        return self.rank if self.source is None else self.source


@dataclasses.dataclass(frozen=True)
class Manifest:
    step: int
    world_size: int
    created: str
    shards: tuple[ShardRecord, ...]

    def to_json(self) -> str:
        return json.dumps({
            "format": _FORMAT,
            "version": _VERSION,
            "step": self.step,
            "world_size": self.world_size,
            "created": self.created,
            "shards": [
                {"rank": shard.rank, "file": shard.file, "nbytes": shard.nbytes,
                 "xxh3_64": f"{shard.checksum:016x}",
                 **({} if shard.source is None else {"source": shard.source})}
                for shard in self.shards
            ],
        }, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Raises: CheckpointError naming the field that is wrong."""
        try:
            body: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as error:
            raise CheckpointError(f"manifest is not JSON ({error})") from error
        if not isinstance(body, dict):
            raise CheckpointError(f"manifest is not a JSON object but {type(body).__name__}")
        if body.get("format") != _FORMAT or body.get("version") != _VERSION:
            raise CheckpointError(
                f"manifest format {body.get('format')!r} version {body.get('version')!r} "
                f"is not {_FORMAT!r} version {_VERSION}")
        try:
            shards = tuple(
                ShardRecord(int(s["rank"]), str(s["file"]), int(s["nbytes"]), int(s["xxh3_64"], 16),
                            None if s.get("source") is None else int(s["source"]))
                for s in body["shards"]
            )
            manifest = cls(int(body["step"]), int(body["world_size"]), str(body["created"]), shards)
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"manifest field missing or malformed: {error!r}") from error
        ranks = sorted(s.rank for s in shards)
        if not ranks or len(set(ranks)) != len(ranks) or not set(ranks) <= set(
                range(manifest.world_size)):
            raise CheckpointError(f"manifest lists ranks {ranks} for world size "
                                  f"{manifest.world_size}")
        return manifest

    @property
    def ranks(self) -> list[int]:
        return sorted(shard.rank for shard in self.shards)


class CheckpointDirectory:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure_writable(self) -> None:
        """Raises: CheckpointError naming the directory and the system's reason."""
        probe = self.root / f".write-probe-{uuid.uuid4().hex}"
        try:
            owner_only.make_dir(self.root)
            os.close(owner_only.create(probe))
            probe.unlink()
        except OSError as error:
            raise CheckpointError(
                f"checkpoint directory {self.root} is not writable: {error.strerror or error}"
            ) from error

    def step_dir(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def partial_dir(self, step: int) -> Path:
        """A new directory to write the checkpoint of ``step`` into before publishing it."""
        return self.root / f"{step_dir_name(step)}{_PARTIAL}{uuid.uuid4().hex[:8]}"

    def publish(self, partial: Path, step: int) -> Path:
        """Give a complete checkpoint its final name, replacing an older one of the same step."""
        final = self.step_dir(step)
        if final.exists():
            replaced = self.root / f"{final.name}{_PARTIAL}replaced-{uuid.uuid4().hex[:8]}"
            final.rename(replaced)
            shutil.rmtree(replaced, ignore_errors=True)
        partial.rename(final)
        sync_directory(self.root)
        return final

    def step_dirs(self) -> list[tuple[int, Path]]:
        """Every step directory, complete or not, newest first."""
        found = []
        if self.root.is_dir():
            for entry in self.root.iterdir():
                name = entry.name
                if entry.is_dir() and name.startswith("step-") and name[5:].isdigit():
                    found.append((int(name[5:]), entry))
        return sorted(found, reverse=True)

    def read_manifest(self, directory: Path) -> Manifest:
        """Raises: CheckpointError when the directory is partial or its manifest unusable."""
        path = directory / MANIFEST_NAME
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise CheckpointError("partial checkpoint: no manifest (its writer stopped)") from None
        except (OSError, UnicodeDecodeError) as error:
            raise CheckpointError(f"cannot read {path}: {error}") from error
        return Manifest.from_json(text)

    def check(self, directory: Path, *, world_size: int,
              ranks: Sequence[int] | None = None) -> Manifest:
        """The manifest of a complete checkpoint whose every shard verifies, for ``world_size``
        ranks of which it holds ``ranks`` (None: all, one host): what a restore may load.

        Raises:
            CheckpointError: partial, saved with another world size or for other ranks, or a
                shard that fails.
        """
        manifest = self.holding(directory, world_size=world_size, ranks=ranks)
        self.verify(directory, manifest)
        return manifest

    def holding(self, directory: Path, *, world_size: int,
                ranks: Sequence[int] | None = None) -> Manifest:
        """The manifest, if it is of ``world_size`` ranks and holds ``ranks`` (None: all); its
        shards are not read.

        Raises:
            CheckpointError: partial, saved with another world size or for other ranks.
        """
        manifest = self.read_manifest(directory)
        if manifest.world_size != world_size:
            raise CheckpointError(
                f"saved with {manifest.world_size} ranks, the job has {world_size}")
        wanted = sorted(ranks) if ranks is not None else list(range(world_size))
        if manifest.ranks != wanted:
            raise CheckpointError(f"holds ranks {manifest.ranks}, this host has {wanted}")
        return manifest

    def verify(self, directory: Path, manifest: Manifest) -> None:
        """Check every shard's size, header and checksum against the manifest.

        Raises:
            CheckpointError: the first shard that does not match, and how.
        """
        for shard in manifest.shards:
            path = directory / shard.file
            try:
                size = path.stat().st_size
                if size != shard.nbytes:
                    raise CheckpointError(
                        f"{shard.file} has {size} bytes, the manifest says {shard.nbytes}")
                with path.open("rb") as stream:
                    header = snapshot_layout.SnapshotHeader.unpack(
                        stream.read(snapshot_layout.HEADER_SIZE), size=size)
                    digest = xxhash.xxh3_64()
                    while chunk := stream.read(_READ_CHUNK):
                        digest.update(chunk)
            except OSError as error:
                raise CheckpointError(f"cannot read {path}: {error}") from error
            except snapshot_layout.LayoutError as error:
                raise CheckpointError(f"{shard.file}: {error}") from error
            if not header.committed or header.end != size:
                raise CheckpointError(
                    f"{shard.file} holds no complete snapshot (seq {header.seq}, "
                    f"{header.end} of {size} bytes)")
            if header.rank != shard.writer or header.step != manifest.step:
                raise CheckpointError(
                    f"{shard.file} holds rank {header.rank} step {header.step}, expected rank "
                    f"{shard.writer} step {manifest.step}")
            if digest.intdigest() != shard.checksum:
                raise CheckpointError(
                    f"{shard.file} is corrupt: checksum {digest.intdigest():016x}, manifest "
                    f"{shard.checksum:016x}")

    def commit_manifest(self, directory: Path, manifest: Manifest) -> None:
        """Write the manifest by atomic rename and make the directory entry durable."""
        temporary = directory / (MANIFEST_NAME + ".tmp")
        with os.fdopen(owner_only.create(temporary), "w") as stream:
            stream.write(manifest.to_json())
            stream.flush()
            os.fsync(stream.fileno())
        temporary.rename(directory / MANIFEST_NAME)
        sync_directory(directory)
        sync_directory(self.root)

    def retain(self, keep: int) -> list[Path]:
        """Keep the newest ``keep`` complete checkpoints; drop older ones, partial ones and the
        leftovers of writers that died (call it only while nothing is being written)."""
        removed = []
        for leftover in self.root.glob(f"step-*{_PARTIAL}*"):
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
        complete = 0
        for _, directory in self.step_dirs():
            if (directory / MANIFEST_NAME).exists():
                complete += 1
                if complete <= keep:
                    continue
            elif complete == 0:
                continue  # a partial directory newer than every complete one may be in progress
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
        return removed


def sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
