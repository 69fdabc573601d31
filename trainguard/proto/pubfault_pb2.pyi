from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PublicFaultRequest(_message.Message):
    __slots__ = ("id", "timestamp", "version", "resource", "faults")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    timestamp: int
    version: str
    resource: str
    faults: _containers.RepeatedCompositeFieldContainer[Fault]
    def __init__(self, id: _Optional[str] = ..., timestamp: _Optional[int] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., faults: _Optional[_Iterable[_Union[Fault, _Mapping]]] = ...) -> None: ...

class Fault(_message.Message):
    __slots__ = ("faultId", "faultType", "faultCode", "faultTime", "assertion", "faultLocation", "influence", "description")
    class FaultLocationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FAULTID_FIELD_NUMBER: _ClassVar[int]
    FAULTTYPE_FIELD_NUMBER: _ClassVar[int]
    FAULTCODE_FIELD_NUMBER: _ClassVar[int]
    FAULTTIME_FIELD_NUMBER: _ClassVar[int]
    ASSERTION_FIELD_NUMBER: _ClassVar[int]
    FAULTLOCATION_FIELD_NUMBER: _ClassVar[int]
    INFLUENCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    faultId: str
    faultType: str
    faultCode: str
    faultTime: int
    assertion: str
    faultLocation: _containers.ScalarMap[str, str]
    influence: _containers.RepeatedCompositeFieldContainer[PubFaultInfo]
    description: str
    def __init__(self, faultId: _Optional[str] = ..., faultType: _Optional[str] = ..., faultCode: _Optional[str] = ..., faultTime: _Optional[int] = ..., assertion: _Optional[str] = ..., faultLocation: _Optional[_Mapping[str, str]] = ..., influence: _Optional[_Iterable[_Union[PubFaultInfo, _Mapping]]] = ..., description: _Optional[str] = ...) -> None: ...

class PubFaultInfo(_message.Message):
    __slots__ = ("nodeName", "nodeSN", "deviceIds")
    NODENAME_FIELD_NUMBER: _ClassVar[int]
    NODESN_FIELD_NUMBER: _ClassVar[int]
    DEVICEIDS_FIELD_NUMBER: _ClassVar[int]
    nodeName: str
    nodeSN: str
    deviceIds: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, nodeName: _Optional[str] = ..., nodeSN: _Optional[str] = ..., deviceIds: _Optional[_Iterable[int]] = ...) -> None: ...

class RespStatus(_message.Message):
    __slots__ = ("code", "info")
    CODE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    code: int
    info: str
    def __init__(self, code: _Optional[int] = ..., info: _Optional[str] = ...) -> None: ...
