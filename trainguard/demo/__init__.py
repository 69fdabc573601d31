"""The main job that ``make run`` shows: a DDP training script and the demonstration around it."""

__all__: list[str] = []
