"""What a job is made of, shared by every side: its replica layout (:mod:`.replicas`) and the
typed events of its life that the controller and the agents record (:mod:`.events`)."""

__all__: list[str] = []
