"""A helper process whose reply cannot be read is ended, and the request fails saying so."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from trainguard.agent import helper_process
from trainguard.proto import helpers_pb2 as pb

# Reads the length of one request, then answers with a frame that is no StoreReply.
_GARBLED = ("import sys, time; sys.stdin.buffer.read(4); "
            "sys.stdout.buffer.write(b'\\x02\\x00\\x00\\x00\\xff\\xff'); sys.stdout.flush(); "
            "time.sleep(60)")


def test_an_unreadable_reply_ends_the_helper_and_fails_the_request() -> None:
    async def scenario() -> tuple[str, int | None]:  # the message, the helper's pid
        helper = helper_process.HelperProcess(args=["-c", _GARBLED], env=os.environ,
                                              role="test helper", reply=pb.StoreReply)
        try:
            with pytest.raises(helper_process.HelperLostError) as lost:
                await asyncio.wait_for(helper.call(pb.StoreRequest(ready=pb.AwaitReady())), 30)
            return str(lost.value), helper.pid
        finally:
            await asyncio.wait_for(helper.close(), 30)

    message, pid = asyncio.run(scenario())
    assert "its reply could not be read (unreadable StoreReply" in message
    assert pid is not None
    assert not psutil.pid_exists(pid)  # ended and reaped, not left running
