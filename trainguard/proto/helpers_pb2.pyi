from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StandbyRequest(_message.Message):
    __slots__ = ("version", "spawn")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SPAWN_FIELD_NUMBER: _ClassVar[int]
    version: int
    spawn: Spawn
    def __init__(self, version: _Optional[int] = ..., spawn: _Optional[_Union[Spawn, _Mapping]] = ...) -> None: ...

class Spawn(_message.Message):
    __slots__ = ("id", "mode", "target", "args", "env", "cwd")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    id: int
    mode: str
    target: str
    args: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    def __init__(self, id: _Optional[int] = ..., mode: _Optional[str] = ..., target: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ...) -> None: ...

class StandbyEvent(_message.Message):
    __slots__ = ("version", "ready", "spawned", "spawn_failed", "exited")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SPAWNED_FIELD_NUMBER: _ClassVar[int]
    SPAWN_FAILED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    version: int
    ready: Ready
    spawned: Spawned
    spawn_failed: SpawnFailed
    exited: Exited
    def __init__(self, version: _Optional[int] = ..., ready: _Optional[_Union[Ready, _Mapping]] = ..., spawned: _Optional[_Union[Spawned, _Mapping]] = ..., spawn_failed: _Optional[_Union[SpawnFailed, _Mapping]] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ...) -> None: ...

class Ready(_message.Message):
    __slots__ = ("pid", "preloaded", "failed")
    class FailedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PID_FIELD_NUMBER: _ClassVar[int]
    PRELOADED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    preloaded: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.ScalarMap[str, str]
    def __init__(self, pid: _Optional[int] = ..., preloaded: _Optional[_Iterable[str]] = ..., failed: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Spawned(_message.Message):
    __slots__ = ("id", "pid")
    ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    id: int
    pid: int
    def __init__(self, id: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class SpawnFailed(_message.Message):
    __slots__ = ("id", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    error: str
    def __init__(self, id: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class Exited(_message.Message):
    __slots__ = ("pid", "returncode")
    PID_FIELD_NUMBER: _ClassVar[int]
    RETURNCODE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    returncode: int
    def __init__(self, pid: _Optional[int] = ..., returncode: _Optional[int] = ...) -> None: ...

class Shard(_message.Message):
    __slots__ = ("rank", "path", "seq", "as_rank")
    RANK_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AS_RANK_FIELD_NUMBER: _ClassVar[int]
    rank: int
    path: str
    seq: int
    as_rank: int
    def __init__(self, rank: _Optional[int] = ..., path: _Optional[str] = ..., seq: _Optional[int] = ..., as_rank: _Optional[int] = ...) -> None: ...

class PersisterRequest(_message.Message):
    __slots__ = ("version", "hash", "persist")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    PERSIST_FIELD_NUMBER: _ClassVar[int]
    version: int
    hash: Hash
    persist: Persist
    def __init__(self, version: _Optional[int] = ..., hash: _Optional[_Union[Hash, _Mapping]] = ..., persist: _Optional[_Union[Persist, _Mapping]] = ...) -> None: ...

class Hash(_message.Message):
    __slots__ = ("shards",)
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[Shard]
    def __init__(self, shards: _Optional[_Iterable[_Union[Shard, _Mapping]]] = ...) -> None: ...

class Persist(_message.Message):
    __slots__ = ("step", "world_size", "root", "keep", "bandwidth", "shards")
    STEP_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    step: int
    world_size: int
    root: str
    keep: int
    bandwidth: int
    shards: _containers.RepeatedCompositeFieldContainer[Shard]
    def __init__(self, step: _Optional[int] = ..., world_size: _Optional[int] = ..., root: _Optional[str] = ..., keep: _Optional[int] = ..., bandwidth: _Optional[int] = ..., shards: _Optional[_Iterable[_Union[Shard, _Mapping]]] = ...) -> None: ...

class PersisterReply(_message.Message):
    __slots__ = ("version", "hashed", "persisted", "persist_failed")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HASHED_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_FIELD_NUMBER: _ClassVar[int]
    PERSIST_FAILED_FIELD_NUMBER: _ClassVar[int]
    version: int
    hashed: Hashed
    persisted: Persisted
    persist_failed: PersistFailed
    def __init__(self, version: _Optional[int] = ..., hashed: _Optional[_Union[Hashed, _Mapping]] = ..., persisted: _Optional[_Union[Persisted, _Mapping]] = ..., persist_failed: _Optional[_Union[PersistFailed, _Mapping]] = ...) -> None: ...

class Hashed(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[Checksum]
    def __init__(self, results: _Optional[_Iterable[_Union[Checksum, _Mapping]]] = ...) -> None: ...

class Checksum(_message.Message):
    __slots__ = ("rank", "seq", "checksum")
    RANK_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    rank: int
    seq: int
    checksum: int
    def __init__(self, rank: _Optional[int] = ..., seq: _Optional[int] = ..., checksum: _Optional[int] = ...) -> None: ...

class Persisted(_message.Message):
    __slots__ = ("step", "path", "nbytes", "seconds", "removed")
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    step: int
    path: str
    nbytes: int
    seconds: float
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step: _Optional[int] = ..., path: _Optional[str] = ..., nbytes: _Optional[int] = ..., seconds: _Optional[float] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...

class PersistFailed(_message.Message):
    __slots__ = ("step", "error", "overwritten")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OVERWRITTEN_FIELD_NUMBER: _ClassVar[int]
    step: int
    error: str
    overwritten: bool
    def __init__(self, step: _Optional[int] = ..., error: _Optional[str] = ..., overwritten: _Optional[bool] = ...) -> None: ...

class StoreRequest(_message.Message):
    __slots__ = ("version", "ready", "host", "release")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    version: int
    ready: AwaitReady
    host: HostStore
    release: ReleaseStore
    def __init__(self, version: _Optional[int] = ..., ready: _Optional[_Union[AwaitReady, _Mapping]] = ..., host: _Optional[_Union[HostStore, _Mapping]] = ..., release: _Optional[_Union[ReleaseStore, _Mapping]] = ...) -> None: ...

class AwaitReady(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HostStore(_message.Message):
    __slots__ = ("address", "port")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    address: str
    port: int
    def __init__(self, address: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class ReleaseStore(_message.Message):
    __slots__ = ("port",)
    PORT_FIELD_NUMBER: _ClassVar[int]
    port: int
    def __init__(self, port: _Optional[int] = ...) -> None: ...

class StoreReply(_message.Message):
    __slots__ = ("version", "ready", "hosted", "host_failed", "released")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    HOSTED_FIELD_NUMBER: _ClassVar[int]
    HOST_FAILED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    version: int
    ready: AwaitReady
    hosted: HostStore
    host_failed: str
    released: ReleaseStore
    def __init__(self, version: _Optional[int] = ..., ready: _Optional[_Union[AwaitReady, _Mapping]] = ..., hosted: _Optional[_Union[HostStore, _Mapping]] = ..., host_failed: _Optional[str] = ..., released: _Optional[_Union[ReleaseStore, _Mapping]] = ...) -> None: ...
