"""Log output for the command line: text for people, JSON lines for machines.

Components log through ``logging.LoggerAdapter`` with context fields (job, node, generation,
rank); here they become a ``[job=... rank=...]`` prefix, or fields of the JSON object.
"""

from __future__ import annotations

import enum
import json
import logging

from trainguard import clock as clocks

__all__ = ["LogFormat", "configure"]

CONTEXT = ("job", "node", "generation", "rank")


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


def _context(record: logging.LogRecord) -> dict[str, object]:
    return {key: getattr(record, key) for key in CONTEXT if hasattr(record, key)}


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = " ".join(f"{key}={value}" for key, value in _context(record).items())
        line = (f"trainguard {record.levelname} {record.name}: "
                f"{f'[{context}] ' if context else ''}{record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, object] = {
            "time": clocks.iso_utc(record.created), "level": record.levelname,
            "logger": record.name, "message": record.getMessage(), **_context(record)}
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


def configure(level: str, log_format: LogFormat) -> None:
    """Raises: ValueError for a level logging does not know (the message names it)."""
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter() if log_format is LogFormat.JSON else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
