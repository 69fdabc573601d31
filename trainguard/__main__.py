"""``python -m trainguard`` is the ``trainguard`` command."""

from trainguard.cli.main import main

__all__: list[str] = []

main()
