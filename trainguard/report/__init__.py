"""A report to keep: a run's recorded events turned into figures, a Markdown page and a timeline.

``timeline.build`` maps a run's events to a :class:`api.RunReport` (pure, no I/O);
``markdown.render`` and ``plot.draw`` write it out. Only the CLI uses this package; matplotlib
(the ``report`` extra) is imported when a timeline is drawn, never at import. Internal: only
``trainguard report`` and its ``--json`` output are public.
"""

__all__: list[str] = []
