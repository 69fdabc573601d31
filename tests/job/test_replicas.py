"""Data-parallel replica groups: which ranks hold the same state, and who gives it to whom."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.job.replicas import ReplicaLayout


def test_world_8_dp_4_pairs_ranks_two_apart() -> None:
    layout = ReplicaLayout(8, 4)

    assert layout.parts == 2
    assert [layout.group(rank) for rank in range(8)] == [
        (0, 2, 4, 6), (1, 3, 5, 7), (0, 2, 4, 6), (1, 3, 5, 7),
        (0, 2, 4, 6), (1, 3, 5, 7), (0, 2, 4, 6), (1, 3, 5, 7)]


def test_world_8_dp_8_every_rank_is_a_replica_of_every_other() -> None:
    layout = ReplicaLayout(8, 8)

    assert layout.parts == 1
    assert {layout.group(rank) for rank in range(8)} == {tuple(range(8))}


def test_world_8_dp_1_every_rank_is_alone() -> None:
    layout = ReplicaLayout(8, 1)

    assert layout.parts == 8
    assert [layout.group(rank) for rank in range(8)] == [(rank,) for rank in range(8)]


def test_world_8_dp_2() -> None:
    layout = ReplicaLayout(8, 2)

    assert layout.parts == 4
    assert layout.group(1) == (1, 5)
    assert layout.group(7) == (3, 7)


def test_donor_is_the_lowest_usable_other_member() -> None:
    layout = ReplicaLayout(8, 4)

    assert layout.donor(6, range(8)) == 0
    assert layout.donor(0, range(8)) == 2  # never the rank itself
    assert layout.donor(1, {3, 5, 7}) == 3
    assert layout.donor(1, {7, 5}) == 5
    assert layout.donor(3, [0, 2, 7]) == 7  # members of other groups do not count


def test_donor_ignores_the_rank_itself_even_when_usable() -> None:
    assert ReplicaLayout(4, 4).donor(2, {2}) is None


@pytest.mark.parametrize(("layout", "rank", "usable"), [
    (ReplicaLayout(8, 4), 1, set()),
    (ReplicaLayout(8, 4), 1, {0, 2, 4, 6}),
    (ReplicaLayout(8, 4), 1, {1}),
    (ReplicaLayout(8, 1), 3, set(range(8))),
    (ReplicaLayout(1, 1), 0, {0}),
])
def test_no_donor_without_a_usable_member(layout: ReplicaLayout, rank: int,
                                          usable: set[int]) -> None:
    assert layout.donor(rank, usable) is None


@pytest.mark.parametrize(("world_size", "dp_size"), [(8, 3), (8, 0), (8, 16), (4, -2),
                                                      (6, 4)])
def test_a_dp_size_that_does_not_divide_the_world_is_refused(world_size: int,
                                                             dp_size: int) -> None:
    with pytest.raises(ValueError, match="does not divide") as caught:
        ReplicaLayout(world_size, dp_size)

    assert str(caught.value) == (
        f"dp-size {dp_size} does not divide the world size {world_size}")


@pytest.mark.parametrize("world_size", [0, -1])
def test_an_empty_world_is_refused(world_size: int) -> None:
    with pytest.raises(ValueError, match=f"world size must be >= 1, got {world_size}"):
        ReplicaLayout(world_size, 1)


@st.composite
def layouts(draw: st.DrawFn) -> ReplicaLayout:
    parts = draw(st.integers(1, 8))
    dp_size = draw(st.integers(1, 8))
    return ReplicaLayout(parts * dp_size, dp_size)


@given(layout=layouts(), data=st.data())
def test_groups_partition_the_world_property(layout: ReplicaLayout, data: st.DataObject) -> None:
    groups = {layout.group(rank) for rank in range(layout.world_size)}

    assert len(groups) == layout.parts
    assert sorted(rank for group in groups for rank in group) == list(range(layout.world_size))
    assert all(len(group) == layout.dp_size for group in groups)
    rank = data.draw(st.integers(0, layout.world_size - 1))
    assert rank in layout.group(rank)
    usable = data.draw(st.sets(st.integers(0, layout.world_size - 1)))
    donor = layout.donor(rank, usable)
    candidates = [peer for peer in layout.group(rank) if peer != rank and peer in usable]
    assert donor == (min(candidates) if candidates else None)
