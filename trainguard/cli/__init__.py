"""The ``trainguard`` command line."""
