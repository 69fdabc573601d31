"""What one node agent runs: the program, its ranks, and how their processes are kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainguard.agent import fault_injection, snapshot_interval, worker_output, workers
from trainguard.job import profiling_switch, replicas

__all__ = ["AgentSettings"]


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    nproc_per_node: int
    program: workers.ProgramSpec
    run_id: str
    run_dir: Path
    role: str = "default"
    node_rank: int = 0
    """This host's place in the job (torchrun's GROUP_RANK): its ranks are
    ``node_rank * nproc_per_node`` onwards."""
    nnodes: int = 1
    """Hosts that hold ranks (spare hosts not counted)."""
    spare: bool = False
    """A spare host: it holds no ranks until it takes a lost host's (``node_rank``)."""
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
    """Seconds the surviving ranks get at most to leave a generation (finish a snapshot in
    progress, cut the communicator) before a process-level recovery ends those still in it and
    restarts them from their snapshots. A rank inside a step gets no more than its step
    deadline (the hang detector's): a cut collective fails at once, and one that does not never
    will."""
    snapshot_every: str = "1"
    """Steps between memory snapshots: a number, or auto (every step while a snapshot stalls
    training by at most --snapshot-share of a step, else fewer, from the measured stall and
    failure rate; docs/snapshot-interval.md). 1 loses no completed step to a fault."""
    snapshot_share: float = 0.05
    """The part of a step a snapshot may stall training, 0 < share < 1: past it auto snapshots
    less often, and a fixed interval gets a recommendation. 0.05: the overhead of a periodic
    flash checkpoint that users accept today."""
    device_failure_interval: float = 180_000_000.0
    """Mean time between failures of one device, in seconds, assumed until the job has had a
    fault (then its own rate counts); the job's is this over its ranks. 50,000 h: Llama 3's 419
    unexpected interruptions in 54 days on 16,384 GPUs."""

    profiling: str = "off"
    """Lightweight-profiling marks the ranks record from the start: light (each step, forward
    pass, data-loader fetch and checkpoint save), heavy (also each all-reduce), off, or the
    original's profilingSwitch JSON; switched while the job runs with trainguard profiling
    (docs/profiling.md)."""
    profiling_dir: Path | None = None
    """Where the ranks' profiling records go, as DIR/TASK/RANK/ (TASK: MINDX_TASK_ID, else the
    job's id); default RUN_DIR/profiling."""

    @property
    def profiling_switch(self) -> profiling_switch.ProfilingSwitch:
        return profiling_switch.ProfilingSwitch.parse(self.profiling)

    @property
    def profiling_root(self) -> Path:
        return self.profiling_dir or self.run_dir / "profiling"

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def ranks(self) -> range:
        """The global ranks this host runs (none while it is a spare)."""
        if self.spare:
            return range(0)
        return range(self.node_rank * self.nproc_per_node,
                     (self.node_rank + 1) * self.nproc_per_node)

    def placed(self, *, node_rank: int, nnodes: int, address: str,
               spare: bool = False) -> AgentSettings:
        """These settings for node ``node_rank`` of a job across ``nnodes`` hosts (a
        ``spare`` joined at that place), serving rendezvous stores on ``address``: its run
        directory (and the default log directory in it) is the job's ``node-<rank>``, so
        hosts sharing a file system keep apart."""
        run_dir = self.run_dir / f"node-{node_rank}"
        output = self.output
        if output.log_dir is not None and output.log_dir.is_relative_to(self.run_dir):
            output = dataclasses.replace(
                output, log_dir=run_dir / output.log_dir.relative_to(self.run_dir))
        return dataclasses.replace(self, node_rank=node_rank, nnodes=nnodes, master_addr=address,
                                   run_dir=run_dir, output=output, spare=spare)

    @property
    def snapshot_interval(self) -> int | None:
        """The fixed interval in steps; None for auto."""
        return snapshot_interval.parse_every(self.snapshot_every)

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1:
            raise ValueError(f"nproc-per-node must be >= 1, got {self.nproc_per_node}")
        if self.nnodes < 1:
            raise ValueError(f"nnodes must be >= 1, got {self.nnodes}")
        if not self.spare and self.node_rank not in range(self.nnodes):
            raise ValueError(f"node-rank must be 0..{self.nnodes - 1}, got {self.node_rank}")
        if self.spare_devices < 0:
            raise ValueError(f"spare-devices must be >= 0, got {self.spare_devices}")
        if self.dp_size is not None and self.dp_size < 1:
            raise ValueError(f"dp-size must be >= 1, got {self.dp_size}")
        replicas.ReplicaLayout(self.world_size, self.dp_size or self.world_size)
        if self.max_restarts < 0:
            raise ValueError(f"max-restarts must be >= 0, got {self.max_restarts}")
        if self.master_port is not None and self.master_port not in range(1, 65536):
            raise ValueError(f"master-port must be 1..65535, got {self.master_port}")
        snapshot_interval.parse_every(self.snapshot_every)
        try:
            profiling_switch.ProfilingSwitch.parse(self.profiling)
        except profiling_switch.SwitchError as error:
            raise ValueError(f"profiling: {error}") from None
        if not 0 < self.snapshot_share < 1:
            raise ValueError(f"snapshot-share must be > 0 and < 1, got {self.snapshot_share}")
        for name in ("monitor_interval", "shutdown_timeout", "leave_timeout",
                     "device_failure_interval"):
            if not getattr(self, name) > 0:  # NaN fails this too
                flag = name.replace("_", "-")
                raise ValueError(f"{flag} must be > 0 seconds, got {getattr(self, name)}")
        for planned in self.fault_plan:
            if planned.rank not in range(self.world_size):
                raise ValueError(f"fault plan names rank {planned.rank}; the job has ranks "
                                 f"0..{self.world_size - 1}")
