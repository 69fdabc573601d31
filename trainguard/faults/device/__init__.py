"""A device's faults: its codes (faultCode.json), the customization of their levels
(faultCustomization.json), the FaultFrequency/FaultDuration escalation, and the engine that
grades a device from its history."""

__all__: list[str] = []
