"""dlrover-run for the recovery benchmark: DLRover 0.6.1's launcher, made to start on torch 2.13.

Takes exactly the arguments of ``dlrover-run`` and runs under the DLRover virtual environment
(see benchmarks/dlrover_recovery.py), not trainguard's:

    /tmp/dlrover-venv/bin/python benchmarks/jobs/dlrover_launch.py --standalone \\
        --nproc_per_node=4 --max_restarts=3 benchmarks/jobs/dlrover_job.py --steps 400

Nothing in site-packages is edited; the one fix below is applied to the loaded classes before
DLRover's entry point runs.

Fix: ``SubprocessHandler``'s ``numa_options`` gets the default ``None``. In ``--standalone``
mode dlrover-run starts its own master process through torch's
``torch.distributed.elastic.multiprocessing.subprocess_handler.SubprocessHandler``, passing
six arguments (entry point, args, env, stdout, stderr, local rank), which is that class's
signature from torch 2.3 on. torch 2.13 added a seventh parameter, ``numa_options``, with no
default, so the launcher dies with a TypeError before any worker starts. ``None`` is what
torch itself passes when no NUMA binding is asked for, which is also what DLRover wants for a
master process; the call torch makes for the workers passes the argument and is unaffected.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import cast

from dlrover.trainer.torch import elastic_run
from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler


def default_numa_options() -> None:
    """Let SubprocessHandler be built without ``numa_options`` (see the module docstring)."""
    init = cast(types.FunctionType, subprocess_handler.SubprocessHandler.__init__)
    parameters = list(inspect.signature(init).parameters.values())
    if not parameters or parameters[-1].name != "numa_options":
        return  # an older torch, or a newer one that changed the signature again: leave it
    if parameters[-1].default is inspect.Parameter.empty:
        init.__defaults__ = (*(init.__defaults__ or ()), None)


def main() -> None:
    default_numa_options()
    sys.argv[0] = "dlrover-run"
    elastic_run.main(sys.argv[1:])


if __name__ == "__main__":
    main()
