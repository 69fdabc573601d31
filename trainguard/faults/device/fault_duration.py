"""How long a fault has lasted, and how long it has been gone: the ``FaultDuration`` state
machine of one (event id, device) (NOTES §2.3).

A track is healthy or timed out. Its queue holds the occur and recover events not yet judged. At
each :meth:`DurationTrack.advance`, as in the original:

1. the queue is sorted by time, and consecutive events with the same assertion are merged (the
   first is kept);
2. a leading event that repeats the state is dropped (a recover while healthy, an occur while
   timed out);
3. the queue is walked in pairs (0, 1), (2, 3), ...: while healthy a pair is an outage, judged
   against FaultTimeout; while timed out it is a recovery, judged against RecoverTimeout. Only a
   duration *above* the threshold flips the state; the flip's alarm time is the pair's start plus
   the threshold. An unpaired last event is judged by how long it has lasted until ``now``.
   When nothing flips, the last duration is recorded and only an unpaired last event is kept.

Fixed here: after a flip *to* timeout the original keeps the whole queue and stops; its next
evaluation drops only the first event and re-reads the gap between older outages as a recovery.
We drop the events the flip consumed and go on judging the rest, as the original does after a
flip back to healthy. With an evaluation after every event both give the same states; with
sparser evaluations ours does not judge an event twice. And every flip is returned, where the
original compares the state before and after one evaluation, so that a recovery followed by a
new timeout in one evaluation went unseen by ``FaultFrequency``.

``once`` notifications have no duration and are not queued (the caller's job): the pair walk
goes by position and would read one as an occur or a recover.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import NamedTuple

from trainguard.faults.device.device_events import Assertion, DeviceFaultEvent

__all__ = ["DurationTrack", "Flip"]

_time = attrgetter("time")


class Flip(NamedTuple):
    timeout: bool  # True: healthy -> timed out; False: timed out -> healthy
    alarm_time: float  # seconds: the start of the outage or recovery plus its threshold


_NO_FLIPS: tuple[Flip, ...] = ()


class DurationTrack:
    """The original's ``FaultDurationData`` for one (event id, device)."""

    __slots__ = ("_in_order", "_queue", "alarm_time", "fault_duration", "recover_duration",
                 "timeout")

    def __init__(self) -> None:
        self.timeout = False
        self.fault_duration = 0.0
        """Seconds the last judged outage lasted."""
        self.recover_duration = 0.0
        """Seconds the last judged recovery lasted."""
        self.alarm_time = 0.0
        """When the last flip happened (seconds)."""
        self._queue: list[DeviceFaultEvent] = []
        self._in_order = True

    @property
    def pending(self) -> bool:
        """Whether events wait to be judged: the state may change as time passes."""
        return bool(self._queue)

    def add(self, event: DeviceFaultEvent) -> None:
        """Queue an ``occur`` or ``recover`` event."""
        queue = self._queue
        if queue and event.time < queue[-1].time:
            self._in_order = False
        queue.append(event)

    def advance(self, now: float, *, fault_timeout: float, recover_timeout: float
                ) -> Sequence[Flip]:
        """Judge the queue at ``now`` (seconds); the flips, oldest first."""
        queue = self._queue
        if not queue:
            return _NO_FLIPS
        if not self._in_order:
            queue.sort(key=_time)  # stable: events at one time keep their order
            self._in_order = True
        queue = self._queue = _merged(queue)
        if (queue[0].assertion is Assertion.OCCUR) == self.timeout:
            del queue[0]
        flips: list[Flip] = []
        while queue:
            to_timeout = not self.timeout
            threshold = fault_timeout if to_timeout else recover_timeout
            index = _first_above(queue, threshold)
            last = len(queue) - 1
            if index >= 0:
                duration = queue[index + 1].time - queue[index].time
            elif last % 2 == 1:  # every pair within the threshold: all judged
                self._record(to_timeout, queue[last].time - queue[last - 1].time)
                queue.clear()
                break
            else:  # the unpaired last event has lasted until now
                index, duration = last, now - queue[last].time
                if duration <= threshold:
                    self._record(to_timeout, duration)
                    del queue[:last]
                    break
            self.timeout = to_timeout
            self._record(to_timeout, duration)
            self.alarm_time = queue[index].time + threshold
            flips.append(Flip(to_timeout, self.alarm_time))
            del queue[:index + 1]
        return flips or _NO_FLIPS

    def _record(self, timeout: bool, duration: float) -> None:
        if timeout:
            self.fault_duration = duration
        else:
            self.recover_duration = duration


def _merged(queue: list[DeviceFaultEvent]) -> list[DeviceFaultEvent]:
    """``queue`` without events repeating the previous one's assertion."""
    for index in range(1, len(queue)):
        if queue[index].assertion is queue[index - 1].assertion:
            break
    else:
        return queue
    merged = [queue[0]]
    for event in queue:
        if event.assertion is not merged[-1].assertion:
            merged.append(event)
    return merged


def _first_above(queue: list[DeviceFaultEvent], threshold: float) -> int:
    """The start index of the first pair lasting more than ``threshold`` seconds; -1 if none."""
    for index in range(0, len(queue) - 1, 2):
        if queue[index + 1].time - queue[index].time > threshold:
            return index
    return -1
