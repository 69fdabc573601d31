"""What one node agent runs: the program, its ranks, and how their processes are kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainguard.agent import fault_injection, worker_output, workers
from trainguard.faults import replicas

__all__ = ["AgentSettings"]


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    nproc_per_node: int
    program: workers.ProgramSpec
    run_id: str
    run_dir: Path
    role: str = "default"
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    max_restarts: int = 0
    monitor_interval: float = 0.1
    shutdown_timeout: float = 30.0
    preload: tuple[str, ...] = ("torch", "torch._dynamo", "torch.nn.parallel",
                                "trainguard.train")
    """Modules the standby process imports before forking workers. torch._dynamo is imported
    by the first optimizer a script creates and costs a second by itself."""
    output: worker_output.OutputSettings = dataclasses.field(
        default_factory=worker_output.OutputSettings)
    fault_plan: tuple[fault_injection.PlannedFault, ...] = ()
    dp_size: int | None = None
    """Data-parallel replicas (R7); default: the world size (pure data parallel)."""
    spare_devices: int = 0
    """Devices kept free for ranks moved off a failed device (strategy recover), each with a
    process ready to become a worker."""
    leave_timeout: float = 10.0
    """Seconds the surviving ranks get to leave a generation (finish a snapshot in progress,
    cut the communicator) before a process-level recovery gives up."""

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1:
            raise ValueError(f"nproc-per-node must be >= 1, got {self.nproc_per_node}")
        if self.spare_devices < 0:
            raise ValueError(f"spare-devices must be >= 0, got {self.spare_devices}")
        if self.dp_size is not None and self.dp_size < 1:
            raise ValueError(f"dp-size must be >= 1, got {self.dp_size}")
        replicas.ReplicaLayout(self.nproc_per_node, self.dp_size or self.nproc_per_node)
        if self.max_restarts < 0:
            raise ValueError(f"max-restarts must be >= 0, got {self.max_restarts}")
        if self.master_port is not None and self.master_port not in range(1, 65536):
            raise ValueError(f"master-port must be 1..65535, got {self.master_port}")
        for name in ("monitor_interval", "shutdown_timeout", "leave_timeout"):
            if not getattr(self, name) > 0:  # NaN fails this too
                flag = name.replace("_", "-")
                raise ValueError(f"{flag} must be > 0 seconds, got {getattr(self, name)}")
        for planned in self.fault_plan:
            if planned.rank not in range(self.nproc_per_node):
                raise ValueError(f"fault plan names rank {planned.rank}; the job has ranks "
                                 f"0..{self.nproc_per_node - 1}")
