"""Write torchrun's error file for an uncaught exception, for scripts without ``@record``.

The agent reads ``$TORCHELASTIC_ERROR_FILE`` to show a failed worker's error first in the failure
report. Format (torch elastic's): ``{"message": {"message": "<Type>: <text>", "extraInfo":
{"py_callstack": "<traceback>", "timestamp": "<epoch seconds>"}}}``, the traceback without
trainguard's and runpy's frames. A file that ``@record``
already wrote is kept. ``on_error`` is then told, before the interpreter's teardown (which can
take a second with a process group open), so the agent learns of the failure at once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from types import TracebackType

from trainguard import tracebacks

__all__ = ["install"]


def install(on_error: Callable[[BaseException], None]) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    previous = sys.excepthook

    def write_then_report(kind: type[BaseException], error: BaseException,
                          trace: TracebackType | None) -> None:
        if path and not os.path.exists(path):
            body = {"message": {
                "message": f"{kind.__name__}: {error}",
                "extraInfo": {
                    "py_callstack": tracebacks.format_exception(kind, error, trace),
                    "timestamp": str(int(time.time())),
                },
            }}
            try:
                with open(path, "w") as stream:
                    json.dump(body, stream)
            except OSError:
                pass  # the report falls back to the worker's stderr
        on_error(error)
        previous(kind, error, trace)

    sys.excepthook = write_then_report
