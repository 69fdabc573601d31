"""The embedded SQLite state store: the event log and named documents."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.store import api, sqlite

T0 = "2026-11-30T07:02:50.123Z"
T1 = "2026-11-30T07:02:51.000Z"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "state.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[sqlite.SqliteStore]:
    opened = sqlite.SqliteStore.open(store_path)
    yield opened
    opened.close()


def test_open_creates_the_file_and_its_directory(store_path: Path) -> None:
    assert not store_path.parent.exists()

    opened = sqlite.SqliteStore.open(store_path)

    assert store_path.is_file()
    assert opened.path == store_path
    assert opened.events() == []
    opened.close()


def test_writer_uses_wal_mode(store: sqlite.SqliteStore, store_path: Path) -> None:
    connection = sqlite3.connect(store_path)
    try:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    finally:
        connection.close()

    assert mode == "wal"


def test_append_event_returns_growing_ids(store: sqlite.SqliteStore) -> None:
    ids = [store.append_event("fault-detected", {"rank": rank}, time=T0) for rank in range(5)]

    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    assert ids[0] >= 1


def test_events_come_back_oldest_first_with_their_data(store: sqlite.SqliteStore) -> None:
    first = store.append_event("generation-started", {"generation": 0, "ports": [1, 2]}, time=T0)
    second = store.append_event("job-finished", {"outcome": "succeeded", "reason": None},
                                time=T1)

    assert store.events() == [
        api.StoredEvent(first, T0, "generation-started", {"generation": 0, "ports": [1, 2]}),
        api.StoredEvent(second, T1, "job-finished", {"outcome": "succeeded", "reason": None}),
    ]


def test_events_after_id(store: sqlite.SqliteStore) -> None:
    ids = [store.append_event("decision", {"n": n}, time=T0) for n in range(4)]

    assert [event.data["n"] for event in store.events(after_id=ids[1])] == [2, 3]
    assert [event.id for event in store.events(after_id=ids[1])] == ids[2:]
    assert store.events(after_id=ids[-1]) == []
    assert len(store.events(after_id=0)) == 4


def test_events_of_kinds(store: sqlite.SqliteStore) -> None:
    for kind in ("generation-started", "fault-detected", "decision", "fault-detected",
                 "job-finished"):
        store.append_event(kind, {}, time=T0)

    assert [e.kind for e in store.events(kinds=["fault-detected"])] == ["fault-detected"] * 2
    assert [e.kind for e in store.events(kinds=("decision", "job-finished"))] == [
        "decision", "job-finished"]
    assert store.events(kinds=["no-such-kind"]) == []


def test_events_after_id_and_kinds_together(store: sqlite.SqliteStore) -> None:
    first = store.append_event("fault-detected", {"n": 1}, time=T0)
    store.append_event("decision", {"n": 2}, time=T0)
    store.append_event("fault-detected", {"n": 3}, time=T0)

    assert [e.data["n"] for e in store.events(after_id=first, kinds=["fault-detected"])] == [3]


def test_put_document_creates_with_revision_one(store: sqlite.SqliteStore) -> None:
    revision = store.put_document("job-status-demo", {"state": "running", "generation": 0},
                                  time=T0)

    assert revision == 1
    assert store.get_document("job-status-demo") == api.Document(
        "job-status-demo", {"state": "running", "generation": 0}, 1, T0)


def test_put_document_replaces_and_increments_the_revision(store: sqlite.SqliteStore) -> None:
    store.put_document("job-status-demo", {"state": "running", "old": True}, time=T0)
    second = store.put_document("job-status-demo", {"state": "recovering"}, time=T0)
    third = store.put_document("job-status-demo", {"state": "succeeded"}, time=T1)

    assert (second, third) == (2, 3)
    document = store.get_document("job-status-demo")
    assert document == api.Document("job-status-demo", {"state": "succeeded"}, 3, T1)


def test_documents_have_their_own_revisions(store: sqlite.SqliteStore) -> None:
    store.put_document("a", {}, time=T0)
    store.put_document("a", {}, time=T0)

    assert store.put_document("b", {"x": 1}, time=T0) == 1
    document = store.get_document("a")
    assert document is not None
    assert document.revision == 2


def test_get_missing_document_is_none(store: sqlite.SqliteStore) -> None:
    assert store.get_document("job-status-nobody") is None


def test_history_survives_reopening(store_path: Path) -> None:
    writer = sqlite.SqliteStore.open(store_path)
    event_id = writer.append_event("fault-detected", {"rank": 1}, time=T0)
    writer.put_document("doc", {"v": 1}, time=T0)
    writer.close()

    reopened = sqlite.SqliteStore.open(store_path)
    try:
        assert [e.id for e in reopened.events()] == [event_id]
        assert reopened.append_event("decision", {}, time=T1) > event_id
        assert reopened.put_document("doc", {"v": 2}, time=T1) == 2
    finally:
        reopened.close()


def test_read_only_open_of_a_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "state.db"

    with pytest.raises(api.StoreError) as caught:
        sqlite.SqliteStore.open(missing, read_only=True)

    assert str(caught.value) == f"no state store at {missing}"
    assert not missing.parent.exists()


def test_reader_sees_events_written_by_the_writer(store: sqlite.SqliteStore,
                                                  store_path: Path) -> None:
    store.append_event("generation-started", {"generation": 0}, time=T0)
    reader = sqlite.SqliteStore.open(store_path, read_only=True)
    try:
        assert [e.data for e in reader.events()] == [{"generation": 0}]

        later = store.append_event("fault-detected", {"rank": 2}, time=T1)
        store.put_document("job-status-demo", {"state": "recovering"}, time=T1)

        assert [e.id for e in reader.events(after_id=later - 1)] == [later]
        document = reader.get_document("job-status-demo")
        assert document is not None
        assert document.data == {"state": "recovering"}
    finally:
        reader.close()


def test_read_only_store_refuses_writes_naming_the_path(store: sqlite.SqliteStore,
                                                        store_path: Path) -> None:
    reader = sqlite.SqliteStore.open(store_path, read_only=True)
    try:
        with pytest.raises(api.StoreError) as caught:
            reader.append_event("decision", {}, time=T0)
    finally:
        reader.close()

    assert str(caught.value).startswith(f"cannot write the state store {store_path}: ")
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    assert store.events() == []


def test_opening_a_file_that_is_not_a_database_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is a text file, not SQLite\n" * 64)

    with pytest.raises(api.StoreError) as caught:
        sqlite.SqliteStore.open(path)

    assert str(caught.value).startswith(f"cannot open the state store {path}: ")
    assert isinstance(caught.value.__cause__, sqlite3.Error)


def _open_and_read(path: Path) -> None:
    reader = sqlite.SqliteStore.open(path, read_only=True)
    try:
        reader.events()
    finally:
        reader.close()


def test_reading_a_file_that_is_not_a_database_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is a text file, not SQLite\n" * 64)

    with pytest.raises(api.StoreError) as caught:
        _open_and_read(path)

    assert str(path) in str(caught.value)


def test_opening_where_the_directory_cannot_be_made_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the run directory should be")

    with pytest.raises(api.StoreError) as caught:
        sqlite.SqliteStore.open(blocker / "state.db")

    assert str(caught.value).startswith(f"cannot open the state store {blocker / 'state.db'}: ")


@pytest.mark.parametrize("directory", ["run#2", "what?", "100%", "50%41"])
def test_read_only_open_works_for_paths_with_uri_characters(tmp_path: Path,
                                                            directory: str) -> None:
    # The run directory is the user's (--run-dir); '#', '?' and '%' are legal in file names.
    path = tmp_path / directory / "state.db"
    writer = sqlite.SqliteStore.open(path)
    writer.append_event("generation-started", {"generation": 0}, time=T0)
    writer.close()
    before = sorted(p.name for p in tmp_path.iterdir())

    reader = sqlite.SqliteStore.open(path, read_only=True)
    try:
        assert [e.kind for e in reader.events()] == ["generation-started"]
    finally:
        reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # a reader creates no files


def test_the_store_and_its_journal_files_are_owner_only(store_path: Path) -> None:
    previous = os.umask(0)  # nothing but the store's own modes
    try:
        opened = sqlite.SqliteStore.open(store_path)
        opened.append_event("probe", {}, time=T0)
    finally:
        os.umask(previous)
    try:
        modes = {path.name: path.stat().st_mode & 0o777 for path in store_path.parent.iterdir()}
    finally:
        opened.close()
    assert modes == {"state.db": 0o600, "state.db-wal": 0o600, "state.db-shm": 0o600}
    assert store_path.parent.stat().st_mode & 0o777 == 0o700


def test_documents_by_prefix_take_the_prefix_literally(store: sqlite.SqliteStore) -> None:
    for name in ("detectors-host-a", "detectors-host-b", "detectorsXhost", "mindx-dl-x"):
        store.put_document(name, {"name": name}, time="t")
    store.put_document("a_b", {}, time="t")
    store.put_document("axb", {}, time="t")

    assert [d.name for d in store.documents("detectors-")] == [
        "detectors-host-a", "detectors-host-b"]
    assert [d.name for d in store.documents("a_")] == ["a_b"], "_ is no wildcard"
    assert store.documents("detectors-host-a")[0].data == {"name": "detectors-host-a"}
    assert store.documents("none-") == []


def test_events_recorded_elsewhere_keep_their_ids_past_the_newest_here(
        store: sqlite.SqliteStore) -> None:
    """A job taken over: its earlier controllers' events join this store under their ids;
    those it holds already are not added again, and its own next event comes after them."""
    store.append_event("generation-started", {"generation": 0}, time=T0)
    elsewhere = [api.StoredEvent(1, T0, "generation-started", {"generation": 0}),
                 api.StoredEvent(2, T0, "fault-detected", {"rank": 1}),
                 api.StoredEvent(4, T1, "decision", {"strategy": "recover-in-place"})]

    assert store.insert_events(elsewhere) == 2
    assert store.insert_events(elsewhere) == 0

    assert store.append_event("controller-took-over", {"generation": 1}, time=T1) == 5
    assert [(event.id, event.kind) for event in store.events()] == [
        (1, "generation-started"), (2, "fault-detected"), (4, "decision"),
        (5, "controller-took-over")]
    assert store.events(after_id=3)[0].data == {"strategy": "recover-in-place"}
