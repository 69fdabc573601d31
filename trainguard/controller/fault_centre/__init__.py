"""The controller's fault centre: filters the nodes' faults before jobs see them, separates
devices that fault jobs again and again, applies relation rules, and writes the cluster's fault
documents (NOTES §4.6, §2.7; SPEC I1).

Pure rules: events, documents and times come in, decisions and documents go out; nothing here
reads a clock, the store or the network. :class:`~.centre.FaultCentre` bundles them; the
modules beside it are its rules, each usable alone. Not a public API (see :mod:`trainguard`).
"""

__all__: list[str] = []
