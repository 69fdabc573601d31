"""The node agent: one per host. It starts, watches and restarts the workers and owns their
snapshots (shared memory) and its helper processes (standby, persister).
"""

__all__: list[str] = []
