"""The small protocol between training processes and their node agent.

Two parts, both free of torch and of every other trainguard package so that the training side
(``trainguard.train``) and the agent can share them: the message schema spoken over the agent's
local socket (:mod:`trainguard.ipc.messages`) and the byte layout of a state snapshot, which is the
same in shared memory and in a persisted shard file (:mod:`trainguard.ipc.snapshot_layout`).
"""

__all__: list[str] = []
