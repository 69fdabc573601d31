"""The core (controller, agent, store, policy, CLI) imports without torch."""

from __future__ import annotations

import subprocess
import sys


def test_core_modules_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import trainguard.cli.main, trainguard.launcher, trainguard.agent.node_agent\n"
        "import trainguard.controller.job_controller, trainguard.store.sqlite\n"
        "import trainguard.agent.persister, trainguard.agent.standby\n"
        "heavy = sorted(name for name in ('torch', 'numpy') if name in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == ""
