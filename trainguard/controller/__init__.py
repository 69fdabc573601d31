"""The controller: decides what to do about each fault and drives the agents through recovery.

Deciding is pure (:mod:`.policy`); doing is :mod:`.job_controller`, which talks to node agents
only through the interface in :mod:`.api`, so an agent in this process and one on another host
look the same to it.
"""

__all__: list[str] = []
