"""Settings that a script passes as arguments and ``trainguard run`` (or the user) overrides
through the environment: the variable, when set, wins, as an option's variable does over its
default in the launcher's settings."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["flag"]


def flag(variable: str, argument: bool | None, *,
         environ: Mapping[str, str] = os.environ) -> bool | None:
    """``variable`` (``0`` or ``1``) when it is set, else the script's ``argument``.

    Raises:
        ValueError: the variable is set to something else; the message names it.
    """
    value = environ.get(variable)
    if value is None:
        return argument
    if value not in ("0", "1"):
        raise ValueError(f"{variable} must be 0 or 1, got {value!r}")
    return value == "1"
