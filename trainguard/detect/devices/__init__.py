"""Device detectors: what a host's accelerators report, graded and published (SPEC D1).

A backend (:mod:`.backend`; ``sim``, ``nvml``, ``npu``, chosen by :mod:`.registry`) turns what a
driver sees into device fault events, pushed (subscription) or polled. The detector
(:mod:`.detector`) runs one backend per host, restarts it when it fails, grades every event
with the device plugin's rules and hands each change to the agent. From the detector's view,
:mod:`.device_info` builds the document ``mindx-dl-deviceinfo-<node>`` with the names of
:mod:`.naming`, and :mod:`.fault_notices` the event records of each fault.

Internal: only the document, the timeline file and ``deviceNameCustomization.json`` are public
formats.
"""

__all__: list[str] = []
