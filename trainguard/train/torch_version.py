"""The torch versions trainguard is tested with, checked once when a session starts.

Process-level recovery leans on torch internals that change between releases without notice:
how gloo holds its connections (:mod:`trainguard.train.communicator`) and the registry of process
groups (:mod:`trainguard.train.process_group`). Outside the tested range trainguard still runs,
and says so; ``pyproject.toml``'s ``torch`` extra states the same range (a test keeps them equal).
"""

from __future__ import annotations

import logging
import re

__all__ = ["TESTED", "untested"]

logger = logging.getLogger(__name__)

TESTED = ((2, 13), (2, 14))
"""Tested torch releases: from the first (major, minor) up to, not including, the second."""


def untested(version: str) -> str | None:
    """What to tell the user when ``version`` (``torch.__version__``) is outside :data:`TESTED`;
    None inside it."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match and TESTED[0] <= (int(match[1]), int(match[2])) < TESTED[1]:
        return None
    (low_major, low_minor), (high_major, high_minor) = TESTED
    return (f"torch {version} is outside the range trainguard is tested with "
            f"(>={low_major}.{low_minor},<{high_major}.{high_minor}): recovery that keeps "
            "processes alive (session.run) relies on torch internals and may fail; job-level "
            "restarts and checkpoints do not. Install a tested torch: "
            "pip install 'trainguard[torch]'")
