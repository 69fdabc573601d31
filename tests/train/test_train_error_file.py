"""torchrun's error file, written for an uncaught exception."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import TracebackType

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from trainguard.train import error_file

Hook = tuple[type[BaseException], BaseException, TracebackType | None]


def failing_step() -> None:
    raise ValueError("loss is nan at step 12")


def uncaught() -> Hook:
    try:
        failing_step()
    except ValueError as error:
        return type(error), error, error.__traceback__
    raise AssertionError("not raised")


@pytest.fixture
def previous_hook(monkeypatch: pytest.MonkeyPatch) -> list[Hook]:
    """Stands in for the interpreter's hook (which would print to stderr); records its calls."""
    calls: list[Hook] = []

    def hook(kind: type[BaseException], error: BaseException,
             trace: TracebackType | None) -> None:
        calls.append((kind, error, trace))

    monkeypatch.setattr(sys, "excepthook", hook)
    return calls


def test_uncaught_exception_writes_torch_elastics_error_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, previous_hook: list[Hook]) -> None:
    path = tmp_path / "attempt_0" / "error.json"
    path.parent.mkdir()
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    reported: list[BaseException] = []
    error_file.install(reported.append)
    hook = uncaught()
    before = int(time.time())

    sys.excepthook(*hook)

    body = json.loads(path.read_text())
    assert set(body) == {"message"}
    assert set(body["message"]) == {"message", "extraInfo"}
    assert body["message"]["message"] == "ValueError: loss is nan at step 12"
    assert set(body["message"]["extraInfo"]) == {"py_callstack", "timestamp"}
    callstack = body["message"]["extraInfo"]["py_callstack"]
    assert callstack.startswith("Traceback (most recent call last):")
    assert "in failing_step" in callstack
    assert callstack.rstrip().endswith("ValueError: loss is nan at step 12")
    timestamp = body["message"]["extraInfo"]["timestamp"]
    assert isinstance(timestamp, str)
    assert before <= int(timestamp) <= int(time.time())
    assert reported == [hook[1]]
    assert previous_hook == [hook]
    # torch elastic's own reader understands the file.
    failure = ProcessFailure(local_rank=0, pid=1234, exitcode=1, error_file=str(path))
    assert failure.message == body["message"]
    assert failure.timestamp == int(timestamp)


def test_an_existing_error_file_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, previous_hook: list[Hook]) -> None:
    path = tmp_path / "error.json"
    written_by_record = json.dumps({"message": {"message": "RuntimeError: from @record",
                                                "extraInfo": {"py_callstack": "...",
                                                              "timestamp": "1"}}})
    path.write_text(written_by_record)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    reported: list[BaseException] = []
    error_file.install(reported.append)
    hook = uncaught()

    sys.excepthook(*hook)

    assert path.read_text() == written_by_record
    assert reported == [hook[1]]
    assert previous_hook == [hook]


def test_without_an_error_file_only_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, previous_hook: list[Hook]) -> None:
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    reported: list[BaseException] = []
    error_file.install(reported.append)
    hook = uncaught()
    sys.excepthook(*hook)
    assert reported == [hook[1]]
    assert previous_hook == [hook]
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_error_file_still_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, previous_hook: list[Hook]) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "file" / "error.json"))
    reported: list[BaseException] = []
    error_file.install(reported.append)
    error = KeyError("missing")
    sys.excepthook(KeyError, error, None)
    assert reported == [error]
    assert previous_hook == [(KeyError, error, None)]
