"""A worker's traceback as its author reads it: without the frames of trainguard's own machinery
(the standby process that forked it, the session around its steps) and of :mod:`runpy`, which
runs the script, and printed once per job however often the same failure repeats.

The same failure is the same exception types raised through the same frames (file, line,
function); messages may differ (ports, pids). The first process to print a traceback saves it
as ``<digest>.txt`` in the job's traceback directory; later ones print its last line and that
file's path instead. Standard library only: the standby process imports it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["format_exception", "install"]

_PACKAGE = Path(__file__).resolve().parent
_OWN = tuple(str(_PACKAGE / part) + os.sep for part in ("agent", "train"))
"""Where trainguard's own frames come from (the demo script's are the user's)."""


def _own(frame: traceback.FrameSummary) -> bool:
    name = frame.filename
    if name in ("<frozen runpy>", getattr(sys.modules.get("runpy"), "__file__", None)):
        return True
    return os.path.realpath(name).startswith(_OWN)


def _trimmed(kind: type[BaseException], error: BaseException,
             trace: TracebackType | None) -> traceback.TracebackException:
    """The exception with its chain, each stack without our frames (unless nothing else is
    left: then the fault is ours, and every frame stays)."""
    summary = traceback.TracebackException(kind, error, trace)
    seen: set[int] = set()
    pending = [summary]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        theirs = [frame for frame in current.stack if not _own(frame)]
        if theirs:
            current.stack = traceback.StackSummary.from_list(theirs)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return summary


def format_exception(kind: type[BaseException], error: BaseException,
                     trace: TracebackType | None) -> str:
    """The traceback text, without trainguard's and runpy's frames."""
    return "".join(_trimmed(kind, error, trace).format())


def _digest(summary: traceback.TracebackException) -> str:
    """Exception types and frames, not messages."""
    parts: list[str] = []
    current: traceback.TracebackException | None = summary
    while current is not None and len(parts) < 64:
        parts.append(getattr(current, "exc_type_str", None) or str(current.exc_type))
        parts.extend(f"{f.filename}:{f.lineno}:{f.name}" for f in current.stack)
        current = current.__cause__ or current.__context__
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def install(directory: str | None) -> Callable[..., None]:
    """Print uncaught exceptions trimmed; with a ``directory``, each distinct one once (later
    ones as their last line and where the full text is). Returns the hook."""

    def print_once(kind: type[BaseException], error: BaseException,
                   trace: TracebackType | None) -> None:
        summary = _trimmed(kind, error, trace)
        text = "".join(summary.format())
        if directory:
            path = Path(directory) / f"{_digest(summary)}.txt"
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with open(path, "x") as saved:
                    saved.write(text)
            except FileExistsError:
                last = text.rstrip("\n").splitlines()[-1]
                text = f"{last}\n(the same traceback as printed before; saved in {path})\n"
            except OSError:
                pass  # cannot record it: print it in full, as Python would
        sys.stderr.write(text)
        sys.stderr.flush()

    sys.excepthook = print_once
    return print_once
