"""The controller's intake of public faults (SPEC D8): by gRPC (``PubFault.SendPublicFault``)
and by document, both through :meth:`PublicFaultIntake.take`.

A message passes, in the original's order, the per-sender rate limit, the message checks, and
then enters the cache of active public faults
(:mod:`trainguard.faults.public.public_messages`); the answer is the original's
(:class:`ResultCode`). The controller then hands each fault the message kept, device by
device, to the jobs using the devices it names.

Documents: each ``*.json`` file in the controller's ``<run root>/public-faults`` directory
(readable and writable by the controller's user only) holds one message, the same JSON as the
gRPC request (NOTES §2.6: the original reads ConfigMaps labelled
``mc-consumer-publicfault=true``). :class:`PublicFaultDocuments` reads a file when it appears
or changes, as a ConfigMap is read when it is created or updated; a file that is not JSON, is
over the gRPC size limit, or is a symbolic link is refused and logged, as is a message the
checks refuse. Whoever may write to that directory may send any allowed sender's faults: the
directory's permissions are its only protection.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from trainguard import clock as clocks
from trainguard import owner_only
from trainguard.faults.device import device_health
from trainguard.faults.device.device_events import DeviceFaultEvent
from trainguard.faults.public import public_faults, public_messages
from trainguard.proto import grpc_security

__all__ = ["CODE_PREFIX", "DOCUMENTS_DIRECTORY", "IntakeResult", "PublicFaultDocuments",
           "PublicFaultIntake", "ResultCode", "hand_to_job"]

logger = logging.getLogger(__name__)

DOCUMENTS_DIRECTORY = "public-faults"
"""The directory under the controller's run root that holds public fault documents."""
CODE_PREFIX = "public:"
"""Before a public fault's code in the fault engine and the events: ``020001001`` alone would
be read as the device code 0x20001001."""


class ResultCode(enum.IntEnum):
    """The original's answers to ``SendPublicFault`` (its ``RespStatus.code``)."""

    OK = 0
    INVALID_REQ_PARAM = 409  # the message was refused by its checks
    INVALID_REQ_RATE = 410  # the sender is over its rate, or not an allowed sender


_ACCEPTED = "public fault send successfully"
_RATE = "limiter work by resource failed"


@dataclasses.dataclass(frozen=True)
class IntakeResult:
    code: ResultCode
    info: str
    """The original's text: for a refused message, every reason, joined by ``; ``."""
    message: public_messages.PublicFaultMessage | None
    """The faults kept; None when the message was refused."""
    dropped: tuple[str, ...] = ()
    """Why single faults were dropped or not stored, when the message was taken."""


class PublicFaultIntake:
    """Rate limit, checks and cache of the controller's public faults."""

    def __init__(self, config: public_faults.PublicFaultConfig, *, clock: clocks.Clock) -> None:
        self.config = config
        self._limiter = public_messages.RateLimiter(config.resources)
        self.cache = public_messages.PublicFaultCache()
        """The active public faults of each node (what the cluster documents will show)."""
        self._clock = clock

    def reconfigure(self, config: public_faults.PublicFaultConfig) -> None:
        """Codes and senders changed (publicFaultConfiguration.json or publicCustomization.json
        edited): later messages are checked against them; the active faults stay."""
        if config.resources != self.config.resources:
            self._limiter = public_messages.RateLimiter(config.resources)
        self.config = config

    def take(self, document: object, *, source: str) -> IntakeResult:
        """Take in one message (parsed JSON, from anyone); ``source`` names where it came
        from in the log."""
        now = self._clock.monotonic()
        resource = document.get("resource") if isinstance(document, dict) else None
        if not self._limiter.allow(resource if isinstance(resource, str) else "", now):
            logger.warning("public fault from %s refused: %s (resource %r)", source, _RATE,
                           resource)
            return IntakeResult(ResultCode.INVALID_REQ_RATE, _RATE, None)
        message, reasons = public_messages.validate_message(document, config=self.config)
        if message is None:
            logger.warning("public fault from %s refused: %s", source, "; ".join(reasons))
            return IntakeResult(ResultCode.INVALID_REQ_PARAM, "; ".join(reasons), None)
        dropped = (*reasons, *self.cache.apply(message, now))
        for reason in dropped:
            logger.warning("public fault %s from %s: %s", message.id, source, reason)
        logger.info("public fault %s from %s (%s) taken in: %d faults", message.id, source,
                    message.resource, len(message.faults))
        return IntakeResult(ResultCode.OK, _ACCEPTED, message, dropped)


class PublicFaultDocuments:
    """The public fault documents in a directory, each read when it appears or changes."""

    def __init__(self, directory: Path, intake: PublicFaultIntake) -> None:
        self.directory = directory
        self._intake = intake
        self._seen: dict[str, tuple[int, int]] = {}  # name -> (mtime_ns, size) when read

    def poll(self) -> list[tuple[str, IntakeResult | str]]:
        """Read the new and changed documents; for each, its name and the intake's answer or
        why it could not be read."""
        owner_only.make_dir(self.directory)
        found: list[tuple[str, IntakeResult | str]] = []
        present = set()
        for path in sorted(self.directory.glob("*.json")):
            present.add(path.name)
            try:
                status = path.lstat()
            except OSError:
                continue  # removed meanwhile
            signature = (status.st_mtime_ns, status.st_size)
            if self._seen.get(path.name) == signature:
                continue
            self._seen[path.name] = signature
            found.append((path.name, self._read(path, status.st_size, status.st_mode)))
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return found

    def _read(self, path: Path, size: int, mode: int) -> IntakeResult | str:
        if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
            why = "not a plain file (a symbolic link is refused)"
        elif size > grpc_security.MAX_MESSAGE_BYTES:
            why = f"{size} bytes, over the {grpc_security.MAX_MESSAGE_BYTES} a message may have"
        else:
            try:
                document = json.loads(path.read_bytes())
            except (OSError, ValueError) as error:
                why = f"not readable as JSON: {error}"
            else:
                return self._intake.take(document, source=f"document {path.name}")
        logger.warning("public fault document %s refused: %s", path, why)
        return why


class _Host(Protocol):
    @property
    def host(self) -> str: ...


class _Taker(Protocol):
    """A job's controller, or the controller's fault centre in front of its jobs."""

    async def device_fault(self, event: DeviceFaultEvent, *, reported_by: str
                           ) -> device_health.DeviceHealth: ...


async def hand_to_job(message: public_messages.PublicFaultMessage, controller: _Taker,
                      hosts: Iterable[_Host], *, wall: float) -> int:
    """Hand each fault of ``message`` on a device of the ``hosts`` (matched by node name, the
    name its agent registered with; device ids are device indexes on that host) to
    ``controller``; returns how many devices were handed over. ``wall``: now, in wall seconds
    (the fault engine's clock)."""
    names = {host.host for host in hosts}
    handed = 0
    for fault in message.faults:
        code = f"{CODE_PREFIX}{fault.fault_code}"
        for influence in fault.influence:
            if influence.node_name not in names:
                continue
            for device in influence.device_ids:
                await controller.device_fault(
                    DeviceFaultEvent(f"{influence.node_name}/device-{device}", code,
                                     fault.assertion, wall, level=fault.level),
                    reported_by=f"public fault {message.resource}/{fault.fault_id}")
                handed += 1
    return handed
