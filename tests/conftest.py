"""A real etcd for the tests, started once per session on loopback (each test works
under a namespace of its own). Where no etcd is installed, its tests are skipped, except in CI
(``CI`` set), where ``make test`` has installed it and its absence is a failure."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from trainguard.testing import etcd_cluster

_namespaces = itertools.count()


def unavailable(reason: str) -> None:
    """A prerequisite of the test (root, a system tool or library) is missing: skip it on a
    developer's machine, but fail under CI (``CI`` set), which runs as root with every tool
    ``make test`` installs, so that a test that stopped running cannot pass unseen.

    Raises:
        pytest.skip.Exception, or pytest.fail.Exception under CI.
    """
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but it {reason}")
    pytest.skip(reason)


def need_etcd() -> None:
    if etcd_cluster.etcd_binary() is None:
        unavailable("finds no etcd binary (make test installs etcd-server as root)")


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[etcd_cluster.EtcdCluster]:
    need_etcd()
    with etcd_cluster.EtcdCluster(tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


@pytest.fixture
def etcd_url(etcd: etcd_cluster.EtcdCluster) -> str:
    """The session's etcd, under a namespace no other test uses."""
    return etcd.url(f"test-{os.getpid()}-{next(_namespaces)}")
