"""Persisted checkpoint directories: manifest, verification, publishing and retention."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import xxhash

from trainguard.ipc import checkpoint_layout, snapshot_layout
from trainguard.ipc.checkpoint_layout import (
    CheckpointDirectory,
    CheckpointError,
    Manifest,
    ShardRecord,
)
from trainguard.train import snapshot

CREATED = "2026-11-30T07:02:50.123Z"


def manifest_body(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "format": "trainguard-checkpoint", "version": 1, "step": 120, "world_size": 2,
        "created": CREATED,
        "shards": [{"rank": 0, "file": "rank-00000.tgsnap", "nbytes": 100,
                    "xxh3_64": "9f0c0d7e5b1a2c3d"},
                   {"rank": 1, "file": "rank-00001.tgsnap", "nbytes": 200,
                    "xxh3_64": "0000000000000001"}],
    }
    body.update(changes)
    return body


def write_shard(directory: Path, *, rank: int, step: int, world_size: int = 2,
                numel: int = 1000) -> ShardRecord:
    """A shard file as the persister writes it: a committed snapshot with its checksum."""
    tree = {"step": step, "state": {"w": torch.full((numel,), float(rank))}}
    prepared = snapshot.prepare(tree)
    path = directory / checkpoint_layout.shard_name(rank)
    directory.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        stream.truncate(prepared.nbytes)
    mapped = snapshot.MappedSlot(str(path))
    try:
        seq = mapped.write(prepared, step=step, generation=0, rank=rank, world_size=world_size)
    finally:
        mapped.close()
    data = bytearray(path.read_bytes())
    checksum = xxhash.xxh3_64_intdigest(bytes(data[snapshot_layout.HEADER_SIZE:]))
    snapshot_layout.write_checksum(data, checksum, seq)
    path.write_bytes(data)
    return ShardRecord(rank, path.name, len(data), checksum)


def write_checkpoint(directory: CheckpointDirectory, step: int, *, world_size: int = 2
                     ) -> tuple[Path, Manifest]:
    path = directory.step_dir(step)
    records = tuple(write_shard(path, rank=rank, step=step, world_size=world_size)
                    for rank in range(world_size))
    manifest = Manifest(step=step, world_size=world_size, created=CREATED, shards=records)
    directory.commit_manifest(path, manifest)
    return path, manifest


# --- manifest --------------------------------------------------------------------------------


def test_manifest_json_round_trip() -> None:
    manifest = Manifest(step=120, world_size=2, created=CREATED, shards=(
        ShardRecord(0, "rank-00000.tgsnap", 21004288, 0x9F0C0D7E5B1A2C3D),
        ShardRecord(1, "rank-00001.tgsnap", 21004288, 0x1),
    ))
    text = manifest.to_json()
    body = json.loads(text)
    assert body["format"] == "trainguard-checkpoint"
    assert body["version"] == 1
    assert body["shards"][0]["xxh3_64"] == "9f0c0d7e5b1a2c3d"
    assert body["shards"][1]["xxh3_64"] == "0000000000000001"
    assert Manifest.from_json(text) == manifest


def test_manifest_from_documented_example() -> None:
    manifest = Manifest.from_json(json.dumps(manifest_body()))
    assert manifest.step == 120
    assert manifest.world_size == 2
    assert manifest.created == CREATED
    assert manifest.shards[0] == ShardRecord(0, "rank-00000.tgsnap", 100, 0x9F0C0D7E5B1A2C3D)


@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "manifest is not JSON"),
    ("", "manifest is not JSON"),
    (json.dumps(manifest_body(format="other")),
     "manifest format 'other' version 1 is not 'trainguard-checkpoint' version 1"),
    (json.dumps(manifest_body(version=2)),
     "manifest format 'trainguard-checkpoint' version 2 is not 'trainguard-checkpoint' version 1"),
    (json.dumps({key: value for key, value in manifest_body().items() if key != "step"}),
     "manifest field missing or malformed: KeyError('step')"),
    (json.dumps({key: value for key, value in manifest_body().items() if key != "shards"}),
     "manifest field missing or malformed: KeyError('shards')"),
    (json.dumps(manifest_body(shards=[{"rank": 0, "file": "a", "nbytes": 1}])),
     "manifest field missing or malformed: KeyError('xxh3_64')"),
    (json.dumps(manifest_body(shards=[{"rank": 0, "file": "a", "nbytes": 1,
                                       "xxh3_64": "zz"}], world_size=1)),
     "manifest field missing or malformed: ValueError"),
    (json.dumps(manifest_body(step="soon")), "manifest field missing or malformed: ValueError"),
    (json.dumps(manifest_body(shards=[{"rank": 0, "file": "a", "nbytes": 1, "xxh3_64": "1"},
                                      {"rank": 2, "file": "b", "nbytes": 1, "xxh3_64": "1"}])),
     "manifest lists ranks [0, 2] for world size 2"),
    (json.dumps(manifest_body(shards=[{"rank": 0, "file": "a", "nbytes": 1, "xxh3_64": "1"},
                                      {"rank": 0, "file": "b", "nbytes": 1, "xxh3_64": "1"}])),
     "manifest lists ranks [0, 0] for world size 2"),
    (json.dumps(manifest_body(shards=[])), "manifest lists ranks [] for world size 2"),
])
def test_manifest_from_json_rejects(text: str, reason: str) -> None:
    with pytest.raises(CheckpointError) as caught:
        Manifest.from_json(text)
    assert reason in str(caught.value)


def test_a_manifest_of_some_ranks_is_one_hosts_part(tmp_path: Path) -> None:
    """A job across hosts: each host's directory lists its own ranks; a restore there needs
    exactly those, and one host's part never passes for the whole job's checkpoint."""
    directory = CheckpointDirectory(tmp_path)
    step_dir = tmp_path / "step-000000120"
    step_dir.mkdir()
    body = manifest_body(world_size=4, shards=[
        {"rank": 2, "file": "rank-00002.tgsnap", "nbytes": 1, "xxh3_64": "1"},
        {"rank": 3, "file": "rank-00003.tgsnap", "nbytes": 1, "xxh3_64": "1"}])
    (step_dir / "manifest.json").write_text(json.dumps(body))

    assert directory.holding(step_dir, world_size=4, ranks=[3, 2]).ranks == [2, 3]
    with pytest.raises(CheckpointError, match=r"holds ranks \[2, 3\], this host has "
                                              r"\[0, 1, 2, 3\]"):
        directory.holding(step_dir, world_size=4)
    with pytest.raises(CheckpointError, match=r"holds ranks \[2, 3\], this host has \[0, 1\]"):
        directory.holding(step_dir, world_size=4, ranks=[0, 1])


@pytest.mark.parametrize("text", ["[]", "null"])
def test_manifest_from_json_rejects_json_that_is_not_an_object(text: str) -> None:
    # A manifest that is valid JSON but not an object must be a CheckpointError like any other
    # bad manifest: restore skips CheckpointErrors only.
    with pytest.raises(CheckpointError, match="manifest"):
        Manifest.from_json(text)


# --- the directory ---------------------------------------------------------------------------


def test_ensure_writable_creates_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "checkpoints"
    CheckpointDirectory(root).ensure_writable()
    assert root.is_dir()
    assert list(root.iterdir()) == []  # the probe is gone


def test_ensure_writable_names_the_directory_and_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    root = tmp_path / "file" / "ckpt"
    with pytest.raises(CheckpointError) as caught:
        CheckpointDirectory(root).ensure_writable()
    message = str(caught.value)
    assert f"checkpoint directory {root} is not writable" in message
    assert "Not a directory" in message
    assert isinstance(caught.value.__cause__, NotADirectoryError)


def test_step_dirs_newest_first_and_only_step_directories(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    for name in ("step-000000005", "step-000000120", "step-000000010",
                 "step-000000007.partial-1a2b3c4d", "other", "step-", "step-12x"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-000000200").write_text("a file, not a checkpoint")
    assert directory.step_dirs() == [
        (120, tmp_path / "step-000000120"),
        (10, tmp_path / "step-000000010"),
        (5, tmp_path / "step-000000005"),
    ]


def test_step_dirs_of_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert CheckpointDirectory(tmp_path / "missing").step_dirs() == []


def test_step_dir_and_shard_names() -> None:
    directory = CheckpointDirectory(Path("/ckpt"))
    assert directory.step_dir(120) == Path("/ckpt/step-000000120")
    assert checkpoint_layout.shard_name(3) == "rank-00003.tgsnap"


def test_read_manifest_of_a_directory_without_one_is_partial(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    (tmp_path / "step-000000003").mkdir()
    with pytest.raises(CheckpointError, match="partial checkpoint"):
        directory.read_manifest(tmp_path / "step-000000003")


def test_read_manifest_returns_the_committed_manifest(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 4)
    assert directory.read_manifest(path) == manifest
    assert not (path / (checkpoint_layout.MANIFEST_NAME + ".tmp")).exists()


def test_read_manifest_with_undecodable_bytes_is_a_checkpoint_error(tmp_path: Path) -> None:
    # A manifest corrupted on disk into bytes that are not UTF-8 must be skipped like any other
    # unusable manifest, not crash the restore with a UnicodeDecodeError.
    directory = CheckpointDirectory(tmp_path)
    path = tmp_path / "step-000000003"
    path.mkdir()
    (path / checkpoint_layout.MANIFEST_NAME).write_bytes(b'{"format": "\xff\xfe\x80"}')
    with pytest.raises(CheckpointError):
        directory.read_manifest(path)


# --- verify ----------------------------------------------------------------------------------


def test_verify_accepts_an_intact_checkpoint(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    directory.verify(path, manifest)


def test_verify_detects_a_size_mismatch(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    shard = path / "rank-00001.tgsnap"
    with shard.open("ab") as stream:
        stream.write(b"\0")
    expected = manifest.shards[1].nbytes
    with pytest.raises(CheckpointError) as caught:
        directory.verify(path, manifest)
    assert str(caught.value) == (
        f"rank-00001.tgsnap has {expected + 1} bytes, the manifest says {expected}")


def test_verify_detects_a_corrupt_byte(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    shard = path / "rank-00000.tgsnap"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(data)
    actual = xxhash.xxh3_64_intdigest(bytes(data[snapshot_layout.HEADER_SIZE:]))
    with pytest.raises(CheckpointError) as caught:
        directory.verify(path, manifest)
    assert str(caught.value) == (
        f"rank-00000.tgsnap is corrupt: checksum {actual:016x}, manifest "
        f"{manifest.shards[0].checksum:016x}")


def test_verify_detects_a_shard_of_another_rank(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    swapped = (manifest.shards[0], ShardRecord(1, "rank-00000.tgsnap",
                                               manifest.shards[0].nbytes,
                                               manifest.shards[0].checksum))
    with pytest.raises(CheckpointError) as caught:
        directory.verify(path, Manifest(7, 2, CREATED, swapped))
    assert str(caught.value) == (
        "rank-00000.tgsnap holds rank 0 step 7, expected rank 1 step 7")


def test_verify_detects_a_shard_of_another_step(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path = directory.step_dir(7)
    records = (write_shard(path, rank=0, step=7), write_shard(path, rank=1, step=6))
    manifest = Manifest(7, 2, CREATED, records)
    with pytest.raises(CheckpointError) as caught:
        directory.verify(path, manifest)
    assert str(caught.value) == (
        "rank-00001.tgsnap holds rank 1 step 6, expected rank 1 step 7")


def test_verify_detects_a_header_that_is_not_a_snapshot(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    shard = path / "rank-00001.tgsnap"
    data = bytearray(shard.read_bytes())
    data[0:8] = b"NOTASNAP"
    shard.write_bytes(data)
    with pytest.raises(CheckpointError, match=r"^rank-00001\.tgsnap: not a trainguard snapshot"):
        directory.verify(path, manifest)


def test_verify_rejects_a_shard_whose_header_is_torn(tmp_path: Path) -> None:
    # The checksum covers only the bytes after the header, so a damaged header must be caught
    # by its own checks: a shard whose seq is odd holds no complete snapshot and cannot be
    # loaded (read_snapshot refuses it), so restore must skip the checkpoint, not choose it.
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    shard = path / "rank-00000.tgsnap"
    data = bytearray(shard.read_bytes())
    snapshot_layout.write_seq(data, snapshot_layout.read_seq(data) + 1)
    shard.write_bytes(data)
    with pytest.raises(snapshot.SnapshotError):
        snapshot.read_snapshot(str(shard))
    with pytest.raises(CheckpointError, match=r"rank-00000\.tgsnap"):
        directory.verify(path, manifest)


def test_verify_detects_a_missing_shard(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    path, manifest = write_checkpoint(directory, 7)
    (path / "rank-00001.tgsnap").unlink()
    with pytest.raises(CheckpointError, match=r"cannot read .*rank-00001\.tgsnap"):
        directory.verify(path, manifest)


# --- publish and retain ----------------------------------------------------------------------


def test_partial_dir_is_a_new_name_per_call(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    first, second = directory.partial_dir(5), directory.partial_dir(5)
    assert first != second
    assert first.parent == tmp_path
    assert first.name.startswith("step-000000005.partial-")
    assert not first.exists()


def test_publish_renames_the_partial_directory(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    partial = directory.partial_dir(5)
    partial.mkdir()
    (partial / "data").write_text("new")
    final = directory.publish(partial, 5)
    assert final == tmp_path / "step-000000005"
    assert (final / "data").read_text() == "new"
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["step-000000005"]


def test_publish_replaces_an_existing_step_directory(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    old = directory.step_dir(5)
    old.mkdir()
    (old / "old-only").write_text("old")
    (old / "data").write_text("old")
    partial = directory.partial_dir(5)
    partial.mkdir()
    (partial / "data").write_text("new")
    final = directory.publish(partial, 5)
    assert sorted(entry.name for entry in final.iterdir()) == ["data"]
    assert (final / "data").read_text() == "new"
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["step-000000005"]


def test_retain_keeps_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    for step in (10, 20, 30, 40):
        write_checkpoint(directory, step)
    incomplete_between = directory.step_dir(35)
    incomplete_between.mkdir()
    in_progress = directory.step_dir(50)  # newer than every complete one: may be being written
    in_progress.mkdir()
    leftover = tmp_path / "step-000000045.partial-1a2b3c4d"
    leftover.mkdir()
    (leftover / "rank-00000.tgsnap.tmp").write_bytes(b"half")

    removed = directory.retain(2)

    assert sorted(removed) == sorted([leftover, incomplete_between, directory.step_dir(20),
                                      directory.step_dir(10)])
    assert [step for step, _ in directory.step_dirs()] == [50, 40, 30]
    assert sorted(os.listdir(tmp_path)) == ["step-000000030", "step-000000040",
                                            "step-000000050"]
    for step in (30, 40):
        path = directory.step_dir(step)
        directory.verify(path, directory.read_manifest(path))


def test_retain_with_fewer_checkpoints_than_keep_removes_nothing(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path)
    write_checkpoint(directory, 1)
    write_checkpoint(directory, 2)
    assert directory.retain(3) == []
    assert [step for step, _ in directory.step_dirs()] == [2, 1]
