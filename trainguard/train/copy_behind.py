"""Finish a snapshot's copy while the next step computes (R3: training blocks only for what
must be consistent).

Between two optimizer steps, parameters and optimizer state do not change: the forward and
backward passes read them and write only activations and gradients. So a snapshot copies
everything else at once (buffers such as batch-norm statistics change in the forward pass;
random states; whatever the optimizers do not own) and leaves the optimizers' tensors to a
thread of its own, which copies them during the next step's forward and backward passes and
then commits the snapshot. Each optimizer's next ``step()`` waits for that copy first (a step
pre-hook), so no update ever races it; so do the next snapshot, a restore, leaving a
generation and the end of the session.

A process killed while that copy runs leaves its previous snapshot, as one killed inside a
synchronous copy does; its replicas' snapshots of the newer step stand in for it
(:mod:`trainguard.train.agent_memory`).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterable

import torch

__all__ = ["BeforeSteps", "CopyBehind", "optimizer_tensors"]


def optimizer_tensors(optimizers: Iterable[torch.optim.Optimizer]) -> frozenset[int]:
    """Where the tensors that only ``optimizers``' ``step()`` changes live (their
    ``data_ptr()``): the parameters they update and their state (moments, step counts)."""
    found: set[int] = set()
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            found.update(parameter.data_ptr() for parameter in group["params"])
        for state in optimizer.state.values():
            found.update(value.data_ptr() for value in state.values()
                         if isinstance(value, torch.Tensor) and value.numel())
    return frozenset(found)


class BeforeSteps:
    """Calls ``before()`` at the start of each ``step()`` of the optimizers it is shown (a step
    pre-hook, registered once per optimizer)."""

    def __init__(self, before: Callable[[], None]) -> None:
        self._before = before
        self._hooked: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    def watch(self, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        for optimizer in optimizers:
            if optimizer not in self._hooked:
                optimizer.register_step_pre_hook(self._hook)
                self._hooked.add(optimizer)

    def _hook(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self._before()


class CopyBehind:
    """One snapshot copy at a time, on one thread, finished in the background."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._guard = BeforeSteps(self.wait)

    def guard(self, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        """Make each optimizer's ``step()`` wait for the copy in flight (once per optimizer)."""
        self._guard.watch(optimizers)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in the background, after the one before it is done."""
        self.wait()
        self._idle.clear()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainguard-snapshot-copy",
                                            daemon=True)
            self._thread.start()
        self._jobs.put(job)

    def wait(self) -> None:
        """Until the job submitted last is done.

        Raises:
            BaseException: what that job raised (once).
        """
        self._idle.wait()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except BaseException as error:  # handed to the training thread
                self._error = error
            finally:
                self._idle.set()
