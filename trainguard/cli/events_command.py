"""``trainguard events``: a run's recorded faults, decisions and recoveries, one line each.

Lines, not a table, so that ``--follow`` can print each event as it is recorded and piped output
keeps every character. ``--json`` writes one object per event, the envelope apart from the
event's own fields (docs/events.md): ``{"id", "time", "kind", "data"}``.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterable
from typing import Annotated, Any

import typer

from trainguard import clock as clocks
from trainguard import testing
from trainguard.cli import durations, runs
from trainguard.cli.run_command import DEFAULT_RUN_ROOT
from trainguard.job import events
from trainguard.store import api

__all__ = ["format_event", "parse_since", "show_events"]

FOLLOW_INTERVAL = 0.5  # seconds between looks at the store with --follow

_HIDDEN = {"job", "generation", "error_excerpt", "detected_at"}  # said elsewhere, or monotonic


def show_events(
    *,
    run_dir: runs.RunDir = None,
    run_root: runs.RunRoot = DEFAULT_RUN_ROOT,
    kind: Annotated[list[str] | None, typer.Option(help="Only events of this kind "
                                                   "(repeatable); without it, every kind but "
                                                   "the step-progress samples.")] = None,
    since: Annotated[str | None, typer.Option(help="Only events recorded since then: a "
                                              "duration back from now (90s, 10m, 2h, 1d) or "
                                              "an ISO time (local time unless it has a zone)."
                                              )] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the last N events.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help=(
        "Keep printing events as they are recorded, until the job finishes or Ctrl-C."))
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line: id, "
                                          "time (ISO-8601 UTC), kind, data.")] = False,
) -> None:
    """Show a run's recorded faults, decisions and recoveries."""
    kinds = tuple(kind or ())
    unknown = sorted(set(kinds) - set(events.known_kinds()))
    if unknown:
        raise typer.BadParameter(f"unknown kind {', '.join(map(repr, unknown))}; known kinds: "
                                 f"{', '.join(events.known_kinds())}", param_hint="--kind")
    if not kinds:  # the samples a report draws from: one every few seconds, noise here
        kinds = tuple(k for k in events.known_kinds() if k != events.StepProgress.KIND)
    start = parse_since(since, now=time.time()) if since is not None else None
    directory = runs.choose(run_dir, run_root).directory
    write = _json_line if as_json else format_event
    recorded = testing.recorded_events(directory, *kinds, since=start, limit=limit)
    if not as_json:
        typer.echo(f"{'time':19}  {'kind':22} {'gen':>3}  details")
    _echo(write, recorded)
    if not follow:
        return
    last = recorded[-1].id if recorded else _last_id(directory)
    try:
        while not _finished(recorded):
            alive = runs.is_running(directory)
            time.sleep(FOLLOW_INTERVAL)
            recorded = testing.recorded_events(directory, *kinds, after_id=last)
            _echo(write, recorded)
            last = recorded[-1].id if recorded else last
            if not recorded and not alive:
                return
    except KeyboardInterrupt:
        return


def _echo(write: Any, recorded: Iterable[api.StoredEvent]) -> None:
    for event in recorded:
        typer.echo(write(event))


def _last_id(directory: Any) -> int:
    newest = testing.recorded_events(directory, limit=1)
    return newest[0].id if newest else 0


def _finished(recorded: list[api.StoredEvent]) -> bool:
    return any(event.kind == events.JobFinished.KIND for event in recorded)


def _json_line(event: api.StoredEvent) -> str:
    return json.dumps({"id": event.id, "time": event.time, "kind": event.kind,
                       "data": event.data})


def format_event(event: api.StoredEvent) -> str:
    """One line: local wall-clock time, kind, generation, the other fields (durations rounded)."""
    moment = datetime.datetime.fromisoformat(event.time).astimezone()
    generation = event.data.get("generation")
    details = ", ".join(f"{key}={_value(key, value)}" for key, value in event.data.items()
                        if key not in _HIDDEN and value not in (None, "", []))
    return (f"{moment:%Y-%m-%d %H:%M:%S}  {event.kind:22} "
            f"{'' if generation is None else generation:>3}  {details}")


def _value(key: str, value: Any) -> str:
    if (key == "seconds" or key.endswith("_seconds")) and isinstance(value, int | float):
        return f"{value:.2f}s" if value < 60 else f"{value:.0f}s"
    return str(value)


def parse_since(text: str, *, now: float) -> str:
    """``--since`` as the store's ISO-8601 UTC: a duration before ``now`` (epoch seconds) or a
    time.

    Raises:
        typer.BadParameter: neither; the message shows both forms.
    """
    try:
        return clocks.iso_utc(now - durations.parse_duration(text))
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration (90s, 10m, 2h, 1d) nor an ISO time "
            "(2026-12-01T14:30 or 2026-12-01T14:30:00Z)", param_hint="--since") from None
    return clocks.iso_utc(moment.astimezone().timestamp())
