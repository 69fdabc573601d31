"""Fault sources that turn observations into faults: for now, the hang (heartbeat) detector."""

__all__: list[str] = []
