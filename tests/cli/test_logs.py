"""Log lines carry their context: as a prefix in text, as fields in JSON."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from trainguard.cli import logs


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit() -> None:
    adapter = logging.LoggerAdapter(logging.getLogger("trainguard.test"),
                                    {"job": "j1", "rank": 3})
    adapter.warning("rank %d is late", 3)


def test_text_has_the_context_as_a_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("info", logs.LogFormat.TEXT)
    _emit()
    assert capsys.readouterr().err == (
        "trainguard WARNING trainguard.test: [job=j1 rank=3] rank 3 is late\n")


def test_json_has_the_context_as_fields(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("INFO", logs.LogFormat.JSON)
    _emit()
    line = json.loads(capsys.readouterr().err)
    assert {key: line[key] for key in ("level", "logger", "message", "job", "rank")} == {
        "level": "WARNING", "logger": "trainguard.test", "message": "rank 3 is late",
        "job": "j1", "rank": 3}
    assert line["time"].endswith("Z")


def test_the_level_filters(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("error", logs.LogFormat.TEXT)
    _emit()
    assert capsys.readouterr().err == ""


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="LOUD"):
        logs.configure("loud", logs.LogFormat.TEXT)
