"""What a running job shows to the outside while it runs: the live document that
``trainguard status`` reads (:mod:`.live`) and the Prometheus endpoint (:mod:`.metrics`).

Both are fed on the job's event loop, from the recorded events and from the agent's view of each
rank; neither ever blocks training. Between the launcher and the controller/agent in the layers:
it reads both, and only the launcher wires it.
"""

__all__: list[str] = []
