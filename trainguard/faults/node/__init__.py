"""A node's faults as NodeD grades them (NodeDConfiguration.json), its switch's
(SwitchFaultCode.json), and the node's status from them."""

__all__: list[str] = []
