"""The state store: named JSON documents (the original's ConfigMaps) and the event log.

Backends implement :class:`trainguard.store.api.StateStore`. The embedded backend is SQLite in the
run directory (:mod:`trainguard.store.sqlite`); multi-host backends (etcd, Kubernetes) come later.
Everything the controller decides and every fault it sees is appended here, so a restarted
controller, or a later ``trainguard events`` command, reads the same history.
"""

__all__: list[str] = []
