"""How a benchmark's JSON result reads in results/SUMMARY.md: loading it, and the phrases
every section uses (its command, a verdict, a duration)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import common

__all__ = ["command", "load", "seconds", "verdict"]


def load(name: str) -> dict[str, Any] | None:
    path = common.RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def command(result: dict[str, Any]) -> str:
    argv = result["machine"]["argv"]
    return " ".join(["python -m benchmarks." + Path(argv[0]).stem, *argv[1:]])


def verdict(ok: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[ok]
