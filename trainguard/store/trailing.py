"""Writes that trail the state they record, so that the store's pauses never hold up training.

Whoever owns some state sets each key's newest value (or None: delete it) as it changes;
:meth:`TrailingWriter.run` writes them, in the order first set, each key's newest value only.
While the store cannot be reached the values wait (a warning says so once, and another when
it answers again), and a value set meanwhile replaces the one waiting: the store catches up
with the newest state, not with every step in between. A fenced writer (a controller's,
fenced by its leader key) stops for good once its fence has moved: :attr:`deposed` is set.
"""

from __future__ import annotations

import asyncio
import logging

from trainguard.store import kv

__all__ = ["RETRY_SECONDS", "TrailingWriter"]

logger = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""Pause between attempts while the store cannot be reached."""


class TrailingWriter:
    def __init__(self, store: kv.KeyValueStore, *, what: str,
                 fence: kv.Fence | None = None) -> None:
        """``what``: what the values are, for the warnings (``"the device fault history"``)."""
        self._store = store
        self._what = what
        self.fence = fence
        self._waiting: dict[str, tuple[int, bytes | None]] = {}
        """Key -> (the change's number, the value): a write clears a key only if no newer
        change came while it was under way."""
        self._changes = 0
        self._set = asyncio.Event()
        self._written = asyncio.Event()
        self._unreachable_since: float | None = None
        self.deposed = asyncio.Event()

    def set(self, key: str, value: bytes | None) -> None:
        self._changes += 1
        self._waiting[key] = (self._changes, value)
        self._set.set()
        self._written.clear()

    @property
    def unwritten(self) -> int:
        """Keys whose newest value the store does not hold yet."""
        return len(self._waiting)

    async def run(self) -> None:
        """Write what is set, until cancelled or deposed."""
        while not self.deposed.is_set():
            await self._set.wait()
            self._set.clear()
            await self._write(retry=True)

    async def flush(self) -> None:
        """Write what is set now, once.

        Raises:
            kv.UnavailableError: the store cannot be reached (what is set stays set).
            kv.FencedError: the fence has moved.
        """
        await self._write(retry=False)

    async def settle(self, timeout: float) -> bool:
        """Until everything set is written (by :meth:`run`), for at most ``timeout`` seconds;
        whether it was."""
        if not self._waiting:
            return True
        try:
            await asyncio.wait_for(self._written.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _write(self, *, retry: bool) -> None:
        for key in list(self._waiting):
            while (waiting := self._waiting.get(key)) is not None:
                change, value = waiting
                try:
                    if value is None:
                        await self._store.delete(key, fence=self.fence)
                    else:
                        await self._store.put(key, value, fence=self.fence)
                except kv.UnavailableError as error:
                    if not retry:
                        raise
                    self._say_unreachable(error)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                except kv.FencedError as error:
                    if not self.deposed.is_set():
                        logger.error("%s is no longer written: %s", self._what, error)
                        self.deposed.set()
                    if not retry:
                        raise
                    return
                self._say_reachable()
                if self._waiting.get(key, (None, None))[0] == change:
                    del self._waiting[key]
        if not self._waiting:
            self._written.set()

    def _say_unreachable(self, error: Exception) -> None:
        if self._unreachable_since is None:
            self._unreachable_since = asyncio.get_running_loop().time()
            logger.warning("the store cannot be reached (%s): %s waits (%d keys), and is "
                           "written when it answers", error, self._what, len(self._waiting))

    def _say_reachable(self) -> None:
        if self._unreachable_since is not None:
            waited = asyncio.get_running_loop().time() - self._unreachable_since
            self._unreachable_since = None
            logger.warning("the store answers again after %.1f s: %s written", waited,
                           self._what)
