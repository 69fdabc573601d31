"""Every package the code imports is one the project declares: a fresh install must run it.

(A module that imported ``click``, which only the dev tools pulled in, once broke ``make run``
on a fresh clone while ``make test`` passed.)
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # nvidia: its client is imported only where GPUs are counted, inside a guard that says
    # how to install it when it is missing.
    extras = project["optional-dependencies"]
    requirements = [*project["dependencies"], *extras["torch"], *extras["nvidia"],
                    *extras["report"], *extras["etcd"]]
    return {re.split(r"[\s<>=!~\[;]", item, maxsplit=1)[0].lower().replace("_", "-")
            for item in requirements}


def _imported() -> dict[str, Path]:
    """Top-level third-party modules imported by the package, with a file importing each."""
    found: dict[str, Path] = {}
    for path in (ROOT / "trainguard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top != "trainguard" and top not in sys.stdlib_module_names:
                    found.setdefault(top, path)
    return found


def test_every_imported_package_is_a_declared_dependency() -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = {
        module: str(path.relative_to(ROOT))
        for module, path in _imported().items()
        if not {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        & declared
    }
    assert undeclared == {}
