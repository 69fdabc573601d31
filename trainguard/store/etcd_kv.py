"""The :class:`~trainguard.store.kv.KeyValueStore` on etcd (v3 API, 3.4 or later), through the
``aetcd`` client (the ``etcd`` extra; docs/etcd-client.md says why that one).

Every key lives under a namespace (``/trainguard/`` unless the URL names another), so several
deployments can share one etcd. Several endpoints may be given: a call that finds its member
unreachable goes to the next one, and a watch broken by a member's loss resumes on another from
the revision after the last change it gave, so nothing is missed or given twice. A write is
retried on another member only when the first never reached a member (refused, or no route);
one that timed out raises :class:`~trainguard.store.kv.UnavailableError`, because it may have
been applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from trainguard.store import kv

if TYPE_CHECKING:
    import aetcd

__all__ = ["DEFAULT_NAMESPACE", "EtcdKeyValueStore"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_NAMESPACE = "/trainguard/"
CALL_TIMEOUT = 5.0
"""Seconds one call to one member may take."""
_CHANNEL_OPTIONS = (
    # A member back up is tried again within half a second: gRPC's default backoff grows to 120 s,
    # and a leader's lease (seconds) must be kept alive as soon as its store answers again.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    # Its own subchannels: a client made anew after a failure must not inherit the backoff of
    # the one it replaces through gRPC's process-wide pool.
    ("grpc.use_local_subchannel_pool", 1),
)
_LEADER_WAIT = 1.0
"""Seconds one read that checks for a live leader may take before it is asked again."""
_RETRY_PAUSE = 0.2
"""Seconds a broken watch waits before it asks the next member (a cluster electing a leader)."""


def _import_client() -> Any:
    try:
        import aetcd  # noqa: PLC0415  (the etcd extra: imported only when an etcd store opens)
    except ImportError as error:
        raise kv.UnavailableError(
            "an etcd:// store needs the etcd client: pip install 'trainguard[etcd]'") from error
    return aetcd


class EtcdKeyValueStore:
    def __init__(self, endpoints: Sequence[tuple[str, int]], *,
                 namespace: str = DEFAULT_NAMESPACE, timeout: float = CALL_TIMEOUT) -> None:
        """``endpoints``: (host, port) of the members' client URLs, tried in turn."""
        if not endpoints:
            raise ValueError("an etcd store needs at least one endpoint")
        self._aetcd = _import_client()
        self._endpoints = list(endpoints)
        self._namespace = namespace
        self._timeout = timeout
        self._clients: dict[int, aetcd.Client] = {}
        self._current = 0

    @property
    def endpoints(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self._endpoints)

    # --- reads --------------------------------------------------------------------------------

    async def get(self, key: str) -> kv.Entry | None:
        found = await self._call(lambda client: client.get(self._key(key)), safe=True)
        return None if found is None else self._entry(found)

    async def list(self, prefix: str) -> kv.Listing:
        start, end = self._range(prefix)
        found = await self._call(lambda client: client.get_range(start, end), safe=True)
        return kv.Listing(found.header.revision, [self._entry(entry) for entry in found])

    # --- writes -------------------------------------------------------------------------------

    async def put(self, key: str, value: bytes, *, expect: int | None = None,
                  lease: int = 0, fence: kv.Fence | None = None) -> int:
        name = self._key(key)

        async def write(client: aetcd.Client) -> int:
            if expect is None and fence is None:
                return int((await client.put(name, value, lease=lease or None)).header.revision)
            responses = await self._conditional(
                client, key, client.transactions.put(name, value, lease=lease or None),
                expect=expect, fence=fence)
            return int(responses[0].response_put.header.revision)

        try:
            return await self._call(write, safe=False)
        except self._client_error() as error:
            if "lease not found" in str(error):
                raise kv.LeaseLostError(f"lease {lease} has ended: {key!r} not written"
                                        ) from error
            raise

    async def delete(self, key: str, *, expect: int | None = None,
                     fence: kv.Fence | None = None) -> bool:
        name = self._key(key)

        async def remove(client: aetcd.Client) -> bool:
            responses = await self._conditional(client, key, client.transactions.delete(name),
                                                expect=expect, fence=fence)
            return bool(responses[0].response_delete_range.deleted)

        return await self._call(remove, safe=False)

    async def _conditional(self, client: aetcd.Client, key: str, operation: object, *,
                           expect: int | None, fence: kv.Fence | None) -> Sequence[Any]:
        """``operation`` in one transaction, if the fence and ``expect`` hold; the responses.

        Raises:
            kv.FencedError, kv.ConflictError: one does not (the fence is looked at first).
        """
        name = self._key(key)
        compare = []
        if fence is not None:
            compare.append(client.transactions.mod(self._key(fence.key)) == fence.revision)
        if expect is not None:
            compare.append(client.transactions.mod(name) == expect)
        looked_at = [client.transactions.get(name)]
        if fence is not None:
            looked_at.insert(0, client.transactions.get(self._key(fence.key)))
        succeeded, responses = await client.transaction(
            compare=compare, success=[operation], failure=looked_at)
        if succeeded:
            return tuple(responses)
        if fence is not None:
            fence_found = _found(responses[0])
            if fence_found != fence.revision:
                raise kv.FencedError(fence, fence_found)
        assert expect is not None
        raise kv.ConflictError(key, expect, _found(responses[-1]))

    async def grant(self, ttl: float) -> int:
        if not ttl > 0:
            raise ValueError(f"a lease's TTL must be > 0 seconds, got {ttl}")
        # etcd counts whole seconds (and raises a TTL below its minimum to that minimum).
        lease = await self._call(lambda client: client.lease(math.ceil(ttl)), safe=False)
        return int(lease.id)

    async def keep_alive(self, lease: int) -> None:
        reply = await self._call(lambda client: client.refresh_lease(lease), safe=True)
        if reply is None or reply.TTL <= 0:
            raise kv.LeaseLostError(f"lease {lease} has ended")

    async def revoke(self, lease: int) -> None:
        try:
            await self._call(lambda client: client.revoke_lease(lease), safe=True)
        except self._client_error() as error:
            if "lease not found" not in str(error):
                raise

    async def compact(self, revision: int) -> None:
        try:
            await self._call(lambda client: client.compact(revision), safe=True)
        except self._client_error() as error:
            # Already compacted there or later: what was asked holds.
            if "compacted" not in str(error):
                raise

    # --- watches ------------------------------------------------------------------------------

    async def watch(self, prefix: str, *, start_revision: int) -> AsyncIterator[kv.Change]:
        if start_revision < 1:
            raise ValueError(f"a watch starts at revision 1 or later, got {start_revision}")
        aetcd = self._aetcd
        start, end = self._range(prefix)
        following = start_revision
        failures = 0
        while True:
            client = await self._client()
            stream = None
            try:
                stream = await client.watch(start, range_end=end, start_revision=following,
                                            prev_kv=True)
                failures = 0
                async for event in stream:
                    change = self._change(event)
                    following = change.revision + 1
                    yield change
                return  # closed from our side
            except aetcd.RevisionCompactedError as error:
                raise kv.CompactedError(
                    f"changes from revision {following} are compacted (the store keeps those "
                    f"from {error.compacted_revision})") from error
            except self._unreachable() as error:
                failures += 1
                if failures > len(self._endpoints):
                    raise kv.UnavailableError(f"no etcd member of {self.endpoints} answered "
                                              f"the watch: {error}") from error
                logger.info("etcd watch of %r broke (%s); resuming from revision %d on the "
                            "next member", prefix, error, following)
                await self._drop(client)
                await asyncio.sleep(_RETRY_PAUSE)
            finally:
                if stream is not None:
                    with contextlib.suppress(Exception):
                        await stream.cancel()

    async def close(self) -> None:
        for client in list(self._clients.values()):
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()

    # --- the members --------------------------------------------------------------------------

    async def _client(self) -> aetcd.Client:
        index = self._current
        client = self._clients.get(index)
        if client is None:
            host, port = self._endpoints[index]
            client = self._aetcd.Client(
                host=host, port=port, timeout=self._timeout,
                connect_wait_timeout=self._timeout, options=dict(_CHANNEL_OPTIONS))
            self._clients[index] = client
        return client

    async def _drop(self, client: aetcd.Client) -> None:
        """The member of ``client`` failed: the next one is asked from now on."""
        current = self._clients.get(self._current)
        if current is None or current is not client:
            return  # another call has moved on already
        del self._clients[self._current]
        self._current = (self._current + 1) % len(self._endpoints)
        with contextlib.suppress(Exception):
            await current.close()

    async def _call(self, operation: Callable[[aetcd.Client], Awaitable[T]], *,
                    safe: bool) -> T:
        """``operation`` on the current member, then each other one while it is unreachable.
        ``safe``: it may be repeated even when a member may have applied it (reads, leases)."""
        aetcd = self._aetcd
        last: Exception | None = None
        moved = False
        for _ in range(len(self._endpoints)):
            client = await self._client()
            try:
                if moved and not safe:
                    await self._led(client)
                return await operation(client)
            except self._unreachable() as error:
                last = error
                timed_out = isinstance(error, aetcd.ConnectionTimeoutError)
                await self._drop(client)
                moved = True
                if timed_out and not safe:
                    break
        raise kv.UnavailableError(f"no etcd member of {self.endpoints} answered: {last}")

    async def _led(self, client: aetcd.Client) -> None:
        """Until ``client``'s member serves a linearizable read, which only a live leader
        allows. A write that a member forwards to a leader that has just died is lost, and the
        call hangs until its deadline, after which it cannot be sent again (it may have been
        applied); so after a member failed, a write goes to the next one only once that one has
        a leader again. Reads may be repeated: each waits a second at most, within the call's
        timeout.

        Raises:
            TimeoutError: no leader within the call's timeout.
            aetcd.ConnectionFailedError: the member does not answer at all.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            try:
                await asyncio.wait_for(client.get(self._key("")), min(
                    _LEADER_WAIT, max(0.0, deadline - loop.time())))
                return
            except (TimeoutError, self._aetcd.ConnectionTimeoutError):
                if loop.time() >= deadline:
                    raise TimeoutError(f"no etcd leader within {self._timeout:g} s") from None

    def _unreachable(self) -> tuple[type[Exception], ...]:
        aetcd = self._aetcd
        return (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError,
                aetcd.WatchTimeoutError, TimeoutError)

    def _client_error(self) -> type[Exception]:
        error: type[Exception] = self._aetcd.ClientError
        return error

    # --- names and values ---------------------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return (self._namespace + key).encode()

    def _range(self, prefix: str) -> tuple[bytes, bytes]:
        whole = self._namespace + prefix
        end = kv.prefix_end(whole)
        return whole.encode(), (end.encode() if end is not None else b"\0")

    def _entry(self, found: aetcd.rtypes.KeyValue) -> kv.Entry:
        return kv.Entry(found.key.decode()[len(self._namespace):], bytes(found.value),
                        found.create_revision, found.mod_revision, found.version, found.lease)

    def _change(self, event: aetcd.rtypes.Event) -> kv.Change:
        revision = event.kv.mod_revision
        if event.kind == "PUT":
            return kv.Change(kv.ChangeKind.PUT, self._entry(event.kv), revision)
        # A delete carries only the key and its revision; the entry as it was comes with it.
        before = event.prev_kv if event.prev_kv is not None else event.kv
        entry = self._entry(before)
        return kv.Change(kv.ChangeKind.DELETE, kv.Entry(
            entry.key, entry.value, entry.create_revision, revision, entry.version,
            entry.lease), revision)


def _found(response: object) -> int:
    """A key's last change from a failed transaction's ``get`` (0: absent)."""
    assert isinstance(response, list)
    return int(response[0][1].mod_revision) if response else 0
