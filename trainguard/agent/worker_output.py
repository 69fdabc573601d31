"""Where a worker's stdout and stderr go: the console, a log file, or both (torchrun's rules).

Per stream and local rank, ``redirect`` sends output only to the log file and ``tee`` to the file
and the console; otherwise it goes to the console, unless ``local_ranks_filter`` names other ranks.
Log files are ``<log_dir>/<run_id>/attempt_<generation>/<local_rank>/{stdout,stderr}.log`` as with
torchrun. Teed lines carry torchrun's header on the console, ``[<role><local_rank>]:`` (e.g.
``[default0]:``), so interleaved ranks stay apart; a line prefix template replaces it. The end of
stderr is always kept in memory for the failure report.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import os
import string
import sys
from pathlib import Path
from typing import BinaryIO

from trainguard import owner_only

__all__ = ["OutputSettings", "Std", "StreamPump", "parse_std"]

_TAIL_BYTES = 16 * 1024


class Std(enum.IntFlag):
    """torchrun's ``--redirects``/``--tee`` values: 0 none, 1 stdout, 2 stderr, 3 both."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3


def parse_std(value: str, *, flag: str) -> dict[int, Std] | Std:
    """``"3"`` -> ``Std.ALL`` for every rank; ``"0:1,1:2"`` -> per local rank.

    Raises:
        ValueError: naming ``flag`` and the bad part.
    """
    def one(text: str) -> Std:
        try:
            number = int(text)
            if number not in range(4):
                raise ValueError(number)
            return Std(number)
        except ValueError:
            raise ValueError(
                f"{flag}: {text!r} is not one of 0 (none), 1 (stdout), 2 (stderr), 3 (both)"
            ) from None

    if ":" not in value:
        return one(value.strip())
    per_rank: dict[int, Std] = {}
    for part in value.split(","):
        rank, _, std = part.partition(":")
        try:
            per_rank[int(rank)] = one(std)
        except ValueError as error:
            raise ValueError(f"{flag}: bad entry {part!r} ({error})") from None
    return per_rank


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    redirects: dict[int, Std] | Std = Std.NONE
    tee: dict[int, Std] | Std = Std.NONE
    log_dir: Path | None = None
    local_ranks_filter: frozenset[int] | None = None
    line_prefix_template: str | None = None
    """``$rank``, ``$local_rank`` and ``$role_name`` are replaced (torchrun's
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)."""

    def std_for(self, which: dict[int, Std] | Std, local_rank: int) -> Std:
        if isinstance(which, Std):
            return which
        return which.get(local_rank, Std.NONE)


class StreamPump(asyncio.Protocol):
    """Reads one worker stream and forwards it; keeps the stream's end for error reports."""

    def __init__(
        self,
        *,
        console: BinaryIO | None,
        log_file: Path | None,
        prefix: str,
    ) -> None:
        self._console = console
        self._file: BinaryIO | None = None
        if log_file is not None:
            owner_only.make_dir(log_file.parent)
            self._file = os.fdopen(owner_only.create(log_file, os.O_WRONLY | os.O_APPEND), "ab")
        self._prefix = prefix.encode()
        self._partial = b""
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_size = 0
        self.closed = asyncio.get_event_loop().create_future()

    @classmethod
    def for_worker(
        cls,
        settings: OutputSettings,
        *,
        stream: Std,
        rank: int,
        local_rank: int,
        role: str,
        run_id: str,
        generation: int,
    ) -> StreamPump:
        redirected = stream in settings.std_for(settings.redirects, local_rank)
        teed = stream in settings.std_for(settings.tee, local_rank)
        shown = settings.local_ranks_filter is None or local_rank in settings.local_ranks_filter
        name = "stdout" if stream is Std.OUT else "stderr"
        log_file = None
        if settings.log_dir is not None and (redirected or teed):
            log_file = (settings.log_dir / run_id / f"attempt_{generation}" / str(local_rank)
                        / f"{name}.log")
        target = sys.stdout.buffer if stream is Std.OUT else sys.stderr.buffer
        console = target if shown and not redirected else None
        prefix = ""
        if settings.line_prefix_template:
            prefix = string.Template(settings.line_prefix_template).safe_substitute(
                rank=rank, local_rank=local_rank, role_name=role)
        elif teed:
            prefix = f"[{role}{local_rank}]:"  # torchrun 2.13's TailLog header
        return cls(console=console, log_file=log_file, prefix=prefix)

    def data_received(self, data: bytes) -> None:
        self._keep(data)
        if self._file is not None:
            self._file.write(data)
            self._file.flush()
        if self._console is None:
            return
        if self._prefix:
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            data = b"".join(self._prefix + line + b"\n" for line in lines)
        self._console.write(data)
        self._console.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._console is not None and self._partial:
            self._console.write(self._prefix + self._partial + b"\n")
            self._console.flush()
        if self._file is not None:
            self._file.close()
        if not self.closed.done():
            self.closed.set_result(None)

    def _keep(self, data: bytes) -> None:
        self._tail.append(data)
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= _TAIL_BYTES:
            self._tail_size -= len(self._tail.popleft())

    def tail(self, *, lines: int = 20) -> str:
        text = b"".join(self._tail).decode(errors="replace")
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])


async def open_pump(pump: StreamPump) -> int:
    """Connect ``pump`` to a new pipe; returns the write end for the worker (caller closes it)."""
    read_end, write_end = os.pipe()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: pump, os.fdopen(read_end, "rb", buffering=0))
    return write_end
