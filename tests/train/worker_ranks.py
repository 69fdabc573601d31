"""Runs a worker script as the ranks of a small gloo job, each in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainguard import testing


def run_ranks(worker: Path, ranks: int, directory: Path) -> list[dict[str, Any]]:
    """Start ``worker RANK DIRECTORY`` for each rank; the JSON each printed last, by rank."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    processes = [subprocess.Popen([sys.executable, str(worker), str(rank), str(directory)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=environment, start_new_session=True)
                 for rank in range(ranks)]
    outputs = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=120)
            assert process.returncode == 0, output.decode()
            outputs.append(json.loads(output.decode().strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                testing.end_process_tree(process.pid)
                process.wait(30)
    return outputs
