"""Public faults: their configuration (publicFaultConfiguration.json) and the messages that
carry them, validated, rate-limited and cached."""

__all__: list[str] = []
