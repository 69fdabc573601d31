from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("version", "command", "ack", "report", "register", "registered")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    version: int
    command: Command
    ack: Ack
    report: Report
    register: Register
    registered: Registered
    def __init__(self, version: _Optional[int] = ..., command: _Optional[_Union[Command, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., report: _Optional[_Union[Report, _Mapping]] = ..., register: _Optional[_Union[Register, _Mapping]] = ..., registered: _Optional[_Union[Registered, _Mapping]] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("job", "node_rank", "nnodes", "max_nodes", "nproc_per_node", "program", "version", "host", "address", "dp_size", "recovery", "persist_interval", "rejoin")
    JOB_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    PERSIST_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    job: str
    node_rank: int
    nnodes: int
    max_nodes: int
    nproc_per_node: int
    program: str
    version: str
    host: str
    address: str
    dp_size: int
    recovery: Recovery
    persist_interval: float
    rejoin: Rejoin
    def __init__(self, job: _Optional[str] = ..., node_rank: _Optional[int] = ..., nnodes: _Optional[int] = ..., max_nodes: _Optional[int] = ..., nproc_per_node: _Optional[int] = ..., program: _Optional[str] = ..., version: _Optional[str] = ..., host: _Optional[str] = ..., address: _Optional[str] = ..., dp_size: _Optional[int] = ..., recovery: _Optional[_Union[Recovery, _Mapping]] = ..., persist_interval: _Optional[float] = ..., rejoin: _Optional[_Union[Rejoin, _Mapping]] = ...) -> None: ...

class DeviceReport(_message.Message):
    __slots__ = ("node", "devices", "events", "device_info", "node_info", "switch_info")
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_INFO_FIELD_NUMBER: _ClassVar[int]
    NODE_INFO_FIELD_NUMBER: _ClassVar[int]
    SWITCH_INFO_FIELD_NUMBER: _ClassVar[int]
    node: str
    devices: _containers.RepeatedCompositeFieldContainer[DeviceCodes]
    events: _containers.RepeatedCompositeFieldContainer[DeviceEvent]
    device_info: str
    node_info: str
    switch_info: str
    def __init__(self, node: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[DeviceCodes, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[DeviceEvent, _Mapping]]] = ..., device_info: _Optional[str] = ..., node_info: _Optional[str] = ..., switch_info: _Optional[str] = ...) -> None: ...

class DeviceEvent(_message.Message):
    __slots__ = ("device", "code", "assertion", "time", "level")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ASSERTION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    device: int
    code: str
    assertion: str
    time: float
    level: str
    def __init__(self, device: _Optional[int] = ..., code: _Optional[str] = ..., assertion: _Optional[str] = ..., time: _Optional[float] = ..., level: _Optional[str] = ...) -> None: ...

class DeviceCodes(_message.Message):
    __slots__ = ("device", "codes")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    device: int
    codes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device: _Optional[int] = ..., codes: _Optional[_Iterable[str]] = ...) -> None: ...

class DeviceReportAck(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: _containers.RepeatedCompositeFieldContainer[DeviceGrade]
    def __init__(self, changed: _Optional[_Iterable[_Union[DeviceGrade, _Mapping]]] = ...) -> None: ...

class DeviceGrade(_message.Message):
    __slots__ = ("device", "level")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    device: int
    level: str
    def __init__(self, device: _Optional[int] = ..., level: _Optional[str] = ...) -> None: ...

class Rejoin(_message.Message):
    __slots__ = ("spare", "generation", "wait")
    SPARE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    spare: bool
    generation: int
    wait: float
    def __init__(self, spare: _Optional[bool] = ..., generation: _Optional[int] = ..., wait: _Optional[float] = ...) -> None: ...

class Recovery(_message.Message):
    __slots__ = ("max_restarts", "crash_loop_window", "crash_loop_repeats", "crash_loop_settle", "snapshot_grace", "recover_strategy", "recover_timeout", "fault_retry_times")
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    CRASH_LOOP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CRASH_LOOP_REPEATS_FIELD_NUMBER: _ClassVar[int]
    CRASH_LOOP_SETTLE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_GRACE_FIELD_NUMBER: _ClassVar[int]
    RECOVER_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    RECOVER_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FAULT_RETRY_TIMES_FIELD_NUMBER: _ClassVar[int]
    max_restarts: int
    crash_loop_window: float
    crash_loop_repeats: int
    crash_loop_settle: float
    snapshot_grace: float
    recover_strategy: _containers.RepeatedScalarFieldContainer[str]
    recover_timeout: float
    fault_retry_times: int
    def __init__(self, max_restarts: _Optional[int] = ..., crash_loop_window: _Optional[float] = ..., crash_loop_repeats: _Optional[int] = ..., crash_loop_settle: _Optional[float] = ..., snapshot_grace: _Optional[float] = ..., recover_strategy: _Optional[_Iterable[str]] = ..., recover_timeout: _Optional[float] = ..., fault_retry_times: _Optional[int] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("placement", "refused")
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    placement: Placement
    refused: Refusal
    def __init__(self, placement: _Optional[_Union[Placement, _Mapping]] = ..., refused: _Optional[_Union[Refusal, _Mapping]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("node_rank", "nnodes", "spare")
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    SPARE_FIELD_NUMBER: _ClassVar[int]
    node_rank: int
    nnodes: int
    spare: bool
    def __init__(self, node_rank: _Optional[int] = ..., nnodes: _Optional[int] = ..., spare: _Optional[bool] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("id", "start_generation", "recover", "dump", "complete_snapshots", "stop_workers", "stop_at", "settle", "flush_checkpoints", "describe", "host_store", "leave", "end_job", "take_ranks", "persist", "profiling")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECOVER_FIELD_NUMBER: _ClassVar[int]
    DUMP_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    STOP_WORKERS_FIELD_NUMBER: _ClassVar[int]
    STOP_AT_FIELD_NUMBER: _ClassVar[int]
    SETTLE_FIELD_NUMBER: _ClassVar[int]
    FLUSH_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    DESCRIBE_FIELD_NUMBER: _ClassVar[int]
    HOST_STORE_FIELD_NUMBER: _ClassVar[int]
    LEAVE_FIELD_NUMBER: _ClassVar[int]
    END_JOB_FIELD_NUMBER: _ClassVar[int]
    TAKE_RANKS_FIELD_NUMBER: _ClassVar[int]
    PERSIST_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    id: int
    start_generation: StartGeneration
    recover: Recover
    dump: Dump
    complete_snapshots: CompleteSnapshots
    stop_workers: StopWorkers
    stop_at: StopAt
    settle: Settle
    flush_checkpoints: FlushCheckpoints
    describe: Describe
    host_store: HostStore
    leave: Leave
    end_job: EndJob
    take_ranks: TakeRanks
    persist: Persist
    profiling: Profiling
    def __init__(self, id: _Optional[int] = ..., start_generation: _Optional[_Union[StartGeneration, _Mapping]] = ..., recover: _Optional[_Union[Recover, _Mapping]] = ..., dump: _Optional[_Union[Dump, _Mapping]] = ..., complete_snapshots: _Optional[_Union[CompleteSnapshots, _Mapping]] = ..., stop_workers: _Optional[_Union[StopWorkers, _Mapping]] = ..., stop_at: _Optional[_Union[StopAt, _Mapping]] = ..., settle: _Optional[_Union[Settle, _Mapping]] = ..., flush_checkpoints: _Optional[_Union[FlushCheckpoints, _Mapping]] = ..., describe: _Optional[_Union[Describe, _Mapping]] = ..., host_store: _Optional[_Union[HostStore, _Mapping]] = ..., leave: _Optional[_Union[Leave, _Mapping]] = ..., end_job: _Optional[_Union[EndJob, _Mapping]] = ..., take_ranks: _Optional[_Union[TakeRanks, _Mapping]] = ..., persist: _Optional[_Union[Persist, _Mapping]] = ..., profiling: _Optional[_Union[Profiling, _Mapping]] = ...) -> None: ...

class Profiling(_message.Message):
    __slots__ = ("switch",)
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    switch: str
    def __init__(self, switch: _Optional[str] = ...) -> None: ...

class Persist(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class TakeRanks(_message.Message):
    __slots__ = ("node_rank",)
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    node_rank: int
    def __init__(self, node_rank: _Optional[int] = ...) -> None: ...

class Rendezvous(_message.Message):
    __slots__ = ("address", "port")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    address: str
    port: int
    def __init__(self, address: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class StartGeneration(_message.Message):
    __slots__ = ("number", "restart_count", "move", "rendezvous", "restore_step", "peers")
    class PeersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    MOVE_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_STEP_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    number: int
    restart_count: int
    move: _containers.RepeatedScalarFieldContainer[int]
    rendezvous: Rendezvous
    restore_step: int
    peers: _containers.ScalarMap[int, int]
    def __init__(self, number: _Optional[int] = ..., restart_count: _Optional[int] = ..., move: _Optional[_Iterable[int]] = ..., rendezvous: _Optional[_Union[Rendezvous, _Mapping]] = ..., restore_step: _Optional[int] = ..., peers: _Optional[_Mapping[int, int]] = ...) -> None: ...

class Recover(_message.Message):
    __slots__ = ("number", "restart_count", "replace", "to_spares", "rendezvous", "restore_step", "peers")
    class PeersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    TO_SPARES_FIELD_NUMBER: _ClassVar[int]
    RENDEZVOUS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_STEP_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    number: int
    restart_count: int
    replace: _containers.RepeatedScalarFieldContainer[int]
    to_spares: bool
    rendezvous: Rendezvous
    restore_step: int
    peers: _containers.ScalarMap[int, int]
    def __init__(self, number: _Optional[int] = ..., restart_count: _Optional[int] = ..., replace: _Optional[_Iterable[int]] = ..., to_spares: _Optional[bool] = ..., rendezvous: _Optional[_Union[Rendezvous, _Mapping]] = ..., restore_step: _Optional[int] = ..., peers: _Optional[_Mapping[int, int]] = ...) -> None: ...

class HostStore(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Leave(_message.Message):
    __slots__ = ("replace",)
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    replace: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, replace: _Optional[_Iterable[int]] = ...) -> None: ...

class EndJob(_message.Message):
    __slots__ = ("exit_code", "outcome", "reason", "generations", "restarts_used", "resume_step", "wall_seconds", "errors", "host_leaves")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_USED_FIELD_NUMBER: _ClassVar[int]
    RESUME_STEP_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    HOST_LEAVES_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    outcome: str
    reason: str
    generations: int
    restarts_used: int
    resume_step: int
    wall_seconds: float
    errors: str
    host_leaves: bool
    def __init__(self, exit_code: _Optional[int] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ..., generations: _Optional[int] = ..., restarts_used: _Optional[int] = ..., resume_step: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., errors: _Optional[str] = ..., host_leaves: _Optional[bool] = ...) -> None: ...

class Dump(_message.Message):
    __slots__ = ("failed",)
    FAILED_FIELD_NUMBER: _ClassVar[int]
    failed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, failed: _Optional[_Iterable[int]] = ...) -> None: ...

class CompleteSnapshots(_message.Message):
    __slots__ = ("failed_rank", "timeout", "step")
    FAILED_RANK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    failed_rank: int
    timeout: float
    step: int
    def __init__(self, failed_rank: _Optional[int] = ..., timeout: _Optional[float] = ..., step: _Optional[int] = ...) -> None: ...

class StopWorkers(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StopAt(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class Describe(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Settle(_message.Message):
    __slots__ = ("timeout",)
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    timeout: float
    def __init__(self, timeout: _Optional[float] = ...) -> None: ...

class FlushCheckpoints(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Ack(_message.Message):
    __slots__ = ("command_id", "done", "generation", "dump", "refused", "failed", "store", "persisted", "report")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DUMP_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    command_id: int
    done: Done
    generation: Generation
    dump: DumpResult
    refused: Refusal
    failed: Failure
    store: Rendezvous
    persisted: Persisted
    report: Report
    def __init__(self, command_id: _Optional[int] = ..., done: _Optional[_Union[Done, _Mapping]] = ..., generation: _Optional[_Union[Generation, _Mapping]] = ..., dump: _Optional[_Union[DumpResult, _Mapping]] = ..., refused: _Optional[_Union[Refusal, _Mapping]] = ..., failed: _Optional[_Union[Failure, _Mapping]] = ..., store: _Optional[_Union[Rendezvous, _Mapping]] = ..., persisted: _Optional[_Union[Persisted, _Mapping]] = ..., report: _Optional[_Union[Report, _Mapping]] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Persisted(_message.Message):
    __slots__ = ("durable",)
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    durable: bool
    def __init__(self, durable: _Optional[bool] = ...) -> None: ...

class DumpResult(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("seq", "agent", "generation", "sent_at")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    agent: AgentState
    generation: Generation
    sent_at: float
    def __init__(self, seq: _Optional[int] = ..., agent: _Optional[_Union[AgentState, _Mapping]] = ..., generation: _Optional[_Union[Generation, _Mapping]] = ..., sent_at: _Optional[float] = ...) -> None: ...

class AgentState(_message.Message):
    __slots__ = ("host", "world_size", "dp_size", "spares_left", "node_rank", "disk_steps", "spare", "replicas_differ")
    HOST_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    SPARES_LEFT_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    DISK_STEPS_FIELD_NUMBER: _ClassVar[int]
    SPARE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_DIFFER_FIELD_NUMBER: _ClassVar[int]
    host: str
    world_size: int
    dp_size: int
    spares_left: int
    node_rank: int
    disk_steps: _containers.RepeatedScalarFieldContainer[int]
    spare: bool
    replicas_differ: str
    def __init__(self, host: _Optional[str] = ..., world_size: _Optional[int] = ..., dp_size: _Optional[int] = ..., spares_left: _Optional[int] = ..., node_rank: _Optional[int] = ..., disk_steps: _Optional[_Iterable[int]] = ..., spare: _Optional[bool] = ..., replicas_differ: _Optional[str] = ...) -> None: ...

class Generation(_message.Message):
    __slots__ = ("number", "master_port", "started_at", "kept", "restore", "plan_seconds", "workers", "completed_step", "all_stepping_at", "outcome")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    PLAN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_STEP_FIELD_NUMBER: _ClassVar[int]
    ALL_STEPPING_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    number: int
    master_port: int
    started_at: float
    kept: int
    restore: Restore
    plan_seconds: float
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    completed_step: int
    all_stepping_at: float
    outcome: Outcome
    def __init__(self, number: _Optional[int] = ..., master_port: _Optional[int] = ..., started_at: _Optional[float] = ..., kept: _Optional[int] = ..., restore: _Optional[_Union[Restore, _Mapping]] = ..., plan_seconds: _Optional[float] = ..., workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ..., completed_step: _Optional[int] = ..., all_stepping_at: _Optional[float] = ..., outcome: _Optional[_Union[Outcome, _Mapping]] = ...) -> None: ...

class Restore(_message.Message):
    __slots__ = ("source", "step", "note", "label")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    source: str
    step: int
    note: str
    label: str
    def __init__(self, source: _Optional[str] = ..., step: _Optional[int] = ..., note: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ("rank", "returncode", "stopping", "exited_at", "alive", "in_process", "left", "device", "excerpt", "begun_step", "snapshot_step", "held_steps")
    RANK_FIELD_NUMBER: _ClassVar[int]
    RETURNCODE_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    EXITED_AT_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    IN_PROCESS_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    BEGUN_STEP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_STEP_FIELD_NUMBER: _ClassVar[int]
    HELD_STEPS_FIELD_NUMBER: _ClassVar[int]
    rank: int
    returncode: int
    stopping: bool
    exited_at: float
    alive: bool
    in_process: bool
    left: Left
    device: int
    excerpt: str
    begun_step: int
    snapshot_step: int
    held_steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, rank: _Optional[int] = ..., returncode: _Optional[int] = ..., stopping: _Optional[bool] = ..., exited_at: _Optional[float] = ..., alive: _Optional[bool] = ..., in_process: _Optional[bool] = ..., left: _Optional[_Union[Left, _Mapping]] = ..., device: _Optional[int] = ..., excerpt: _Optional[str] = ..., begun_step: _Optional[int] = ..., snapshot_step: _Optional[int] = ..., held_steps: _Optional[_Iterable[int]] = ...) -> None: ...

class Left(_message.Message):
    __slots__ = ("generation", "step", "error", "code", "time")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    generation: int
    step: int
    error: str
    code: str
    time: float
    def __init__(self, generation: _Optional[int] = ..., step: _Optional[int] = ..., error: _Optional[str] = ..., code: _Optional[str] = ..., time: _Optional[float] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("kind", "fault", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    fault: Fault
    detail: str
    def __init__(self, kind: _Optional[str] = ..., fault: _Optional[_Union[Fault, _Mapping]] = ..., detail: _Optional[str] = ...) -> None: ...

class Fault(_message.Message):
    __slots__ = ("rank", "pid", "kind", "detected_at", "returncode", "last_step", "occurred_at", "injected", "detail", "error_excerpt", "code", "alive", "device", "level")
    RANK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DETECTED_AT_FIELD_NUMBER: _ClassVar[int]
    RETURNCODE_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    INJECTED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ERROR_EXCERPT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    rank: int
    pid: int
    kind: str
    detected_at: float
    returncode: int
    last_step: int
    occurred_at: float
    injected: str
    detail: str
    error_excerpt: str
    code: str
    alive: bool
    device: str
    level: str
    def __init__(self, rank: _Optional[int] = ..., pid: _Optional[int] = ..., kind: _Optional[str] = ..., detected_at: _Optional[float] = ..., returncode: _Optional[int] = ..., last_step: _Optional[int] = ..., occurred_at: _Optional[float] = ..., injected: _Optional[str] = ..., detail: _Optional[str] = ..., error_excerpt: _Optional[str] = ..., code: _Optional[str] = ..., alive: _Optional[bool] = ..., device: _Optional[str] = ..., level: _Optional[str] = ...) -> None: ...

class DeviceRequest(_message.Message):
    __slots__ = ("node", "device", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    device: int
    reason: str
    def __init__(self, node: _Optional[str] = ..., device: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class DeviceAnswer(_message.Message):
    __slots__ = ("ok", "text")
    OK_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    text: str
    def __init__(self, ok: _Optional[bool] = ..., text: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("version", "jobs", "nodes")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    version: int
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeDevices]
    def __init__(self, version: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[NodeDevices, _Mapping]]] = ...) -> None: ...

class NodeDevices(_message.Message):
    __slots__ = ("node", "jobs", "devices")
    NODE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    node: str
    jobs: _containers.RepeatedScalarFieldContainer[str]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceStatus]
    def __init__(self, node: _Optional[str] = ..., jobs: _Optional[_Iterable[str]] = ..., devices: _Optional[_Iterable[_Union[DeviceStatus, _Mapping]]] = ...) -> None: ...

class DeviceStatus(_message.Message):
    __slots__ = ("device", "level", "health", "separated", "codes", "job")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    SEPARATED_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    device: int
    level: str
    health: str
    separated: bool
    codes: _containers.RepeatedScalarFieldContainer[str]
    job: str
    def __init__(self, device: _Optional[int] = ..., level: _Optional[str] = ..., health: _Optional[str] = ..., separated: _Optional[bool] = ..., codes: _Optional[_Iterable[str]] = ..., job: _Optional[str] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job", "state", "nnodes", "nproc_per_node", "generation", "hosts")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    state: str
    nnodes: int
    nproc_per_node: int
    generation: int
    hosts: _containers.RepeatedCompositeFieldContainer[HostStatus]
    def __init__(self, job: _Optional[str] = ..., state: _Optional[str] = ..., nnodes: _Optional[int] = ..., nproc_per_node: _Optional[int] = ..., generation: _Optional[int] = ..., hosts: _Optional[_Iterable[_Union[HostStatus, _Mapping]]] = ...) -> None: ...

class HostStatus(_message.Message):
    __slots__ = ("place", "host", "state", "ranks")
    PLACE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    place: int
    host: str
    state: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, place: _Optional[int] = ..., host: _Optional[str] = ..., state: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ...) -> None: ...
