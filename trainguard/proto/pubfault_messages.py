"""pubfault.proto's ``PublicFaultRequest`` and the public fault document (the same JSON, NOTES
§2.6) into each other: the checks (:mod:`trainguard.faults.public.public_messages`) read the
document, so a message by gRPC and one by document are checked alike.

Integers stay integers (protobuf's JSON mapping would write int64 fields as strings, which the
checks refuse, as the original's do); a field the request leaves unset is its zero value, as
the checks read an absent one.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from trainguard.proto import pubfault_pb2 as pb

__all__ = ["from_document", "to_document"]


def to_document(request: pb.PublicFaultRequest) -> dict[str, Any]:
    """The document a request stands for."""
    return {
        "id": request.id, "timestamp": request.timestamp, "version": request.version,
        "resource": request.resource,
        "faults": [{
            "faultId": fault.faultId, "faultType": fault.faultType,
            "faultCode": fault.faultCode, "faultTime": fault.faultTime,
            "assertion": fault.assertion, "faultLocation": dict(fault.faultLocation),
            "influence": [{"nodeName": node.nodeName, "nodeSN": node.nodeSN,
                           "deviceIds": list(node.deviceIds)} for node in fault.influence],
            "description": fault.description} for fault in request.faults],
    }


def from_document(document: object) -> pb.PublicFaultRequest:
    """The request for a parsed document (``trainguard faults send``'s file); keys it does not
    know are left out, as the controller ignores them.

    Raises:
        ValueError: a value has a type the message cannot hold; the message names the field.
    """
    if not isinstance(document, dict):
        raise ValueError("a public fault message must be a JSON object")
    try:
        return json_format.ParseDict(document, pb.PublicFaultRequest(),
                                     ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise ValueError(str(error)) from error
