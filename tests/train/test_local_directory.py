"""Checkpoints without an agent: settings, the directory's contents, restore, and the session's
behaviour outside trainguard run (one process here; several ranks in tests/e2e)."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import pytest
import torch

from trainguard.ipc import checkpoint_layout
from trainguard.train import Session, SessionError, local_directory, state_backend
from trainguard.train.local_directory import LocalDirectoryBackend, LocalDirectorySettings


@pytest.fixture(autouse=True)
def without_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # a session installs its own
    for name in ("TRAINGUARD_AGENT_SOCKET", "TRAINGUARD_CHECKPOINT_DIR",
                 "TRAINGUARD_CHECKPOINT_EVERY", "TRAINGUARD_KEEP_CHECKPOINTS", "RANK",
                 "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


def backend(directory: Path, *, every: int = 1, keep: int = 3, rank: int = 0,
            world_size: int = 1) -> LocalDirectoryBackend:
    return LocalDirectoryBackend(LocalDirectorySettings(directory, every, keep), rank=rank,
                                 world_size=world_size)


def tree(step: int) -> dict[str, object]:
    return {"step": step, "state": {"w": torch.full((10,), float(step)), "n": step}}


def save(target: LocalDirectoryBackend, step: int) -> None:
    target.save(tree(step), step=step, generation=0, started=0.0)


def test_settings_defaults_then_script_then_environment(tmp_path: Path) -> None:
    assert LocalDirectorySettings.from_env(environ={}) == LocalDirectorySettings(
        Path("checkpoints"), 100, 3)
    assert LocalDirectorySettings.from_env(every=7, directory=tmp_path, environ={}) == \
        LocalDirectorySettings(tmp_path, 7, 3)
    environ = {"TRAINGUARD_CHECKPOINT_EVERY": "5", "TRAINGUARD_CHECKPOINT_DIR": "/x",
               "TRAINGUARD_KEEP_CHECKPOINTS": "2"}
    assert LocalDirectorySettings.from_env(every=7, directory=tmp_path, environ=environ) == \
        LocalDirectorySettings(Path("/x"), 5, 2)


@pytest.mark.parametrize(("environ", "message"), [
    ({"TRAINGUARD_CHECKPOINT_EVERY": "often"},
     "TRAINGUARD_CHECKPOINT_EVERY='often' is not a whole number"),
    ({"TRAINGUARD_CHECKPOINT_EVERY": "0"}, "checkpoint_every must be >= 1 step, got 0"),
    ({"TRAINGUARD_KEEP_CHECKPOINTS": "0"}, "keep_checkpoints must be >= 1, got 0"),
])
def test_bad_settings_are_named(environ: dict[str, str], message: str) -> None:
    with pytest.raises(state_backend.StateError, match=message):
        LocalDirectorySettings.from_env(environ=environ)


def test_a_directory_that_cannot_be_written_is_refused_at_once(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(state_backend.StateError,
                       match=r"checkpoint directory .*file/checkpoints is not writable.*"
                             "TRAINGUARD_CHECKPOINT_DIR"):
        backend(tmp_path / "file" / "checkpoints")


def test_only_every_nth_step_is_due(tmp_path: Path) -> None:
    target = backend(tmp_path, every=5)
    assert [step for step in range(1, 16) if target.due(step)] == [5, 10, 15]


def test_a_checkpoint_is_the_format_trainguard_run_writes(tmp_path: Path) -> None:
    save(backend(tmp_path), 4)
    directory = checkpoint_layout.CheckpointDirectory(tmp_path)
    manifest = directory.check(tmp_path / "step-000000004", world_size=1)  # verifies checksums
    assert [(shard.rank, shard.file) for shard in manifest.shards] == [(0, "rank-00000.tgsnap")]
    body = json.loads((tmp_path / "step-000000004" / "manifest.json").read_text())
    assert body["format"] == "trainguard-checkpoint"
    assert body["step"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004"]  # no leftovers


def test_restore_loads_the_newest_and_keeps_only_the_newest_few(tmp_path: Path) -> None:
    target = backend(tmp_path, keep=2)
    assert target.load() == state_backend.Loaded("none", 0, None, "")
    for step in (1, 2, 3):
        save(target, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000002", "step-000000003"]
    loaded = target.load()
    assert (loaded.source, loaded.step, loaded.note) == ("disk", 3, "")
    assert loaded.tree["state"]["n"] == 3
    assert torch.equal(loaded.tree["state"]["w"], torch.full((10,), 3.0))


def test_a_corrupt_or_partial_newest_checkpoint_is_skipped_with_the_reason(tmp_path: Path) -> None:
    target = backend(tmp_path, keep=5)
    for step in (1, 2, 3):
        save(target, step)
    shard = tmp_path / "step-000000003" / "rank-00000.tgsnap"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(data)
    (tmp_path / "step-000000002" / "manifest.json").unlink()
    loaded = target.load()
    assert loaded.step == 1
    assert "step-000000003 skipped (rank-00000.tgsnap is corrupt" in loaded.note
    assert "step-000000002 skipped (partial checkpoint: no manifest" in loaded.note


def test_a_checkpoint_of_another_world_size_is_not_loaded(tmp_path: Path) -> None:
    save(backend(tmp_path), 1)
    loaded = backend(tmp_path, rank=0, world_size=2).load()
    assert loaded.source == "none"
    assert "saved with 1 ranks, the job has 2" in loaded.note


def test_several_ranks_without_a_process_group_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(state_backend.StateError, match=r"WORLD_SIZE=2 .* \(init_process_group\)"):
        save(backend(tmp_path, world_size=2), 1)


def test_a_checkpoint_that_cannot_be_written_is_warned_about_and_training_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "checkpoints"
    target = backend(root)
    save(target, 1)
    shutil.rmtree(root)
    root.write_text("")  # the directory is gone: nothing can be created in it
    with caplog.at_level(logging.WARNING, logger=local_directory.__name__):
        save(target, 2)
    assert "checkpoint of step 2 not written: cannot create a directory in" in caplog.text


def test_a_session_without_an_agent_saves_every_nth_step_and_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRAINGUARD_CHECKPOINT_DIR", str(tmp_path))
    model = torch.nn.Linear(3, 1)
    state: dict[str, object] = {"model": model, "seen": 0}
    with caplog.at_level(logging.WARNING), Session(checkpoint_every=4) as session:
        assert session.restore(state) == 0
        assert session.restored is not None
        assert session.restored.source == "none"
        for step in range(10):
            with session.step(step):
                state["seen"] = step + 1
            session.checkpoint(state, step=step + 1)
    assert caplog.text.count("no agent (not started by `trainguard run`)") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004", "step-000000008"]
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    again: dict[str, object] = {"model": torch.nn.Linear(3, 1), "seen": 0}
    with Session(checkpoint_every=4) as session:
        assert session.restore(again) == 8
        assert session.restored is not None
        assert session.restored.source == "disk"
    assert again["seen"] == 8
    restored = again["model"]
    assert isinstance(restored, torch.nn.Module)
    for name, tensor in restored.state_dict().items():
        assert torch.equal(tensor, expected[name])


def test_without_an_agent_the_step_guard_does_nothing_and_run_calls_train_once(
        tmp_path: Path) -> None:
    calls = []

    def train() -> str:
        calls.append(1)
        return "done"

    with Session(checkpoint_dir=tmp_path) as session:
        assert session.run(train) == "done"
        with pytest.raises(ZeroDivisionError), session.step(0):
            _ = 1 / 0
    assert calls == [1]


def test_only_rank_0_says_that_there_is_no_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.WARNING), Session(checkpoint_dir=tmp_path):
        pass
    assert "no agent" not in caplog.text


def test_a_session_with_a_bad_setting_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_CHECKPOINT_EVERY", "-1")
    with pytest.raises(SessionError, match="checkpoint_every must be >= 1 step, got -1"):
        Session()
