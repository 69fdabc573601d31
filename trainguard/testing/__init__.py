"""Helpers for testing jobs that run under trainguard (public API).

``inject_fault`` causes a real fault in a worker of a running job, as ``trainguard fault inject``
does; ``recorded_events`` reads a run's event log, as ``trainguard events`` does;
``end_process_tree`` ends a job started in a session of its own, with everything it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil

from trainguard.agent.control import ControlError, inject_fault
from trainguard.ipc.messages import InjectionKind
from trainguard.launcher import STORE_NAME
from trainguard.store import api, sqlite, sqlite_kv

__all__ = ["ControlError", "InjectionKind", "end_process_tree", "inject_fault",
           "key_value_store", "recorded_events"]


def recorded_events(run_dir: Path, *kinds: str, after_id: int = 0, since: str | None = None,
                    limit: int | None = None) -> list[api.StoredEvent]:
    """The events of the run in ``run_dir``, oldest first, optionally only of ``kinds``, only
    after the event ``after_id``, only recorded at or after ``since`` (ISO-8601 UTC), and only
    the newest ``limit``.

    Raises:
        trainguard.store.api.StoreError: ``run_dir`` has no state store.
    """
    store = sqlite.SqliteStore.open(run_dir / STORE_NAME, read_only=True)
    try:
        return store.select_events(after_id=after_id, kinds=kinds, since=since, limit=limit)
    finally:
        store.close()


def end_process_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` and every process it started, also those in
    sessions of their own (torchrun puts its workers there; trainguard's workers too)."""
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for process in descendants:
        with contextlib.suppress(psutil.Error):
            process.kill()


def key_value_store() -> sqlite_kv.SqliteKeyValueStore:
    """A key-value store in memory, for unit tests of what uses one: the embedded backend
    itself, so it keeps every promise of the contract (revisions, compare-and-set, watches,
    leases)."""
    return sqlite_kv.SqliteKeyValueStore.open(":memory:")
