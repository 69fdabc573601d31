"""torchrun 2.13's flags, as ``trainguard run`` accepts them: same spellings, defaults, PET_ vars.

``tests/cli/test_torchrun_flags.py`` compares this table with ``torch.distributed.run``'s own
parser, so a flag torchrun gains or changes shows up as a failing test, not as a user's surprise.
Flags marked ``ignored`` are accepted so that existing launch lines keep working; setting one to
something other than its default prints a warning that says it has no effect here.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from trainguard.cli import durations

__all__ = ["FLAGS", "TorchrunFlag"]


@dataclasses.dataclass(frozen=True)
class TorchrunFlag:
    names: tuple[str, ...]
    dest: str
    default: object
    type: Callable[[str], Any] | None  # None: an on/off flag
    help: str
    ignored: str = ""  # why the flag has no effect here; empty when it does
    metavar: str | None = None  # for the help; None: argparse's (the destination in capitals)

    @property
    def env(self) -> str:
        """torchrun's environment fallback for the flag."""
        return f"PET_{self.dest.upper()}"


def _seconds(text: str) -> float:
    """torchrun's seconds, with units allowed (``500ms``, ``1m``); plain numbers as torchrun."""
    try:
        return durations.parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _both(name: str) -> tuple[str, ...]:
    """``--nproc-per-node`` and ``--nproc_per_node``, as torchrun spells its flags."""
    return (f"--{name}", f"--{name.replace('-', '_')}")


_ONE_NODE = ("on one node (--nnodes 1) trainguard keeps its own rendezvous per generation; "
             "across nodes the controller at --rdzv-endpoint is the rendezvous")

FLAGS: tuple[TorchrunFlag, ...] = (
    TorchrunFlag(("--nnodes",), "nnodes", "1:1", str,
                 "Number of nodes, or MIN:MAX; only 1 is supported for now."),
    TorchrunFlag(_both("nproc-per-node"), "nproc_per_node", "1", str,
                 "Workers per node: a number, 'cpu' (one per CPU), 'gpu' (one per GPU) or "
                 "'auto' (GPUs if any, else CPUs)."),
    TorchrunFlag(_both("rdzv-backend"), "rdzv_backend", "static", str, "Rendezvous backend.",
                 ignored=_ONE_NODE),
    TorchrunFlag(_both("rdzv-endpoint"), "rdzv_endpoint", "", str, "Rendezvous endpoint.",
                 ignored=_ONE_NODE),
    TorchrunFlag((*_both("rdzv-id"), "--run-id"), "rdzv_id", "none", str,
                 "Job id (TORCHELASTIC_RUN_ID) and the name of its run directory; 'none' makes "
                 "a new one. Reuse an id to resume that job from its checkpoints."),
    TorchrunFlag(_both("rdzv-conf"), "rdzv_conf", "", str, "Rendezvous configuration.",
                 ignored=_ONE_NODE),
    TorchrunFlag(("--standalone",), "standalone", False, None,
                 "Single-node job with a local rendezvous (what trainguard always does)."),
    TorchrunFlag(_both("max-restarts"), "max_restarts", 0, int,
                 "Restarts of any cause allowed before the job fails (see --fault-retry-times)."),
    TorchrunFlag(_both("monitor-interval"), "monitor_interval", 0.1, _seconds,
                 "Seconds between checks of the workers' heartbeats.", metavar="DURATION"),
    TorchrunFlag(_both("start-method"), "start_method", "spawn", str, "Worker start method.",
                 ignored="workers are forked from a standby process that has imported torch"),
    TorchrunFlag(_both("event-log-handler"), "event_log_handler", "null", str,
                 "torchelastic event log handler.",
                 ignored="events go to the run's state store; see `trainguard events`"),
    TorchrunFlag(("--role",), "role", "default", str, "Role of the workers (ROLE_NAME)."),
    TorchrunFlag(("-m", "--module"), "module", False, None,
                 "Run the training script as a module, like `python -m`."),
    TorchrunFlag(_both("no-python"), "no_python", False, None,
                 "Execute the training script as a program, without the Python interpreter."),
    TorchrunFlag(_both("run-path"), "run_path", False, None,
                 "Run the script with runpy.run_path (trainguard always does)."),
    TorchrunFlag(_both("log-dir"), "log_dir", None, str,
                 "Directory for the workers' log files (default: <run dir>/logs)."),
    TorchrunFlag(("-r", "--redirects"), "redirects", "0", str,
                 "Send worker output only to log files: 0 none, 1 stdout, 2 stderr, 3 both; or "
                 "per local rank, e.g. 0:1,1:3."),
    TorchrunFlag(("-t", "--tee"), "tee", "0", str,
                 "Send worker output to log files and the console (values as --redirects)."),
    TorchrunFlag(_both("local-ranks-filter"), "local_ranks_filter", "", str,
                 "Comma-separated local ranks whose output is shown on the console."),
    TorchrunFlag(_both("duplicate-stdout-filters"), "duplicate_stdout_filters", [], str,
                 "Filters for duplicated stdout lines.", ignored="not supported yet"),
    TorchrunFlag(_both("duplicate-stderr-filters"), "duplicate_stderr_filters", [], str,
                 "Filters for duplicated stderr lines.", ignored="not supported yet"),
    TorchrunFlag(_both("node-rank"), "node_rank", 0, int,
                 "Rank of this node, 0..nnodes-1 (rdzv-backend static; with c10d or etcd the "
                 "controller assigns one)."),
    TorchrunFlag(_both("master-addr"), "master_addr", "127.0.0.1", str,
                 "Address of rank 0, which hosts each generation's store (MASTER_ADDR)."),
    TorchrunFlag(_both("master-port"), "master_port", None, int,
                 "Port for the first generation's store; later generations take fresh ports."),
    TorchrunFlag(_both("local-addr"), "local_addr", None, str, "Address of this node.",
                 ignored=_ONE_NODE),
    TorchrunFlag(_both("logs-specs"), "logs_specs", None, str, "LogsSpecs implementation.",
                 ignored="worker logs follow --log-dir, --redirects and --tee"),
    TorchrunFlag(_both("numa-binding"), "numa_binding", None, str, "NUMA binding of workers.",
                 ignored="not supported yet"),
    TorchrunFlag(_both("signals-to-handle"), "signals_to_handle",
                 "SIGTERM,SIGINT,SIGHUP,SIGQUIT", str,
                 "Signals that stop the job gracefully (a dying checkpoint first)."),
    TorchrunFlag(_both("shutdown-timeout"), "shutdown_timeout", None, _seconds,
                 "Seconds workers get to stop gracefully before they are killed (default 30).",
                 metavar="DURATION"),
    TorchrunFlag(_both("virtual-local-rank"), "virtual_local_rank", False, None,
                 "Give every worker LOCAL_RANK 0.", ignored="not supported yet"),
)
