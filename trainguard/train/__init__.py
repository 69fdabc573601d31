"""Imported inside training processes: the session with the node agent.

:class:`Session` marks steps (heartbeats), snapshots state into the agent's shared memory,
restores the newest complete state after a fault, and stops gracefully on SIGTERM. Scripts that do
not use it still run under ``trainguard run`` and are restarted on failure.
"""

from trainguard.train.session import InjectedFaultError, RestoreInfo, Session, SessionError

__all__ = ["InjectedFaultError", "RestoreInfo", "Session", "SessionError"]
