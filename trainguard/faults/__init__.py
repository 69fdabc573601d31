"""Pure fault domain: what went wrong and how serious it is. No I/O and no clocks: times are
passed in.

Shared by every source: the levels and their order (:mod:`.levels`), process faults
(:mod:`.process`), configuration problems (:mod:`.config_problems`), and the explanation of a
code (:mod:`.explain`). By source: a device's codes, configuration and escalation
(:mod:`.device`); a node's and its switch's (:mod:`.node`); public faults (:mod:`.public`).
"""

__all__: list[str] = []
