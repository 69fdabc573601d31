"""The ``trainguard`` command line."""

__all__: list[str] = []
