"""Owner-only files and directories, whatever the umask."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard import owner_only


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """A umask that takes nothing away: only the modes trainguard asks for count."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_every_directory_made_is_owner_only_and_an_existing_one_is_left_alone(
        tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    owner_only.make_dir(tmp_path / "run" / "attempt_0" / "1")
    assert [mode(tmp_path / part) for part in ("run", "run/attempt_0", "run/attempt_0/1")] == [
        0o700, 0o700, 0o700]
    assert mode(tmp_path) == 0o755


def test_a_file_in_the_way_is_the_system_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        owner_only.make_dir(tmp_path / "file" / "run")


def test_a_created_file_is_owner_only(tmp_path: Path) -> None:
    os.close(owner_only.create(tmp_path / "agent.json"))
    assert mode(tmp_path / "agent.json") == 0o600
