"""What a controller that takes over a running job needs from its predecessor: the job's record
in the store (``jobs/<job>``), written as the job's controller decides, and the events it
recorded (``job-events/<job>/<id>``), so that one controller's run root holds them all.

It holds what the agents cannot say: the restarts and retries already spent, the devices
isolated, the step the job had reached, the crash loop counted so far, and whether a decision
was being carried out (so the successor does not decide it again). The generation the hosts
run, and their state, the successor learns from the hosts themselves when they register with
it again.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from trainguard.store import api, kv, trailing

__all__ = ["EVENTS_PREFIX", "PREFIX", "SETTLE_SECONDS", "JobJournal", "JobRecord", "load"]

logger = logging.getLogger(__name__)

PREFIX = "jobs/"
EVENTS_PREFIX = "job-events/"
SETTLE_SECONDS = 1.0
"""Seconds a decision waits for its record to reach the store before it is carried out
anyway (a store that cannot be reached must not stop a recovery; it is written later)."""


@dataclasses.dataclass(frozen=True)
class JobRecord:
    job: str
    generation: int
    """The generation formed last; or, while ``recovering``, the one whose fault is being
    recovered."""
    restarts_used: int = 0
    retries_used: int = 0
    isolated: tuple[str, ...] = ()
    """Devices taken out of use for the rest of the job."""
    resume_step: int = 0
    repeated: tuple[object, ...] | None = None
    """The last failure before any step completed, as the controller compares failures (rank,
    kind, exit status, the error's last line); None when a step completed since."""
    repeats: int = 0
    """How many times in a row ``repeated`` came: a crash loop's count so far, so that a
    successor does not start it again from nothing."""
    recovering: bool = False
    """A decision is being carried out: its restart is spent, and a successor that finds the
    hosts still in ``generation`` restarts them without spending another."""

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes, *, key: str) -> JobRecord:
        """Raises: ValueError naming the key and what is wrong."""
        try:
            fields = json.loads(data)
            if not isinstance(fields, dict):
                raise TypeError(f"an object was expected, got {type(fields).__name__}")
            fields["isolated"] = tuple(fields.get("isolated", ()))
            repeated = fields.get("repeated")
            if repeated is not None:
                if not isinstance(repeated, list):
                    raise TypeError("repeated must be a list or null")
                fields["repeated"] = tuple(repeated)
            record = cls(**fields)
            for name in ("generation", "restarts_used", "retries_used", "resume_step",
                         "repeats"):
                if not isinstance(getattr(record, name), int):
                    raise TypeError(f"{name} must be an integer")
        except (ValueError, TypeError) as error:
            raise ValueError(f"the job record {key} is unreadable: {error}") from error
        return record


async def load(store: kv.KeyValueStore, job: str) -> JobRecord | None:
    """The job's record, if a controller left one.

    Raises:
        ValueError: it is unreadable (the message names it).
        kv.UnavailableError: the store cannot be read.
    """
    entry = await store.get(PREFIX + job)
    return JobRecord.from_json(entry.value, key=entry.key) if entry is not None else None


class JobJournal:
    """The job's record and events as its controller changes them, written through trailing
    writes: the job's controller never waits for the store longer than
    :data:`SETTLE_SECONDS`."""

    def __init__(self, writer: trailing.TrailingWriter, job: str) -> None:
        self._writer = writer
        self.job = job
        self._key = PREFIX + job
        self._events = f"{EVENTS_PREFIX}{job}/"
        self._event_keys: list[str] = []

    def note(self, record: JobRecord | None) -> None:
        """None: the job is over, its record and its events go."""
        self._writer.set(self._key, record.to_json() if record is not None else None)
        if record is None:
            for key in self._event_keys:
                self._writer.set(key, None)
            self._event_keys.clear()

    def event(self, event: api.StoredEvent) -> None:
        """Keep ``event`` for a controller that takes the job over."""
        key = f"{self._events}{event.id:012d}"
        self._event_keys.append(key)
        self._writer.set(key, json.dumps(
            {"time": event.time, "kind": event.kind, "data": event.data}).encode())

    async def take_events(self, store: kv.KeyValueStore) -> list[api.StoredEvent]:
        """The events the job's earlier controllers kept, oldest first (an unreadable one is
        passed over, saying so); they go with the job's own when it ends.

        Raises:
            kv.UnavailableError: the store cannot be read.
        """
        taken = []
        for entry in (await store.list(self._events)).entries:
            self._event_keys.append(entry.key)
            try:
                fields = json.loads(entry.value)
                taken.append(api.StoredEvent(int(entry.key.rsplit("/", 1)[1]), fields["time"],
                                             fields["kind"], dict(fields["data"])))
            except (ValueError, TypeError, KeyError) as error:
                logger.warning("the job event %s is unreadable, passed over: %s", entry.key,
                               error)
        return sorted(taken, key=lambda event: event.id)

    async def settle(self) -> None:
        await self._writer.settle(SETTLE_SECONDS)
