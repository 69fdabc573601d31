"""trainguard's own ``run`` options from a TOML file, and the ``TRAINGUARD_*`` environment checked.

The file holds top-level keys named as the flags without their dashes (``heartbeat-floor = "2s"``,
``recover-strategy = ["retry", "restart-job"]``, ``run-root = "/data/runs"``); values take the
flags' forms, durations with units included. Precedence: default < file < ``TRAINGUARD_*``
environment < flag. A key or a ``TRAINGUARD_*`` variable that trainguard does not know is an
error that names it and the closest known one: a misspelling would otherwise be ignored in
silence, and the job would run with a setting nobody asked for.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

__all__ = ["WORKER_VARIABLES", "ConfigFileError", "check_environment", "load"]

WORKER_VARIABLES = frozenset({
    "TRAINGUARD_AGENT_SOCKET",  # set by the agent for each worker
    "TRAINGUARD_DEVICE",
    "TRAINGUARD_GENERATION",
    "TRAINGUARD_WORKER_SECRET",
    "TRAINGUARD_STARTING_PROCESSES",  # how many processes the agent started with the worker
    "TRAINGUARD_TRACEBACKS",  # where the standby process files distinct tracebacks
    "TRAINGUARD_CHECKPOINT_EVERY",  # read by a Session outside `trainguard run`
    "TRAINGUARD_SNAPSHOT_SHARES",  # read by a Session: snapshot replicated state as shares
    "TRAINGUARD_SNAPSHOT_COPY_BEHIND",  # read by a Session: copy optimizer tensors behind
    "TRAINGUARD_READ_AHEAD",  # read by a Session: read the restore on a thread of its own
})
"""``TRAINGUARD_*`` variables that are not ``run`` options: trainguard sets them for its workers,
or the training side reads them."""


class ConfigFileError(ValueError):
    """A configuration file or variable that cannot be used; the message names it."""


def _closest(name: str, known: Collection[str]) -> str:
    match = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def load(path: Path, *, known: Collection[str]) -> dict[str, Any]:
    """The file's keys and values.

    Raises:
        ConfigFileError: the file cannot be read, is not TOML, or has a key not in ``known``.
    """
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except OSError as error:
        raise ConfigFileError(f"--config {str(path)!r}: cannot read it ({error.strerror})"
                              ) from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"--config {str(path)!r}: not TOML: {error}") from error
    for key, value in data.items():
        if key not in known:
            raise ConfigFileError(f"{path}: unknown key {key!r}{_closest(key, known)}; keys are "
                                  "trainguard run options without the dashes")
        if isinstance(value, dict):
            raise ConfigFileError(f"{path}: {key!r} is a table; give it a value as its flag "
                                  "takes")
    return data


def check_environment(environ: Mapping[str, str], *, known: Collection[str]) -> None:
    """Raises: ConfigFileError for a ``TRAINGUARD_*`` variable trainguard does not know."""
    everything = set(known) | WORKER_VARIABLES
    for name in sorted(environ):
        if name.startswith("TRAINGUARD_") and name not in everything:
            raise ConfigFileError(f"environment variable {name} is not one of trainguard's"
                                  f"{_closest(name, everything)}; unset it or fix its name")
