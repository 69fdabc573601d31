"""Byte layout of a rank's snapshot: header, sequence lock, tensor table, checksum."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from trainguard.ipc import snapshot_layout as layout

TABLE = layout.encode_table([
    layout.TensorEntry(dtype="float32", shape=(4, 8), offset=0, nbytes=128),
    layout.TensorEntry(dtype="int64", shape=(), offset=128, nbytes=8),
])
SKELETON = b"pickled-state-tree"
PAYLOAD = bytes(range(256)) * 3


def _header(seq: int = 2, **changes: int) -> layout.SnapshotHeader:
    table_offset = layout.HEADER_SIZE
    skeleton_offset = table_offset + len(TABLE)
    payload_offset = layout.align(skeleton_offset + len(SKELETON))
    values = dict(
        seq=seq, step=41, generation=3, rank=5, world_size=8,
        table_offset=table_offset, table_len=len(TABLE),
        skeleton_offset=skeleton_offset, skeleton_len=len(SKELETON),
        payload_offset=payload_offset, payload_len=len(PAYLOAD),
        checksum=0, checksum_seq=0, created_unix_ns=1_700_000_000_123_456_789,
    )
    values.update(changes)
    return layout.SnapshotHeader(**values)


def _snapshot(header: layout.SnapshotHeader, *, extra: int = 0) -> bytearray:
    """A complete snapshot buffer: header, table, skeleton, payload, then ``extra`` spare bytes."""
    buffer = bytearray(header.end + extra)
    buffer[: len(header.pack())] = header.pack()
    buffer[header.table_offset : header.table_offset + len(TABLE)] = TABLE
    buffer[header.skeleton_offset : header.skeleton_offset + len(SKELETON)] = SKELETON
    buffer[header.payload_offset : header.end] = PAYLOAD
    return buffer


def test_header_constants_agree() -> None:
    assert struct.calcsize(layout.HEADER_FORMAT) <= layout.HEADER_SIZE
    assert layout.MAGIC == b"TGSNAP01"
    assert layout.HEADER_SIZE % layout.ALIGNMENT == 0


def test_header_round_trip_through_a_snapshot_buffer() -> None:
    header = _header(checksum=0xDEADBEEFCAFEF00D, checksum_seq=2)
    buffer = _snapshot(header)

    assert layout.SnapshotHeader.unpack(buffer) == header
    assert layout.SnapshotHeader.unpack(bytes(buffer)) == header
    assert layout.SnapshotHeader.unpack(memoryview(buffer)) == header


def test_packed_header_alone_unpacks_given_the_size_behind_it() -> None:
    header = _header()

    assert layout.SnapshotHeader.unpack(header.pack(), size=header.end) == header


def test_header_with_negative_step_and_large_fields_round_trips() -> None:
    header = _header(seq=1, step=-1, generation=2**64 - 1, rank=2**32 - 1,
                     world_size=2**32 - 1, created_unix_ns=2**64 - 1)

    assert layout.SnapshotHeader.unpack(header.pack()) == header


def test_pack_starts_with_magic_and_version() -> None:
    packed = _header().pack()

    assert packed[:8] == layout.MAGIC
    assert struct.unpack_from("<II", packed, 8) == (layout.VERSION, layout.HEADER_SIZE)


def test_end_is_payload_end() -> None:
    header = _header()

    assert header.end == header.payload_offset + len(PAYLOAD)


@pytest.mark.parametrize("magic", [b"TGSNAP02", b"\x00" * 8, b"PK\x03\x04abcd"])
def test_unpack_rejects_bad_magic(magic: bytes) -> None:
    buffer = _snapshot(_header())
    assert len(magic) == 8
    buffer[:8] = magic

    with pytest.raises(layout.LayoutError) as caught:
        layout.SnapshotHeader.unpack(buffer)

    assert str(caught.value) == f"not a trainguard snapshot (magic {magic!r})"


def test_unpack_rejects_a_zeroed_buffer_as_not_a_snapshot() -> None:
    with pytest.raises(layout.LayoutError, match="not a trainguard snapshot"):
        layout.SnapshotHeader.unpack(bytearray(layout.HEADER_SIZE))


def test_unpack_rejects_another_version() -> None:
    buffer = _snapshot(_header())
    struct.pack_into("<I", buffer, 8, layout.VERSION + 1)

    with pytest.raises(layout.LayoutError) as caught:
        layout.SnapshotHeader.unpack(buffer)

    assert str(caught.value) == (
        f"unsupported snapshot version {layout.VERSION + 1} (header {layout.HEADER_SIZE})")


def test_unpack_rejects_another_header_size() -> None:
    buffer = _snapshot(_header())
    struct.pack_into("<I", buffer, 12, 8192)

    with pytest.raises(layout.LayoutError, match=r"unsupported snapshot version 1 \(header 8192\)"):
        layout.SnapshotHeader.unpack(buffer)


def test_unpack_rejects_a_buffer_too_short_for_the_header() -> None:
    with pytest.raises(layout.LayoutError) as caught:
        layout.SnapshotHeader.unpack(_header().pack()[:100])

    assert str(caught.value) == "100 bytes is too short for a snapshot header"


@pytest.mark.parametrize(("changes", "text"), [
    ({"payload_len": len(PAYLOAD) + 1}, "payload region"),
    ({"table_offset": 100}, "table region [100, "),
    ({"skeleton_offset": 1 << 40}, "skeleton region"),
])
def test_committed_header_with_region_outside_the_buffer_is_rejected(
    changes: dict[str, int], text: str
) -> None:
    good = _header()
    buffer = _snapshot(good)
    buffer[: len(good.pack())] = _header(**changes).pack()

    with pytest.raises(layout.LayoutError) as caught:
        layout.SnapshotHeader.unpack(buffer)

    assert text in str(caught.value)
    assert f"lies outside the {len(buffer)} bytes" in str(caught.value)


def test_size_argument_is_the_limit_for_regions() -> None:
    header = _header()
    buffer = _snapshot(header, extra=1000)

    assert layout.SnapshotHeader.unpack(buffer, size=header.end) == header
    with pytest.raises(layout.LayoutError) as caught:
        layout.SnapshotHeader.unpack(buffer, size=header.end - 1)
    expected = (f"payload region [{header.payload_offset}, {header.end}) lies outside the "
                f"{header.end - 1} bytes")
    assert str(caught.value) == expected


@pytest.mark.parametrize("seq", [0, 1, 7])
def test_uncommitted_header_is_not_checked_for_regions(seq: int) -> None:
    # A writer killed mid-copy leaves garbage offsets behind; reading the header must still work.
    header = _header(seq=seq, payload_len=1 << 40, table_offset=0)

    assert layout.SnapshotHeader.unpack(header.pack()) == header


@pytest.mark.parametrize(("seq", "committed"), [(0, False), (1, False), (2, True), (3, False),
                                                 (1000, True), (2**64 - 1, False)])
def test_committed_means_even_and_positive_seq(seq: int, committed: bool) -> None:
    assert _header(seq=seq).committed is committed


@pytest.mark.parametrize(("seq", "checksum_seq", "has"), [
    (4, 4, True),
    (4, 2, False),  # checksum of an older snapshot in the same slot
    (5, 5, False),  # being written
    (0, 0, False),  # never written
])
def test_has_checksum_only_when_it_belongs_to_this_committed_snapshot(
    seq: int, checksum_seq: int, has: bool
) -> None:
    assert _header(seq=seq, checksum=123, checksum_seq=checksum_seq).has_checksum is has


def test_sequence_lock_on_a_bytearray() -> None:
    buffer = _snapshot(_header(seq=2))
    assert layout.read_seq(buffer) == 2

    layout.write_seq(buffer, 3)  # writing begins

    assert layout.read_seq(buffer) == 3
    writing = layout.SnapshotHeader.unpack(buffer)
    assert writing.seq == 3
    assert not writing.committed

    layout.write_seq(buffer, 4)  # complete

    assert layout.SnapshotHeader.unpack(buffer) == _header(seq=4)


def test_write_seq_touches_only_the_seq_field() -> None:
    buffer = _snapshot(_header(seq=2, checksum=9, checksum_seq=2))
    before = bytes(buffer)

    layout.write_seq(buffer, 2**64 - 2)

    changed = [index for index in range(len(buffer)) if buffer[index] != before[index]]
    assert changed
    assert min(changed) >= 16
    assert max(changed) < 24


def test_write_checksum_sets_checksum_and_its_seq() -> None:
    header = _header(seq=6)
    buffer = _snapshot(header)

    layout.write_checksum(buffer, 0x0123456789ABCDEF, 6)

    read = layout.SnapshotHeader.unpack(buffer)
    assert read.checksum == 0x0123456789ABCDEF
    assert read.checksum_seq == 6
    assert read.has_checksum
    assert read.seq == 6
    assert read.created_unix_ns == header.created_unix_ns


def test_sequence_helpers_work_on_a_memoryview() -> None:
    buffer = _snapshot(_header(seq=2))
    view = memoryview(buffer)

    layout.write_seq(view, 10)

    assert layout.read_seq(view) == 10
    assert layout.read_seq(buffer) == 10
    view.release()


def test_table_round_trip() -> None:
    entries = [
        layout.TensorEntry(dtype="bfloat16", shape=(2, 3, 4), offset=0, nbytes=48),
        layout.TensorEntry(dtype="float32", shape=(), offset=64, nbytes=4),
        layout.TensorEntry(dtype="uint8", shape=(0,), offset=128, nbytes=0),
    ]

    encoded = layout.encode_table(entries)

    assert layout.decode_table(encoded) == entries
    assert encoded.startswith(b'{"tensors":[{"dtype":"bfloat16","shape":[2,3,4],"offset":0,')


def test_empty_table_round_trip() -> None:
    assert layout.encode_table([]) == b'{"tensors":[]}'
    assert layout.decode_table(b'{"tensors":[]}') == []


@given(st.lists(st.builds(
    layout.TensorEntry,
    dtype=st.sampled_from(["float32", "float16", "int64", "bool"]),
    shape=st.lists(st.integers(0, 2**31), max_size=5).map(tuple),
    offset=st.integers(0, 2**48),
    nbytes=st.integers(0, 2**48),
), max_size=20))
def test_table_round_trip_property(entries: list[layout.TensorEntry]) -> None:
    assert layout.decode_table(layout.encode_table(entries)) == entries


@pytest.mark.parametrize("data", [
    b"",
    b"not json",
    b"\xff\xfe",
    b'{"tensors":[{"dtype":"float32","shape":[1]',
    b"[]",
    b"{}",
    b'{"tensors": 5}',
    b'{"tensors": [5]}',
    b'{"tensors": [{"dtype": "float32", "shape": [1], "offset": 0}]}',
    b'{"tensors": [{"dtype": "float32", "shape": 3, "offset": 0, "nbytes": 4}]}',
    b'{"tensors": [{"dtype": "float32", "shape": ["x"], "offset": 0, "nbytes": 4}]}',
    b'{"tensors": [{"dtype": "float32", "shape": [1], "offset": null, "nbytes": 4}]}',
])
def test_malformed_table_raises_layout_error(data: bytes) -> None:
    with pytest.raises(layout.LayoutError, match="tensor table is unreadable: ") as caught:
        layout.decode_table(data)

    assert caught.value.__cause__ is not None


def test_checksum_is_xxh3_of_everything_after_the_header_up_to_the_end() -> None:
    header = _header()
    buffer = _snapshot(header, extra=64)

    expected = xxhash.xxh3_64_intdigest(bytes(buffer[layout.HEADER_SIZE : header.end]))

    assert layout.compute_checksum(buffer, header) == expected


def test_checksum_changes_when_a_payload_byte_changes() -> None:
    header = _header()
    buffer = _snapshot(header)
    before = layout.compute_checksum(buffer, header)

    buffer[header.payload_offset + 100] ^= 0x01

    assert layout.compute_checksum(buffer, header) != before


@pytest.mark.parametrize("where", ["table", "skeleton", "last payload byte"])
def test_checksum_covers_table_skeleton_and_the_last_byte(where: str) -> None:
    header = _header()
    buffer = _snapshot(header)
    before = layout.compute_checksum(buffer, header)
    index = {"table": header.table_offset, "skeleton": header.skeleton_offset,
             "last payload byte": header.end - 1}[where]

    buffer[index] ^= 0xFF

    assert layout.compute_checksum(buffer, header) != before


def test_checksum_ignores_the_header_and_bytes_past_the_end() -> None:
    header = _header()
    buffer = _snapshot(header, extra=128)
    before = layout.compute_checksum(buffer, header)

    layout.write_seq(buffer, 3)
    layout.write_checksum(buffer, before, 2)
    buffer[layout.HEADER_SIZE - 1] = 0x7F
    buffer[header.end] = 0x7F
    buffer[-1] = 0x7F

    assert layout.compute_checksum(buffer, header) == before


@pytest.mark.parametrize(("offset", "aligned"), [(0, 0), (1, 64), (63, 64), (64, 64),
                                                  (65, 128), (4096, 4096), (4097, 4160)])
def test_align(offset: int, aligned: int) -> None:
    assert layout.align(offset) == aligned


@given(st.integers(0, 2**64))
def test_align_is_the_next_multiple_of_the_alignment(offset: int) -> None:
    aligned = layout.align(offset)

    assert aligned % layout.ALIGNMENT == 0
    assert offset <= aligned < offset + layout.ALIGNMENT
