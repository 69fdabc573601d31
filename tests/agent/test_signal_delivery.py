"""Seeing from /proc when a process has handled the stacks signal: real child processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from trainguard.agent import signal_delivery
from trainguard.ipc import messages

SIGNAL = messages.STACKS_SIGNAL

# A worker's setup: faulthandler writes every thread's stack on the signal (as Session does);
# the main thread and one other then wait in C. ``fill`` first fills the output pipe, so that
# the handler's write blocks until the parent reads; ``block`` blocks the signal everywhere.
CHILD = textwrap.dedent("""
    import faulthandler, fcntl, os, signal, sys, threading, time
    fill, block = sys.argv[1] == "1", sys.argv[2] == "1"
    if fill:
        flags = fcntl.fcntl(1, fcntl.F_GETFL)
        fcntl.fcntl(1, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        try:
            while True:
                os.write(1, b"x" * 4096)
        except BlockingIOError:
            pass
        fcntl.fcntl(1, fcntl.F_SETFL, flags)
    faulthandler.register(signal.SIGUSR2, file=1, all_threads=True)
    if block:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    os.write(2, b"ready\\n")
    time.sleep(600)
""")


def _start(*, fill: bool = False, block: bool = False) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(int(fill)), str(int(block))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    assert child.stderr is not None
    assert child.stderr.readline() == b"ready\n"
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate(timeout=30)


def _send(child: subprocess.Popen[bytes]) -> dict[int, frozenset[int]]:
    before = signal_delivery.blocking_threads(child.pid, SIGNAL)
    assert before is not None
    os.kill(child.pid, SIGNAL)
    return {child.pid: before}


def test_handled_as_soon_as_the_stacks_are_written(
        children: list[subprocess.Popen[bytes]]) -> None:
    child = _start()
    children.append(child)
    began = time.monotonic()
    assert asyncio.run(signal_delivery.signal_and_wait([child.pid], SIGNAL, timeout=20))
    assert time.monotonic() - began < 5  # generous: it takes milliseconds
    os.killpg(child.pid, signal.SIGKILL)
    output, _ = child.communicate(timeout=30)
    assert output.count(b"most recent call first") == 2  # both threads' stacks


def test_not_handled_while_the_handler_is_still_writing(
        children: list[subprocess.Popen[bytes]]) -> None:
    child = _start(fill=True)
    children.append(child)
    sent = _send(child)
    assert not asyncio.run(signal_delivery.wait_handled(sent, SIGNAL, timeout=0.5))
    stdout = child.stdout
    assert stdout is not None
    output = bytearray()
    reader = threading.Thread(target=lambda: output.extend(stdout.read()), daemon=True)
    reader.start()  # the pipe drains, the handler's write goes through
    assert asyncio.run(signal_delivery.wait_handled(sent, SIGNAL, timeout=20))
    os.killpg(child.pid, signal.SIGKILL)
    reader.join(30)
    assert b"most recent call first" in output


def test_a_signal_every_thread_blocks_is_never_handled(
        children: list[subprocess.Popen[bytes]]) -> None:
    child = _start(block=True)
    children.append(child)
    sent = _send(child)
    assert sent[child.pid]  # both threads blocked it before it was sent
    began = time.monotonic()
    assert not asyncio.run(signal_delivery.wait_handled(sent, SIGNAL, timeout=0.3))
    assert time.monotonic() - began >= 0.3


def test_a_process_that_is_gone_has_nothing_left_to_handle(
        children: list[subprocess.Popen[bytes]]) -> None:
    child = _start()
    children.append(child)
    os.killpg(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)
    assert signal_delivery.blocking_threads(child.pid, SIGNAL) is None
    assert signal_delivery.handled(child.pid, SIGNAL, blocked_before=frozenset())
    assert asyncio.run(signal_delivery.signal_and_wait([child.pid], SIGNAL, timeout=20))
