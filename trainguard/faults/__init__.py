"""Pure fault domain: what went wrong, what was decided, what happened after.

No I/O and no clocks here: times are passed in. Process faults (:mod:`.process`) and the typed
events the controller and agent record (:mod:`.events`).
"""

__all__: list[str] = []
