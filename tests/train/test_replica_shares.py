"""Shares of replicated state: who writes what, and what a snapshot of a share holds."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from tests.train.fake_comparison import compare_as
from trainguard.ipc import snapshot_layout
from trainguard.job import replicas
from trainguard.train import replica_shares, snapshot


def tree() -> dict[str, object]:
    weights = [torch.full((10, 10), float(i)) for i in range(8)]
    return {"step": 3, "state": {"model": {f"w{i}": w for i, w in enumerate(weights)},
                                 "loader": {"position": torch.tensor([7])}},
            "rng": {"torch": torch.tensor([1, 2, 3], dtype=torch.uint8)}}


def test_each_replica_holds_a_run_of_about_equal_bytes() -> None:
    tensors = [torch.zeros(100) for _ in range(8)]
    assert replica_shares.assign(tensors, (0, 1, 2, 3)) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert replica_shares.assign([torch.zeros(1000), *tensors], (1, 3)) == [1, *[3] * 8]


def holders(shares: replica_shares.ReplicaShares, saved: dict[str, object]
            ) -> list[int | None] | None:
    sources: list[int] = []
    _, tensors = snapshot.flatten(saved, sources=sources)
    return shares.holders(saved, tensors, sources)


class Position:
    """A per-rank object holding its tensor as an attribute, not in a dict."""

    def __init__(self, value: int) -> None:
        self.tensor = torch.tensor([value])


def test_per_rank_keys_and_random_generators_are_not_replicated() -> None:
    saved = tree()
    saved["state"]["loader"]["object"] = Position(9)  # type: ignore[index]
    shares = replica_shares.ReplicaShares(rank=0, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=True, per_rank={"loader"})
    shares._checked = True
    # 8 replicated weights in runs of 2 (rank 0 keeps its own and rank 3's); the loader's two
    # tensors, one inside an object, and the random state stay in every snapshot.
    assert holders(shares, saved) == [None, None, 1, 1, 2, 2, None, None, None, None, None]


def test_each_share_is_kept_by_its_holder_and_the_next_replica_in_the_ring() -> None:
    assert replica_shares.kept(1, (0, 1, 2, 3)) == {1, 0}
    assert replica_shares.kept(0, (0, 1, 2, 3)) == {0, 3}
    assert replica_shares.kept(3, (1, 3)) == {3, 1}  # two replicas: each keeps both
    groups = [(0, 1, 2), (0, 1, 2, 3), (2, 5, 8, 11, 14)]
    for group in groups:  # every holder's run is in exactly two snapshots
        assert all(sum(h in replica_shares.kept(r, group) for r in group) == 2 for h in group)


def test_a_share_snapshot_leaves_the_others_tensors_to_their_holders(tmp_path: Path) -> None:
    saved = tree()
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=True, per_rank={"loader"})
    shares._checked = True  # the replicas' comparison needs a process group: see e2e
    prepared = snapshot.Layouts().prepare(saved, holders=shares.holders)
    whole = snapshot.prepare(saved)
    assert whole.payload_len - prepared.payload_len >= 4 * 400
    assert [e.holder for e in snapshot_layout.decode_table(prepared.table)][:8] == [
        None, None, None, None, 2, 2, 3, 3]
    path = tmp_path / "slot"
    path.write_bytes(b"\0" * prepared.nbytes)
    mapped = snapshot.MappedSlot(str(path))
    mapped.write(prepared, step=3, generation=0, rank=1, world_size=4)
    mapped.close()
    with pytest.raises(snapshot.SnapshotError, match="holds only a share of the replicated"):
        snapshot.read_snapshot(str(path))
    absent: list[snapshot.Absent] = []
    _, loaded = snapshot.read_snapshot(str(path), absent=absent)
    assert [(item.index, item.holder) for item in absent] == [(4, 2), (5, 2), (6, 3), (7, 3)]
    assert torch.equal(loaded["state"]["model"]["w0"], torch.full((10, 10), 0.0))
    assert torch.equal(loaded["state"]["model"]["w2"], torch.full((10, 10), 2.0))
    assert torch.equal(loaded["state"]["loader"]["position"], torch.tensor([7]))


def write_shares(directory: Path, ranks: list[int]) -> dict[int, str]:
    """Each of ``ranks`` (of a 4-replica group) writes its shares of :func:`tree`."""
    paths = {}
    for rank in ranks:
        saved = tree()
        shares = replica_shares.ReplicaShares(rank=rank, layout=replicas.ReplicaLayout(4, 4),
                                              enabled=True, per_rank={"loader"})
        shares._checked = True
        prepared = snapshot.Layouts().prepare(saved, holders=shares.holders)
        path = directory / f"rank-{rank}"
        path.write_bytes(b"\0" * prepared.nbytes)
        mapped = snapshot.MappedSlot(str(path))
        mapped.write(prepared, step=3, generation=0, rank=rank, world_size=4)
        mapped.close()
        paths[rank] = str(path)
    return paths


def test_a_rank_without_a_snapshot_is_assembled_from_its_successor_and_the_holders(
        tmp_path: Path) -> None:
    # Rank 1 died before its snapshot: rank 2's keeps rank 1's share and stands in for it.
    paths = write_shares(tmp_path, [0, 2, 3])
    absent: list[snapshot.Absent] = []
    _, loaded = snapshot.read_snapshot(paths[2], absent=absent)
    assert {item.holder for item in absent} == {0, 3}  # rank 2 keeps runs 2 and 1
    replica_shares.fill_from_files(absent, {**paths, 1: paths[2]})
    whole = tree()["state"]["model"]  # type: ignore[index]
    assert all(torch.equal(loaded["state"]["model"][k], v) for k, v in whole.items())

    # Without the holder's snapshot at hand, it says which rank is missing.
    absent = []
    snapshot.read_snapshot(paths[2], absent=absent)
    with pytest.raises(snapshot.SnapshotError, match="no snapshot of rank 3 is at hand"):
        replica_shares.fill_from_files(absent, {0: paths[0]})

    # A holder whose tensor is not the shape its replica expects is named, not copied.
    absent = []
    snapshot.read_snapshot(paths[2], absent=absent)
    wrong = [dataclasses.replace(absent[0], tensor=torch.empty(5, 20))]
    with pytest.raises(snapshot.SnapshotError,
                       match=r"rank-0: tensor 0 is torch.float32 \(10, 10\), not the torch.float32 "
                             r"\(5, 20\) its replica expects"):
        replica_shares.fill_from_files(wrong, paths)


def test_a_tree_with_fewer_tensors_than_replicas_is_snapshotted_whole() -> None:
    saved = {"step": 1, "state": {"model": {"w": torch.zeros(4)}}, "rng": {}}
    shares = replica_shares.ReplicaShares(rank=0, layout=replicas.ReplicaLayout(2, 2),
                                          enabled=True)
    shares._checked = True
    assert holders(shares, saved) is None


def test_settings_come_from_the_environment_first() -> None:
    environ = {"TRAINGUARD_SNAPSHOT_SHARES": "1", "TRAINGUARD_DP_SIZE": "3"}
    shares = replica_shares.ReplicaShares.from_env(rank=4, world_size=6, enabled=False,
                                                   dp_size=None, environ=environ)
    assert shares.enabled
    assert shares._group == (0, 2, 4)
    two = replica_shares.ReplicaShares.from_env(rank=3, world_size=4, enabled=True,
                                                dp_size=2, environ={})
    assert not two.enabled  # each of two replicas would keep both shares: whole
    default = replica_shares.ReplicaShares.from_env(rank=0, world_size=4, enabled=None,
                                                    dp_size=None, environ={})
    assert default.enabled
    off = replica_shares.ReplicaShares.from_env(
        rank=0, world_size=4, enabled=True, dp_size=None,
        environ={"TRAINGUARD_SNAPSHOT_SHARES": "0"})
    assert not off.enabled
    # Replicas on other hosts: each rank's whole state stays in its own host's memory.
    across = replica_shares.ReplicaShares.from_env(
        rank=0, world_size=6, enabled=True, dp_size=3, environ={"LOCAL_WORLD_SIZE": "2"})
    assert across._group == (0, 2, 4)
    assert not across.enabled
    assert replica_shares.ReplicaShares.from_env(
        rank=0, world_size=6, enabled=True, dp_size=3, environ={"LOCAL_WORLD_SIZE": "6"}
    ).enabled


@pytest.mark.parametrize(("environ", "dp_size", "message"), [
    ({"TRAINGUARD_SNAPSHOT_SHARES": "yes"}, None,
     "TRAINGUARD_SNAPSHOT_SHARES must be 0 or 1, got 'yes'"),
    ({"TRAINGUARD_DP_SIZE": "3"}, None,
     "TRAINGUARD_DP_SIZE='3': dp-size 3 does not divide the world size 4"),
    ({"TRAINGUARD_DP_SIZE": "many"}, None, "TRAINGUARD_DP_SIZE='many': invalid literal"),
    ({}, 3, "dp_size=3: dp-size 3 does not divide the world size 4"),
    ({"TRAINGUARD_DP_SIZE": "4"}, 2,
     "dp_size=2 is not the job's dp-size 4 (TRAINGUARD_DP_SIZE='4': trainguard run --dp-size, "
     "by default the world size), by which the agent restores a rank from its replicas: run "
     "with --dp-size 2"),
    ({"LOCAL_WORLD_SIZE": "two"}, None, "LOCAL_WORLD_SIZE='two': not a number of ranks"),
])
def test_a_malformed_setting_is_named(environ: dict[str, str], dp_size: int | None,
                                      message: str) -> None:
    with pytest.raises(replica_shares.SharesError, match=re.escape(message)):
        replica_shares.ReplicaShares.from_env(rank=0, world_size=4, enabled=True,
                                              dp_size=dp_size, environ=environ)


def test_the_optimizers_tensors_are_kept_by_their_holder_alone() -> None:
    saved = tree()
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=True, per_rank={"loader"})
    shares._checked = True
    sources: list[int] = []
    _, tensors = snapshot.flatten(saved, sources=sources)
    # w0..w7 in runs of 2 held by ranks 0..3; then the loader's position and the random state
    assert shares.holders(saved, tensors, sources) == [
        None, None, None, None, 2, 2, 3, 3, None, None]
    optimizer = torch.optim.SGD(tensors[:6], lr=0.1)  # owns w0..w5, not w6, w7
    assert shares.holders(saved, tensors, sources, optimizers=[optimizer]) == [
        0, 0, None, None, 2, 2, 3, 3, None, None]
    assert shares.predecessor == 0


def test_the_holders_are_worked_out_again_only_when_what_they_depend_on_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=True, per_rank={"loader"})
    shares._checked = True
    worked_out: list[tuple[int, ...]] = []
    assign = replica_shares.assign

    def counted(tensors: list[torch.Tensor], group: tuple[int, ...]) -> list[int]:
        worked_out.append(group)
        return assign(tensors, group)

    monkeypatch.setattr(replica_shares, "assign", counted)
    saved = tree()
    weights: list[torch.Tensor] = list(saved["state"]["model"].values())  # type: ignore[index]
    optimizer = torch.optim.SGD(weights[:6], lr=0.1)

    def answer() -> list[int | None] | None:
        sources: list[int] = []
        _, tensors = snapshot.flatten(saved, sources=sources)
        return shares.holders(saved, tensors, sources, optimizers=[optimizer])

    owned_by_optimizer = [0, 0, None, None, 2, 2, 3, 3, None, None]
    assert answer() == owned_by_optimizer
    assert len(worked_out) == 1
    # The next step's tree: new objects around the same tensors.
    saved = {"step": 4, "state": {"model": dict(saved["state"]["model"]),  # type: ignore[index]
                                  "loader": saved["state"]["loader"]},  # type: ignore[index]
             "rng": {"torch": torch.tensor([4, 5, 6], dtype=torch.uint8)}}
    assert answer() == owned_by_optimizer
    assert len(worked_out) == 1  # given again
    # The optimizer updates another tensor in w0's place: w0 is no longer its.
    optimizer.param_groups[0]["params"][0] = torch.zeros(10, 10)
    assert answer() == [None, 0, None, None, 2, 2, 3, 3, None, None]
    # A replicated key that becomes per-rank: the loader holds w7 too.
    saved["state"]["loader"]["w7"] = saved["state"]["model"].pop("w7")  # type: ignore[index]
    assert answer() == [None, 0, None, None, 2, 2, 3, None, None, None]
    # A tensor of another size: the runs are cut again.
    saved["state"]["model"]["w6"] = torch.zeros(20)  # type: ignore[index]
    assert answer() == [None, 0, None, None, 2, 3, 3, None, None, None]
    assert len(worked_out) == 4
    assert answer() is not None
    assert len(worked_out) == 4
    # A new generation compares the replicas again, which needs the process group.
    shares.new_generation()
    assert answer() is None
    assert not shares.enabled


@pytest.mark.parametrize("dp_size", [4, 2], ids=["shares", "two replicas: no shares"])
@pytest.mark.parametrize("identical", [True, False], ids=["identical", "different"])
def test_the_replicas_are_compared_once_a_generation_shares_or_not(
        monkeypatch: pytest.MonkeyPatch, dp_size: int, identical: bool) -> None:
    """A replica's snapshot stands in for a lost rank's, so the replicas are compared also
    where shares are not used; found different, they stay so for the rest of the process."""
    gathered = compare_as(monkeypatch, identical=identical)
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, dp_size),
                                          enabled=True)
    saved = tree()
    held = holders(shares, saved)
    assert gathered == [4]
    assert (held is not None) is (dp_size > 2 and identical)
    assert shares.replicated is identical
    groups = "[[0, 1, 2, 3]]" if dp_size == 4 else "[[0, 2], [1, 3]]"
    assert shares.differ == ("" if identical else f"replica groups {groups} at dp-size {dp_size}")
    holders(shares, saved)
    assert gathered == [4], "compared once a generation"
    shares.new_generation()
    holders(shares, saved)
    assert gathered == ([4, 4] if identical else [4]), "different: not compared again"


def test_replicas_on_other_hosts_are_compared_without_shares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Across hosts no shares are written, but a replica on another host sends a lost host's
    ranks their state: the replicas are compared all the same."""
    gathered = compare_as(monkeypatch, identical=False)
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 2),
                                          enabled=True, local_world_size=2)
    assert holders(shares, tree()) is None
    assert gathered == [4]
    assert shares.differ == "replica groups [[0, 2], [1, 3]] at dp-size 2"


def test_shares_turned_off_compare_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The way out for ranks that do not all snapshot the same steps: no collective."""
    gathered = compare_as(monkeypatch, identical=False)
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 4),
                                          enabled=False)
    assert holders(shares, tree()) is None
    assert gathered == []
    assert shares.replicated  # unchecked


def test_a_rank_without_a_replica_compares_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "all_gather", lambda *_: pytest.fail("compared"))
    shares = replica_shares.ReplicaShares(rank=1, layout=replicas.ReplicaLayout(4, 1),
                                          enabled=True)
    assert holders(shares, tree()) is None
    assert not shares.replicated
    assert shares.differ == ""
