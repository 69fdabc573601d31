"""NVLink as a switch source (SPEC D5: NVLink/NVSwitch where the original has HCCS).

Each full read asks NVML, through ``pynvml`` (nvidia-ml-py), for the state of every NVLink of
every GPU (``nvmlDeviceGetNvLinkState``). A link goes into the switch document as the
original's bus link-down alarm ``0x08520003``, with the GPU's index as SwitchChipId and the
link's as SwitchPortId, and its peer as PeerPortDevice (1 NPU for a GPU, 2 SW for an NVSwitch,
0 CPU for an NVLink CPU, 0xFFFF when NVML does not say) and PeerPortId (the peer GPU's index
when it is on this node, else 0xFFFF). So the configured switch codes grade it: a link to
another GPU down, ``[0x08520003,na,npu,na]``, is Separate; one to an NVSwitch,
``[0x08520003,na,L2,na]``, NotHandle (the fabric routes around one switch port).

Only links seen active since the source started are watched: NVML also lists ports a board
leaves unconnected, inactive forever. A watched link that is inactive is a fault (occur) until
it is active again (recover).
"""

from __future__ import annotations

import asyncio
import importlib
import types
from typing import Any

from trainguard.clock import Clock
from trainguard.detect.switch import SwitchSourceError
from trainguard.faults.device.device_events import Assertion
from trainguard.faults.device.fault_codes import Severity
from trainguard.faults.node.switch_faults import SwitchCode, SwitchFault

__all__ = ["LINK_DOWN_EVENT", "NvLinkSource"]

LINK_DOWN_EVENT = 0x08520003
"""The original's bus link-down alarm id."""
_NO_FAULT_ID = 0xFFFFFFFF
_NOT_APPLICABLE = 0xFFFF
_PEER_DEVICES = {0: 1, 1: 0, 2: 2}  # NVML's GPU, IBM NPU (a CPU), switch -> the document's


class NvLinkSource:
    """Reads every NVLink's state in full on each call (a polled source)."""

    subscribes = False

    def __init__(self, *, clock: Clock, nvml: types.ModuleType | Any = None) -> None:
        """``nvml``: the ``pynvml`` module, or a stand-in with its API; None imports it."""
        self._clock = clock
        self._nvml = nvml
        self._initialised = False
        self._peers: dict[tuple[int, int], tuple[int, int]] = {}  # watched link -> its peer
        self._down: set[tuple[int, int]] = set()

    async def next_events(self) -> list[SwitchFault]:
        return await asyncio.to_thread(self._read)

    def _load(self) -> Any:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError:
                raise SwitchSourceError(
                    "the nvlink switch source needs NVML's Python client: install "
                    "trainguard[nvidia] (nvidia-ml-py)") from None
        if not self._initialised:
            try:
                self._nvml.nvmlInit()
            except self._nvml.NVMLError as error:
                raise SwitchSourceError(f"NVML did not initialise: {error}") from None
            self._initialised = True
        return self._nvml

    def _read(self) -> list[SwitchFault]:
        nvml = self._load()
        try:
            links = self._link_states(nvml)
        except nvml.NVMLError as error:
            raise SwitchSourceError(f"NVML could not list the GPUs: {error}") from None
        now = self._clock.wall()
        events: list[SwitchFault] = []
        for link, (active, peer) in links.items():
            if active:
                self._peers[link] = peer
                if link in self._down:
                    self._down.discard(link)
                    events.append(self._event(link, Assertion.RECOVER, now))
            elif link in self._peers and link not in self._down:
                self._down.add(link)
                events.append(self._event(link, Assertion.OCCUR, now))
        return events

    def _link_states(self, nvml: Any) -> dict[tuple[int, int], tuple[bool, tuple[int, int]]]:
        """(gpu, link) -> (active, (peer device, peer id)) for every link NVML reports."""
        handles = [nvml.nvmlDeviceGetHandleByIndex(index)
                   for index in range(nvml.nvmlDeviceGetCount())]
        bus_ids = {_bus_id(nvml.nvmlDeviceGetPciInfo(handle)): index
                   for index, handle in enumerate(handles)}
        absent = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT)
        states: dict[tuple[int, int], tuple[bool, tuple[int, int]]] = {}
        for gpu, handle in enumerate(handles):
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    active = nvml.nvmlDeviceGetNvLinkState(handle, link) == (
                        nvml.NVML_FEATURE_ENABLED)
                except nvml.NVMLError as error:
                    if getattr(error, "value", None) in absent:
                        continue  # no such link on this board
                    raise
                peer = (_NOT_APPLICABLE, _NOT_APPLICABLE)
                if active:
                    peer = self._peer(nvml, handle, link, bus_ids)
                states[(gpu, link)] = (active, peer)
        return states

    @staticmethod
    def _peer(nvml: Any, handle: object, link: int, bus_ids: dict[str, int]
              ) -> tuple[int, int]:
        try:
            kind = _PEER_DEVICES.get(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link),
                                     _NOT_APPLICABLE)
            remote = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        except nvml.NVMLError:
            return _NOT_APPLICABLE, _NOT_APPLICABLE
        return kind, bus_ids.get(remote, _NOT_APPLICABLE)

    def _event(self, link: tuple[int, int], assertion: Assertion, now: float) -> SwitchFault:
        gpu, port = link
        peer_device, peer_id = self._peers[link]
        code = SwitchCode.assemble(event_type=LINK_DOWN_EVENT, sub_type=_NO_FAULT_ID,
                                   peer_port_device=peer_device, switch_port_id=port)
        return SwitchFault(str(code), LINK_DOWN_EVENT, peer_device, peer_id, gpu, port,
                           Severity.MAJOR, assertion, now)


def _bus_id(pci_info: Any) -> str:
    """A PCI address, normalised: NVML spells it with 8 or 4 domain digits, as str or bytes."""
    raw = pci_info.busId
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    domain, _, rest = text.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"
