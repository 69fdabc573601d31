"""Who the agent's socket answers: the job's user and root, and a worker only as itself."""

from __future__ import annotations

import os

from trainguard.agent import ipc_server
from trainguard.ipc import messages

OWN = os.geteuid()
INJECT = messages.InjectRequest(request_id=1, rank=1, kind=messages.InjectionKind.CRASH,
                                at_step=None)
HELLO = messages.Hello(rank=1, local_rank=1, pid=4242, generation=0, secret="s")


def test_another_user_is_refused_whatever_it_sends() -> None:
    other = OWN + 1000
    for first in (INJECT, HELLO):
        assert ipc_server.refusal(first, pid=4242, uid=other) == (
            f"uid {other} is neither the job's user (uid {OWN}) nor root")


def test_the_jobs_user_and_root_are_answered() -> None:
    assert ipc_server.refusal(INJECT, pid=99, uid=OWN) is None
    assert ipc_server.refusal(INJECT, pid=99, uid=0) is None
    assert ipc_server.refusal(HELLO, pid=4242, uid=OWN) is None


def test_a_hello_must_come_from_the_process_it_names() -> None:
    assert ipc_server.refusal(HELLO, pid=4243, uid=OWN) == "its hello claims pid 4242"
