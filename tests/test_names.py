"""Names that become directories, files and keys cannot escape them."""

from __future__ import annotations

import pytest

from trainguard import names

_ESCAPES = ["../x", "a/b", "", "..", ".", "/abs", "a\x00b", "a b"]


@pytest.mark.parametrize("value", [*_ESCAPES, "x" * 129, ".hidden", "-flag"])
def test_job_ids_that_are_not_one_plain_name_are_refused(value: str) -> None:
    with pytest.raises(names.InvalidNameError, match="a job id is 1 to 128 letters"):
        names.job_id(value)


@pytest.mark.parametrize("value", ["job", "j", "Job_7", "2026-12-01_a.b", "x" * 128])
def test_job_ids_as_torchrun_users_write_them_pass(value: str) -> None:
    assert names.job_id(value) == value


@pytest.mark.parametrize("value", [*_ESCAPES, "a" * 254, "Node-1", "node_1", "-node", "node-",
                                   "a..b", "node."])
def test_node_names_that_break_dns_1123_are_refused(value: str) -> None:
    with pytest.raises(names.InvalidNameError, match="a node name is a DNS-1123 subdomain"):
        names.node_name(value, what="host")


@pytest.mark.parametrize("value", ["vm", "node-1", "rack1.node-07", "a" * 253, "0"])
def test_node_names_kubernetes_accepts_pass(value: str) -> None:
    assert names.node_name(value) == value


def test_the_message_names_what_and_cuts_a_long_value_short() -> None:
    with pytest.raises(names.InvalidNameError) as caught:
        names.node_name("X" * 300, what="--node-name")
    assert str(caught.value).startswith("--node-name 'XXXX")
    assert "..." in str(caught.value)
    assert "X" * 100 not in str(caught.value)
