"""Every benchmark test measures: it runs alone (``make test`` runs the ``serial`` tests one at
a time, after the others)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.serial)
