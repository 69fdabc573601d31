"""One call that logs an event, appends it to the store and tells the listeners (the console)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainguard import clock as clocks
from trainguard.job import events
from trainguard.store import api

__all__ = ["EventRecorder"]

logger = logging.getLogger(__name__)

Listener = Callable[[events.Event], None]


class EventRecorder:
    def __init__(self, store: api.StateStore, clock: clocks.Clock, *,
                 mirror: Callable[[api.StoredEvent], None] | None = None) -> None:
        """``mirror``: where each event is kept too, as stored (a cluster job's events, for
        the controller that takes it over)."""
        self._store = store
        self._clock = clock
        self._mirror = mirror
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def record(self, event: events.Event) -> int:
        context = {key: getattr(event, key) for key in ("job", "generation", "rank")
                   if hasattr(event, key)}
        logger.info("%s", event.summary(), extra=context)
        data, time = event.to_data(), clocks.iso_utc(self._clock.wall())
        event_id = self._store.append_event(event.KIND, data, time=time)
        if self._mirror is not None:
            self._mirror(api.StoredEvent(event_id, time, event.KIND, data))
        for listener in self._listeners:
            listener(event)
        return event_id

    def publish(self, name: str, data: dict[str, Any]) -> None:
        """Create or replace a document (the original's ConfigMaps; ``job-status-<job>``)."""
        self._store.put_document(name, data, time=clocks.iso_utc(self._clock.wall()))
