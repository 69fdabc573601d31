"""The etcd backend beyond the contract: a cluster that loses a member, and store URLs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import need_etcd
from trainguard.store import kv, sqlite_kv, urls
from trainguard.testing import etcd_cluster


def test_a_cluster_that_loses_a_member_loses_no_write_and_no_change(tmp_path: Path) -> None:
    """The client's member is killed between writes and while a watch follows: the writes go
    to another member, and the watch resumes there without a gap or a repeat."""
    need_etcd()

    async def scenario(cluster: etcd_cluster.EtcdCluster) -> tuple[list[str], list[str]]:
        store = urls.open_store(cluster.url("failover"))
        try:
            start = await store.put("jobs/0", b"0")
            changes = aiter(store.watch("jobs/", start_revision=start))
            seen = [(await anext(changes)).entry.key]
            for number in range(1, 20):
                if number == 5:
                    cluster.kill_member(cluster.members[0])  # the member the client is on
                await store.put(f"jobs/{number}", str(number).encode())
            while len(seen) < 20:
                seen.append((await asyncio.wait_for(anext(changes), 20)).entry.key)
            listed = [entry.key for entry in (await store.list("jobs/")).entries]
            assert store._current != 0, "the client moved to another member"  # type: ignore[attr-defined]
            return seen, listed
        finally:
            await store.close()

    with etcd_cluster.EtcdCluster(tmp_path, size=3) as cluster:
        seen, listed = asyncio.run(asyncio.wait_for(scenario(cluster), 60))
    written = [f"jobs/{number}" for number in range(20)]
    assert seen == written
    assert listed == sorted(written)


def test_a_store_with_no_member_answering_says_so(tmp_path: Path) -> None:
    need_etcd()

    async def scenario(url: str) -> str:
        store = urls.open_store(url)
        try:
            with pytest.raises(kv.UnavailableError) as caught:
                await store.get("a")
            return str(caught.value)
        finally:
            await store.close()

    cluster = etcd_cluster.EtcdCluster(tmp_path)  # never started: nothing listens there
    message = asyncio.run(asyncio.wait_for(scenario(cluster.url()), 60))
    assert message.startswith(f"no etcd member of {cluster.members[0].endpoint} answered")


@pytest.mark.parametrize(("url", "wrong"), [
    ("etcd://", "names no etcd member"),
    ("etcd://host", "'host' is no HOST:PORT"),
    ("etcd://a:1,b:x", "'b:x' is no HOST:PORT"),
    ("etcd://a:70000", "'a:70000' is no HOST:PORT"),
    ("etcd://a:1/../x", "namespace '../x'"),
    ("sqlite://", "names no file"),
    ("redis://a:1", "unknown kind 'redis'"),
])
def test_a_bad_store_url_is_refused_naming_its_wrong_part(url: str, wrong: str) -> None:
    with pytest.raises(urls.StoreUrlError, match=wrong.replace(".", r"\.")):
        urls.open_store(url)


def test_store_urls_name_files_and_namespaces(tmp_path: Path) -> None:
    store = urls.open_store(f"sqlite://{tmp_path}/a/kv.db")
    assert isinstance(store, sqlite_kv.SqliteKeyValueStore)
    asyncio.run(store.close())
    assert (tmp_path / "a" / "kv.db").exists()
    assert isinstance(urls.open_store("sqlite://:memory:"), sqlite_kv.SqliteKeyValueStore)
    etcd = urls.open_store("etcd://10.0.0.1:2379,[::1]:2380/team/a")
    assert etcd._endpoints == [("10.0.0.1", 2379), ("::1", 2380)]  # type: ignore[attr-defined]
    assert etcd._namespace == "/team/a/"  # type: ignore[attr-defined]
