"""What a fault code means under a configuration: ``trainguard faults explain``.

A code is looked up everywhere it can be: the device tables (chip and network codes), the
frequency and duration rules, the public fault codes (nine digits), the switch codes
(``[0x...,...]``) and the NodeD codes, so an operator sees every level it can take and why.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources

from trainguard.faults.device import customization as customizations
from trainguard.faults.device import device_health, fault_codes
from trainguard.faults.levels import reset_policy
from trainguard.faults.node import node_faults, switch_faults
from trainguard.faults.public import public_faults

__all__ = ["Explanation", "explain"]


@dataclasses.dataclass(frozen=True)
class Explanation:
    code: str
    known: bool  # some table lists it
    lines: tuple[tuple[str, str], ...]  # (what, said), in order
    level: str | None = None  # its level as a device code, public code or switch code
    valid: bool = True  # it is spelled like a fault code

    def to_data(self) -> dict[str, object]:
        return {"code": self.code, "known": self.known, "valid": self.valid,
                "level": self.level, "details": dict(self.lines)}


@functools.cache
def _meanings() -> dict[fault_codes.CodeKey, str]:
    text = resources.files("trainguard.faults").joinpath("data/faultMeanings.json").read_text()
    return {fault_codes.code_key(code): meaning for code, meaning in json.loads(text).items()}


def _device(key: fault_codes.CodeKey, table: fault_codes.CodeTable,
            rules: customizations.Customization) -> list[tuple[str, str]]:
    lines = []
    level = table.level_of(key)
    source = table.sources.get(key)
    if table.is_network(key):
        where = source or "not listed: a network code defaults to PreSeparateNPU"
        lines.append(("level", f"{level} (network code, judged apart from the chip's codes; "
                               f"{where})"))
        lines.append(("fault type", "CardNetworkUnhealthy"))
    elif source is not None:
        lines.append(("level", f"{level} ({source})"))
        lines.append(("fault type", "CardUnhealthy"))
    else:
        lines.append(("level", "not listed: SeparateNPU, or NotHandleFault when the device "
                               "reports it as Minor or Suggestion, and ignored beside a listed "
                               "code"))
    lines.append(("reset policy", str(reset_policy(level))))
    if key in device_health.RETRY_CODES:
        lines.append(("retry", "a step retry clears it, while the device's level lets it stay "
                               "in use"))
    frequency = rules.frequency.get(key)
    if frequency is not None:
        release = ("never released but by an operator" if frequency.release_window is None
                   else f"released {frequency.release_window:g} s after it last recovered")
        lines.append(("FaultFrequency", f"{frequency.times} times in {frequency.time_window:g} s"
                      f" -> {frequency.handling}, {release}"))
    duration = rules.duration.get(key)
    if duration is not None:
        lines.append(("FaultDuration", f"lasting over {duration.fault_timeout:g} s -> "
                      f"{duration.handling}; recovered after {duration.recover_timeout:g} s "
                      "without it" + ("; it counts for FaultFrequency only when it lasts"
                                      if frequency is not None else "")))
    return lines


_KNOWN = frozenset({"public level", "NodeD level"})


def _public(code: str, config: public_faults.PublicFaultConfig) -> list[tuple[str, str]]:
    try:
        parsed = public_faults.PublicCode.parse(code)
    except ValueError as error:
        return [("public code", f"not a public fault code: {error}")]
    origin = "user-defined" if parsed.user_defined else "defined by the release"
    lines = [("public code", f"type {parsed.fault_type.name.lower()}, default level "
                             f"{parsed.default_level}, {origin}, number {parsed.number}")]
    level = config.level_of(code)
    if level is None:
        lines.append(("public fault", "not configured: a sender's fault with it is dropped"))
    else:
        source = config.sources.get(code, "publicFaultConfiguration.json")
        lines.append(("public level", f"{level} ({source})"))
    return lines


def explain(code: str, *, codes: fault_codes.CodeTable,
            customization: customizations.Customization,
            public: public_faults.PublicFaultConfig, switch: switch_faults.SwitchCodeTable,
            node: node_faults.NodeCodeTable) -> Explanation:
    """Every level ``code`` can take under this configuration, and where each comes from."""
    code = code.strip()
    lines: list[tuple[str, str]] = []
    known, level = False, None
    if code.startswith("["):
        switch_level = switch.level_of(code)
        known = switch_level is not None
        level = str(switch_level) if known else None
        lines.append(("switch level", f"{level} (SwitchFaultCode.json)" if known else
                      "not in SwitchFaultCode.json: not handled"))
    elif fault_codes.is_code(code):
        key = fault_codes.code_key(code)
        other: list[tuple[str, str]] = []
        if len(code) == 9 and code.isdigit():
            other += _public(code, public)
        node_level = node.level_of(code)
        if node_level is not None:
            other.append(("NodeD level", f"{node_level} (NodeDConfiguration.json)"))
        device_known = key in codes.sources or codes.is_network(key)
        known = device_known or any(label in _KNOWN for label, _ in other)
        if device_known or not known:
            lines += _device(key, codes, customization)
            level = str(codes.level_of(key))
        else:
            public_level = public.level_of(code)
            level = str(public_level) if public_level is not None else str(node_level)
        lines += other
        meaning = _meanings().get(key) or public_faults.BUILTIN_MEANINGS.get(code)
        if meaning:
            lines.append(("meaning", meaning))
    else:
        lines.append(("error", "not a fault code: hex digits (80E01801), letters, digits, '-' "
                               "and '_' (XID-79), or a switch code ([0x00f1fef5,155914,npu,na])"))
        return Explanation(code, False, tuple(lines), valid=False)
    return Explanation(code, known, tuple(lines), level)
