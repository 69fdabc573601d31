"""The tested torch range: checked at a session's start, and the same as pyproject's extra."""

from __future__ import annotations

import logging
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from trainguard.train import Session, torch_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["2.13.0", "2.13.0+cpu", "2.13.1+cu128"])
def test_a_tested_version_says_nothing(version: str) -> None:
    assert torch_version.untested(version) is None


@pytest.mark.parametrize("version", ["2.12.1", "2.14.0a0+git1234", "3.0.0", "nightly"])
def test_an_untested_version_is_named_with_the_range(version: str) -> None:
    message = torch_version.untested(version)
    assert message is not None
    assert message.startswith(f"torch {version} is outside the range trainguard is tested "
                              "with (>=2.13,<2.14)")


def test_the_range_is_the_one_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (low_major, low_minor), (high_major, high_minor) = torch_version.TESTED
    assert f"torch>={low_major}.{low_minor},<{high_major}.{high_minor}" in \
        project["optional-dependencies"]["torch"]


def test_a_session_on_an_untested_torch_warns_once_from_rank_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # a session installs its own
    monkeypatch.delenv("TRAINGUARD_AGENT_SOCKET", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.14.0")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        with caplog.at_level(logging.WARNING), Session(checkpoint_dir=tmp_path):
            pass
    assert caplog.text.count("torch 2.14.0 is outside the range") == 1
