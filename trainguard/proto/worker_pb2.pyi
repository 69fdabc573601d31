from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("version", "hello", "step", "activity", "snapshot", "fault_injected", "failing", "recovery_supported", "left", "finished", "stop_requested", "reserve_slot", "restore_plan_request", "slot_granted", "restore_plan", "request_failed", "inject", "stop_at", "abort", "rejoin", "snapshot_interval", "inject_request", "control_reply", "device_fault_request", "complete_shares", "replicas_differ", "profiling", "profiling_request")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    FAULT_INJECTED_FIELD_NUMBER: _ClassVar[int]
    FAILING_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RESERVE_SLOT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_PLAN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    SLOT_GRANTED_FIELD_NUMBER: _ClassVar[int]
    RESTORE_PLAN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FAILED_FIELD_NUMBER: _ClassVar[int]
    INJECT_FIELD_NUMBER: _ClassVar[int]
    STOP_AT_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    INJECT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    CONTROL_REPLY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FAULT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_SHARES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_DIFFER_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    PROFILING_REQUEST_FIELD_NUMBER: _ClassVar[int]
    version: int
    hello: Hello
    step: StepMark
    activity: Activity
    snapshot: SnapshotCommitted
    fault_injected: FaultInjected
    failing: WorkerFailing
    recovery_supported: RecoverySupported
    left: LeftGeneration
    finished: Finished
    stop_requested: StopRequested
    reserve_slot: ReserveSlot
    restore_plan_request: RestorePlanRequest
    slot_granted: SlotGranted
    restore_plan: RestorePlan
    request_failed: RequestFailed
    inject: InjectFault
    stop_at: StopAt
    abort: Abort
    rejoin: Rejoin
    snapshot_interval: SnapshotInterval
    inject_request: InjectRequest
    control_reply: ControlReply
    device_fault_request: DeviceFaultRequest
    complete_shares: CompleteShares
    replicas_differ: ReplicasDiffer
    profiling: Profiling
    profiling_request: ProfilingRequest
    def __init__(self, version: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., step: _Optional[_Union[StepMark, _Mapping]] = ..., activity: _Optional[_Union[Activity, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotCommitted, _Mapping]] = ..., fault_injected: _Optional[_Union[FaultInjected, _Mapping]] = ..., failing: _Optional[_Union[WorkerFailing, _Mapping]] = ..., recovery_supported: _Optional[_Union[RecoverySupported, _Mapping]] = ..., left: _Optional[_Union[LeftGeneration, _Mapping]] = ..., finished: _Optional[_Union[Finished, _Mapping]] = ..., stop_requested: _Optional[_Union[StopRequested, _Mapping]] = ..., reserve_slot: _Optional[_Union[ReserveSlot, _Mapping]] = ..., restore_plan_request: _Optional[_Union[RestorePlanRequest, _Mapping]] = ..., slot_granted: _Optional[_Union[SlotGranted, _Mapping]] = ..., restore_plan: _Optional[_Union[RestorePlan, _Mapping]] = ..., request_failed: _Optional[_Union[RequestFailed, _Mapping]] = ..., inject: _Optional[_Union[InjectFault, _Mapping]] = ..., stop_at: _Optional[_Union[StopAt, _Mapping]] = ..., abort: _Optional[_Union[Abort, _Mapping]] = ..., rejoin: _Optional[_Union[Rejoin, _Mapping]] = ..., snapshot_interval: _Optional[_Union[SnapshotInterval, _Mapping]] = ..., inject_request: _Optional[_Union[InjectRequest, _Mapping]] = ..., control_reply: _Optional[_Union[ControlReply, _Mapping]] = ..., device_fault_request: _Optional[_Union[DeviceFaultRequest, _Mapping]] = ..., complete_shares: _Optional[_Union[CompleteShares, _Mapping]] = ..., replicas_differ: _Optional[_Union[ReplicasDiffer, _Mapping]] = ..., profiling: _Optional[_Union[Profiling, _Mapping]] = ..., profiling_request: _Optional[_Union[ProfilingRequest, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("rank", "local_rank", "pid", "generation", "secret")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_rank: int
    pid: int
    generation: int
    secret: str
    def __init__(self, rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., pid: _Optional[int] = ..., generation: _Optional[int] = ..., secret: _Optional[str] = ...) -> None: ...

class StepMark(_message.Message):
    __slots__ = ("step", "phase", "time")
    STEP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    step: int
    phase: str
    time: float
    def __init__(self, step: _Optional[int] = ..., phase: _Optional[str] = ..., time: _Optional[float] = ...) -> None: ...

class Activity(_message.Message):
    __slots__ = ("kind", "active", "time")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    active: bool
    time: float
    def __init__(self, kind: _Optional[str] = ..., active: _Optional[bool] = ..., time: _Optional[float] = ...) -> None: ...

class SnapshotCommitted(_message.Message):
    __slots__ = ("step", "slot", "seq", "nbytes", "copy_seconds", "time")
    STEP_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    step: int
    slot: int
    seq: int
    nbytes: int
    copy_seconds: float
    time: float
    def __init__(self, step: _Optional[int] = ..., slot: _Optional[int] = ..., seq: _Optional[int] = ..., nbytes: _Optional[int] = ..., copy_seconds: _Optional[float] = ..., time: _Optional[float] = ...) -> None: ...

class FaultInjected(_message.Message):
    __slots__ = ("kind", "step", "time")
    KIND_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    step: int
    time: float
    def __init__(self, kind: _Optional[str] = ..., step: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class WorkerFailing(_message.Message):
    __slots__ = ("error", "time", "code")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    error: str
    time: float
    code: str
    def __init__(self, error: _Optional[str] = ..., time: _Optional[float] = ..., code: _Optional[str] = ...) -> None: ...

class RecoverySupported(_message.Message):
    __slots__ = ("strategies",)
    STRATEGIES_FIELD_NUMBER: _ClassVar[int]
    strategies: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, strategies: _Optional[_Iterable[str]] = ...) -> None: ...

class LeftGeneration(_message.Message):
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

class Finished(_message.Message):
    __slots__ = ("time",)
    TIME_FIELD_NUMBER: _ClassVar[int]
    time: float
    def __init__(self, time: _Optional[float] = ...) -> None: ...

class StopRequested(_message.Message):
    __slots__ = ("time",)
    TIME_FIELD_NUMBER: _ClassVar[int]
    time: float
    def __init__(self, time: _Optional[float] = ...) -> None: ...

class ReserveSlot(_message.Message):
    __slots__ = ("request_id", "slot", "nbytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    slot: int
    nbytes: int
    def __init__(self, request_id: _Optional[int] = ..., slot: _Optional[int] = ..., nbytes: _Optional[int] = ...) -> None: ...

class RestorePlanRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    def __init__(self, request_id: _Optional[int] = ...) -> None: ...

class ReplicasDiffer(_message.Message):
    __slots__ = ("detail", "time")
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    detail: str
    time: float
    def __init__(self, detail: _Optional[str] = ..., time: _Optional[float] = ...) -> None: ...

class SlotGranted(_message.Message):
    __slots__ = ("request_id", "slot", "path", "capacity")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    slot: int
    path: str
    capacity: int
    def __init__(self, request_id: _Optional[int] = ..., slot: _Optional[int] = ..., path: _Optional[str] = ..., capacity: _Optional[int] = ...) -> None: ...

class RestorePlan(_message.Message):
    __slots__ = ("request_id", "source", "step", "path", "next_slot", "slot_paths", "note", "peer", "send_to", "holder_paths")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NEXT_SLOT_FIELD_NUMBER: _ClassVar[int]
    SLOT_PATHS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    SEND_TO_FIELD_NUMBER: _ClassVar[int]
    HOLDER_PATHS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    source: str
    step: int
    path: str
    next_slot: int
    slot_paths: _containers.RepeatedScalarFieldContainer[str]
    note: str
    peer: int
    send_to: _containers.RepeatedScalarFieldContainer[int]
    holder_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[int] = ..., source: _Optional[str] = ..., step: _Optional[int] = ..., path: _Optional[str] = ..., next_slot: _Optional[int] = ..., slot_paths: _Optional[_Iterable[str]] = ..., note: _Optional[str] = ..., peer: _Optional[int] = ..., send_to: _Optional[_Iterable[int]] = ..., holder_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class RequestFailed(_message.Message):
    __slots__ = ("request_id", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: str
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class InjectFault(_message.Message):
    __slots__ = ("kind", "at_step")
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_STEP_FIELD_NUMBER: _ClassVar[int]
    kind: str
    at_step: int
    def __init__(self, kind: _Optional[str] = ..., at_step: _Optional[int] = ...) -> None: ...

class StopAt(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    def __init__(self, generation: _Optional[int] = ...) -> None: ...

class Rejoin(_message.Message):
    __slots__ = ("generation", "master_addr", "master_port", "restart_count")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    generation: int
    master_addr: str
    master_port: int
    restart_count: int
    def __init__(self, generation: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., restart_count: _Optional[int] = ...) -> None: ...

class SnapshotInterval(_message.Message):
    __slots__ = ("every", "from_step")
    EVERY_FIELD_NUMBER: _ClassVar[int]
    FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    every: int
    from_step: int
    def __init__(self, every: _Optional[int] = ..., from_step: _Optional[int] = ...) -> None: ...

class Profiling(_message.Message):
    __slots__ = ("switch",)
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    switch: str
    def __init__(self, switch: _Optional[str] = ...) -> None: ...

class CompleteShares(_message.Message):
    __slots__ = ("request_id", "holder")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    holder: int
    def __init__(self, request_id: _Optional[int] = ..., holder: _Optional[int] = ...) -> None: ...

class InjectRequest(_message.Message):
    __slots__ = ("request_id", "rank", "kind", "at_step")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_STEP_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    rank: int
    kind: str
    at_step: int
    def __init__(self, request_id: _Optional[int] = ..., rank: _Optional[int] = ..., kind: _Optional[str] = ..., at_step: _Optional[int] = ...) -> None: ...

class DeviceFaultRequest(_message.Message):
    __slots__ = ("request_id", "device", "code", "assertion")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ASSERTION_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    device: int
    code: str
    assertion: str
    def __init__(self, request_id: _Optional[int] = ..., device: _Optional[int] = ..., code: _Optional[str] = ..., assertion: _Optional[str] = ...) -> None: ...

class ProfilingRequest(_message.Message):
    __slots__ = ("request_id", "switch")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    switch: str
    def __init__(self, request_id: _Optional[int] = ..., switch: _Optional[str] = ...) -> None: ...

class ControlReply(_message.Message):
    __slots__ = ("request_id", "ok", "detail")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    ok: bool
    detail: str
    def __init__(self, request_id: _Optional[int] = ..., ok: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...
