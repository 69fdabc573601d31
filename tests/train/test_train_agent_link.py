"""The worker's link to its agent: order kept, nothing blocks, requests answered by id."""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
import uuid

import pytest

from tests.train.fake_agent import FakeAgent
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec
from trainguard.proto import worker_pb2 as pb
from trainguard.train import agent_link


def test_messages_arrive_in_the_order_they_were_sent(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    marks = [messages.StepMark(step, phase, float(step))
             for step in range(2000) for phase in messages.StepPhase]
    for mark in marks:
        link.send(mark)
    link.send_from_signal(messages.StopRequested(1.0))
    received = agent.wait_for(len(marks) + 1)
    assert received[: len(marks)] == marks
    assert received[-1] == messages.StopRequested(1.0)
    link.close()


def test_send_now_returns_once_everything_before_it_is_out(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    for step in range(100):
        link.send(messages.StepMark(step, messages.StepPhase.BEGIN, 0.0))
    link.send_now(messages.FaultInjected(messages.InjectionKind.CRASH, 100, 0.0))
    assert agent.wait_for(101)[-1] == messages.FaultInjected(
        messages.InjectionKind.CRASH, 100, 0.0)
    link.close()


def test_a_request_gets_the_answer_with_its_id(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    request_id = link.next_request_id()
    answer = link.request(messages.RestorePlanRequest(request_id), request_id=request_id,
                          timeout=10)
    assert isinstance(answer, messages.RestorePlan)
    assert answer.request_id == request_id
    link.close()


def test_orders_reach_the_session(agent: FakeAgent) -> None:
    orders: list[messages.Message] = []
    got = threading.Event()

    def take(order: messages.Message) -> None:
        orders.append(order)
        got.set()

    link = agent_link.AgentLink(agent.address, on_order=take)
    agent.wait_for(0)
    link.hello(rank=0, local_rank=0, generation=0)
    agent.wait_for(1)
    agent.order(messages.StopAt(7))
    assert got.wait(10)
    assert orders == [messages.StopAt(7)]
    link.close()


def test_a_request_without_answer_times_out(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    with pytest.raises(agent_link.AgentLinkError, match="did not answer inject_request within"):
        link.request(messages.InjectRequest(5, 0, messages.InjectionKind.CRASH, None),
                     request_id=5, timeout=0.2)
    link.close()


@pytest.mark.parametrize("data", [
    versioned.frame(b"garbage"),
    versioned.frame(pb.Envelope(version=versioned.PROTOCOL_VERSION + 1,
                                stop_at=pb.StopAt(step=7)).SerializeToString()),
    struct.pack("<I", worker_codec.FRAME_LIMIT + 1),  # refused before its body is read
])
def test_a_bad_message_from_the_agent_ends_the_link(agent: FakeAgent, data: bytes) -> None:
    orders: list[messages.Message] = []
    link = agent_link.AgentLink(agent.address, on_order=orders.append)
    link.hello(rank=0, local_rank=0, generation=0)
    agent.wait_for(1)
    assert agent.connection is not None
    agent.connection.sendall(data + versioned.frame(worker_codec.encode(messages.StopAt(7))))
    started = time.monotonic()
    with pytest.raises(agent_link.AgentLinkError, match="did not answer"):
        link.request(messages.InjectRequest(5, 0, messages.InjectionKind.CRASH, None),
                     request_id=5, timeout=10)
    assert time.monotonic() - started < 5, "the link waited for an answer after the bad message"
    assert link.closed
    assert orders == []
    link.close()


def test_nothing_listening_is_a_clear_error() -> None:
    with pytest.raises(agent_link.AgentLinkError, match="cannot reach the trainguard agent"):
        agent_link.AgentLink(f"@nobody-{uuid.uuid4().hex}", on_order=lambda order: None)


def test_sending_after_the_agent_left_does_not_block_or_raise(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    link.hello(rank=0, local_rank=0, generation=0)
    agent.wait_for(1)
    agent.close()
    for step in range(10000):
        link.send(messages.StepMark(step, messages.StepPhase.BEGIN, 0.0))
    with contextlib.suppress(agent_link.AgentLinkError):
        link.close(timeout=5)


def test_the_hello_names_this_process_and_carries_the_secret_from_the_environment(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(messages.WORKER_SECRET_VARIABLE, "the-secret")
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    link.hello(rank=2, local_rank=1, generation=3)
    [hello] = agent.wait_for(1)
    assert hello == messages.Hello(2, 1, os.getpid(), 3, "the-secret")
    assert "the-secret" not in repr(hello)
    link.close()


def test_a_held_message_leaves_with_the_next_one_in_order(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    held = messages.StepMark(1, messages.StepPhase.END, 1.0)
    link.send(held, hold=True)
    with agent.arrived:  # nothing arrives while it is held
        assert not agent.arrived.wait_for(lambda: agent.received, 0.3)
    after = messages.StepMark(2, messages.StepPhase.BEGIN, 2.0)
    link.send(after)
    assert agent.wait_for(2) == [held, after]
    link.close()


def test_closing_sends_what_is_held(agent: FakeAgent) -> None:
    link = agent_link.AgentLink(agent.address, on_order=lambda order: None)
    held = messages.StepMark(3, messages.StepPhase.END, 3.0)
    link.send(held, hold=True)
    link.close()
    assert agent.wait_for(1) == [held]
