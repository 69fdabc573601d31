"""The agent's side of the persister process (:mod:`trainguard.agent.persister`).

Commands are answered in order; if the process dies, the commands in flight fail and the next
command starts a new process, so one killed write costs one checkpoint and nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainguard.agent import helper_process
from trainguard.proto import helpers_pb2

__all__ = ["PersisterClient", "PersisterLostError"]

PersisterLostError = helper_process.HelperLostError


class PersisterClient(helper_process.HelperProcess[helpers_pb2.PersisterReply]):
    def __init__(self, *, env: Mapping[str, str]) -> None:
        super().__init__(args=["-m", "trainguard.agent.persister", str(os.getpid())], env=env,
                         role="persister", reply=helpers_pb2.PersisterReply)
