"""The small protocol between training processes and their node agent.

Three parts, all free of torch and of every other trainguard package so that the training side
(``trainguard.train``) and the agent can share them: the message schema spoken over the agent's
local socket (:mod:`trainguard.ipc.messages`), the byte layout of a state snapshot, which is the
same in shared memory and in a persisted shard file (:mod:`trainguard.ipc.snapshot_layout`), and
the checkpoint directories on disk (:mod:`trainguard.ipc.checkpoint_layout`), written by the agent
under ``trainguard run`` and by the training process itself outside it.
"""

__all__: list[str] = []
