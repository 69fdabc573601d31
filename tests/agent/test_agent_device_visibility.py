"""Device visibility: index LOCAL_RANK of the visible list is the rank's assigned device."""

from __future__ import annotations

import pytest

from trainguard.agent.device_visibility import visible_devices


def test_nothing_moved_and_nothing_given_leaves_every_device_visible() -> None:
    assert visible_devices({}, placement=[0, 1, 2, 3], devices=5, retired=[]) == {}


def test_a_moved_rank_finds_its_spare_at_its_local_rank() -> None:
    chosen = visible_devices({}, placement=[0, 1, 2, 4], devices=6, retired=[3])
    assert chosen == {"CUDA_VISIBLE_DEVICES": "0,1,2,4,5",
                      "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,4,5"}
    visible = chosen["CUDA_VISIBLE_DEVICES"].split(",")
    assert visible[3] == "4", "torch.cuda.set_device(LOCAL_RANK=3) picks device 4"
    assert "3" not in visible, "the device rank 3 left is hidden from every rank"


def test_the_users_list_is_indexed_by_the_jobs_device_numbers() -> None:
    base = {"CUDA_VISIBLE_DEVICES": "4,5,6,7,2,3"}
    assert visible_devices(base, placement=[0, 1], devices=3, retired=[]) == {
        "CUDA_VISIBLE_DEVICES": "4,5,6,7,2,3"}, "unchanged while nothing moved"
    moved = visible_devices(base, placement=[2, 1], devices=3, retired=[0])
    assert moved["CUDA_VISIBLE_DEVICES"] == "6,5,7,2,3", "the user's extra devices stay"
    assert moved["ASCEND_RT_VISIBLE_DEVICES"] == "2,1"


def test_a_users_list_shorter_than_the_jobs_devices_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ASCEND_RT_VISIBLE_DEVICES='0,1' lists 2 devices; "
                                         r"the job needs 3"):
        visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, placement=[0, 1], devices=3,
                        retired=[])
