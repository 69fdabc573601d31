"""Opens a key-value store from its URL, importing a backend's client only when it is used.

* ``sqlite:///abs/path.db``, ``sqlite://relative/path.db`` or a plain path: the embedded store
  in that file (one host); ``sqlite://:memory:`` a store in memory, gone with the process.
* ``etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]``: an etcd cluster by its members' client
  addresses; keys live under ``/NAMESPACE/`` (default ``/trainguard/``).
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

from trainguard.store import kv

__all__ = ["StoreUrlError", "open_store", "parse_endpoints"]

_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,62})*")


class StoreUrlError(ValueError):
    """The URL names no store we can open; the message says which part is wrong."""


def parse_endpoints(text: str, *, url: str) -> list[tuple[str, int]]:
    endpoints = []
    for part in text.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise StoreUrlError(f"store URL {url!r}: {part!r} is no HOST:PORT")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


def open_store(url: str) -> kv.KeyValueStore:
    """Raises:
        StoreUrlError: the URL is malformed or names an unknown kind of store.
        trainguard.store.api.StoreError: a SQLite file cannot be opened.
        kv.UnavailableError: the etcd client is not installed.
    """
    scheme, rest = url.split("://", 1) if "://" in url else ("", url)
    if scheme in ("", "sqlite"):
        from trainguard.store import sqlite_kv  # noqa: PLC0415

        if not rest:
            raise StoreUrlError(f"store URL {url!r} names no file")
        return sqlite_kv.SqliteKeyValueStore.open(rest if rest == ":memory:" else Path(rest))
    if scheme == "etcd":
        parts = urllib.parse.urlsplit(url)
        if not parts.netloc:
            raise StoreUrlError(f"store URL {url!r} names no etcd member (etcd://HOST:PORT)")
        namespace = parts.path.strip("/")
        if namespace and not _NAMESPACE.fullmatch(namespace):
            raise StoreUrlError(f"store URL {url!r}: namespace {namespace!r} may hold only "
                                "letters, digits, '_', '.', '-' and '/' between them")
        from trainguard.store import etcd_kv  # noqa: PLC0415

        return etcd_kv.EtcdKeyValueStore(
            parse_endpoints(parts.netloc, url=url),
            namespace=f"/{namespace}/" if namespace else etcd_kv.DEFAULT_NAMESPACE)
    raise StoreUrlError(f"store URL {url!r}: unknown kind {scheme!r} (sqlite:// or etcd://)")

