"""Fixtures of the training-side tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.train.fake_agent import FakeAgent


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAgent]:
    fake = FakeAgent(tmp_path)
    monkeypatch.setenv("TRAINGUARD_AGENT_SOCKET", fake.address)
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        monkeypatch.setenv(name, value)
    yield fake
    fake.close()
