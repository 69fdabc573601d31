"""Our protocols' schemas and the code generated from them: the controller and its agents
(``control.proto``; ``codec`` turns our domain types into its messages and back, ``channel``
carries them), an agent and its helper processes (``helpers.proto``), a worker and its agent
(``worker.proto``; ``worker_codec`` converts :mod:`trainguard.ipc.messages`), and what they all
share (``versioned``: the protocol version, the framing on a byte stream)."""
