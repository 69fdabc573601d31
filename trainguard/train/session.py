"""The training process's session with trainguard: step marks, snapshots, restore, stop.

Typical use::

    session = trainguard.train.Session()
    state = {"model": model, "optimizer": optimizer}
    start = session.restore(state)            # 0 on a fresh start
    for step in range(start, total_steps):
        with session.step(step):
            train_one_step(step)
        session.checkpoint(state, step=step + 1)   # the step to resume at

Objects in ``state`` with ``state_dict()``/``load_state_dict()`` are saved and loaded through
them; other values are saved as they are and put back into ``state`` by :meth:`Session.restore`.
Random generator states are saved with every snapshot and restored with it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from trainguard.ipc import messages
from trainguard.train import agent_link, error_file, rng, snapshot

__all__ = ["InjectedFaultError", "RestoreInfo", "Session", "SessionError"]

logger = logging.getLogger(__name__)


class SessionError(RuntimeError):
    """The session cannot do what was asked; the message says what to change."""


class InjectedFaultError(RuntimeError):
    """The exception ``trainguard fault inject ... exception`` raises inside a training step."""


@dataclasses.dataclass(frozen=True)
class RestoreInfo:
    source: str  # "memory", "disk" or "none"
    step: int  # the step training resumes at
    seconds: float
    note: str  # newer checkpoints that were skipped, and why


class Session:
    """Usable as soon as it is constructed; one per training process."""

    def __init__(self, *, request_timeout: float = 600.0, handle_sigterm: bool = True) -> None:
        """Connect to this worker's node agent.

        Args:
            request_timeout: seconds to wait for the agent to answer a restore or a reservation.
            handle_sigterm: on SIGTERM, stop at a step agreed with the other ranks after saving
                the state (a dying checkpoint) instead of dying at once.

        Raises:
            SessionError: not started by ``trainguard run``, or the agent is unreachable.
        """
        address = os.environ.get("TRAINGUARD_AGENT_SOCKET")
        if not address:
            raise SessionError(
                "trainguard.train.Session needs the environment `trainguard run` gives its "
                "workers (TRAINGUARD_AGENT_SOCKET is not set); start the script with "
                "`trainguard run`")
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.generation = int(os.environ.get("TRAINGUARD_GENERATION", "0"))
        self.restored: RestoreInfo | None = None
        self.last_snapshot_seconds: float | None = None
        self._request_timeout = request_timeout
        self._lock = threading.Lock()
        self._injections: list[messages.InjectFault] = []
        self._stop_at: int | None = None
        self._slot_paths = ["", ""]
        self._mapped: dict[int, snapshot.MappedSlot] = {}
        self._next_slot = 0
        self._tracked: Mapping[str, Any] | None = None
        self._saved_step: int | None = None
        self._closed = False
        try:
            self._link = agent_link.AgentLink(address, on_order=self._on_order)
        except agent_link.AgentLinkError as error:
            raise SessionError(str(error)) from error
        self._link.send(messages.Hello(self.rank, self.local_rank, os.getpid(), self.generation))
        error_file.install(self._on_uncaught)
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self.close)

    # --- orders from the agent (reader thread) and from signals ------------------------------

    def _on_order(self, order: messages.Message) -> None:
        with self._lock:
            if isinstance(order, messages.InjectFault):
                self._injections.append(order)
            elif isinstance(order, messages.StopAt):
                self._stop_at = order.step

    def _on_uncaught(self, error: str) -> None:
        self._link.send_now(messages.WorkerFailing(error, time.monotonic()))

    def _on_sigterm(self, signum: int, frame: object) -> None:
        # The agent answers with the step at which every rank stops (StopAt).
        self._link.send_from_signal(messages.StopRequested(time.monotonic()))

    # --- the training loop -------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Mark one training step: heartbeat, fault-injection point, place to stop."""
        self._before_step(step)
        self._link.send(messages.StepMark(step, messages.StepPhase.BEGIN, time.monotonic()))
        self._inject_due(step)
        yield
        self._link.send(messages.StepMark(step, messages.StepPhase.END, time.monotonic()))
        stop_at = self._stop_at
        if stop_at is not None and step >= stop_at:
            self._stop(resume_step=step + 1)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Declare long work between steps (an evaluation): the long hang deadline applies."""
        self._activity(messages.ActivityKind.USER, True)
        try:
            yield
        finally:
            self._activity(messages.ActivityKind.USER, False)

    def _before_step(self, step: int) -> None:
        stop_at = self._stop_at
        if stop_at is not None and step > stop_at:
            self._stop(resume_step=step)

    def _inject_due(self, step: int) -> None:
        """Injected faults strike inside the step, where real ones do."""
        if not self._injections:  # the usual case; the reader thread only ever appends
            return
        with self._lock:
            due = [i for i in self._injections if i.at_step is None or step >= i.at_step]
            self._injections = [i for i in self._injections if i not in due]
        for order in due:
            self._inject(order.kind, step)

    def _inject(self, kind: messages.InjectionKind, step: int) -> None:
        self._link.send_now(messages.FaultInjected(kind, step, time.monotonic()))
        if kind is messages.InjectionKind.CRASH:
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind is messages.InjectionKind.HANG:
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            raise InjectedFaultError(f"trainguard injected an exception into rank {self.rank} "
                                f"at step {step}")

    def _stop(self, *, resume_step: int) -> None:
        """Dying checkpoint, then exit: every rank stops after the same step."""
        if self._tracked is not None and self._saved_step != resume_step:
            self.checkpoint(self._tracked, step=resume_step)
        self.close()
        raise SystemExit(0)

    def _activity(self, kind: messages.ActivityKind, active: bool) -> None:
        self._link.send(messages.Activity(kind, active, time.monotonic()))

    # --- state -------------------------------------------------------------------------------

    def checkpoint(self, state: Mapping[str, Any], *, step: int) -> None:
        """Snapshot ``state`` into the agent's shared memory; ``step`` is the step to resume at.

        Returns once the bytes are copied; the agent persists them to disk in the background.

        Raises:
            SessionError: the agent could not reserve memory for the snapshot.
        """
        started = time.perf_counter()
        self._activity(messages.ActivityKind.CHECKPOINT, True)
        tree = {
            "step": step,
            "state": {key: value.state_dict() if hasattr(value, "state_dict") else value
                      for key, value in state.items()},
            "rng": rng.capture(),
        }
        prepared = snapshot.prepare(tree)
        slot = self._next_slot
        mapped = self._slot(slot, prepared.nbytes)
        seq = mapped.write(prepared, step=step, generation=self.generation, rank=self.rank,
                           world_size=self.world_size)
        seconds = time.perf_counter() - started
        self._link.send(messages.SnapshotCommitted(step, slot, seq, prepared.nbytes, seconds,
                                                   time.monotonic()))
        self._activity(messages.ActivityKind.CHECKPOINT, False)
        self._next_slot = 1 - slot
        self._tracked = state
        self._saved_step = step
        self.last_snapshot_seconds = seconds

    def _slot(self, slot: int, nbytes: int) -> snapshot.MappedSlot:
        mapped = self._mapped.get(slot)
        if mapped is None and self._slot_paths[slot]:
            mapped = self._mapped[slot] = snapshot.MappedSlot(self._slot_paths[slot])
        if mapped is not None and mapped.capacity >= nbytes:
            return mapped
        request_id = self._link.next_request_id()
        reply = self._link.request(messages.ReserveSlot(request_id, slot, nbytes),
                                   request_id=request_id, timeout=self._request_timeout)
        if isinstance(reply, messages.RequestFailed):
            raise SessionError(f"no memory for the snapshot: {reply.error}")
        assert isinstance(reply, messages.SlotGranted)
        if mapped is not None:
            mapped.close()
        self._slot_paths[slot] = reply.path
        self._mapped[slot] = mapped = snapshot.MappedSlot(reply.path)
        return mapped

    def restore(self, state: MutableMapping[str, Any] | Mapping[str, Any], *,
                restore_rng: bool = True) -> int:
        """Load the newest complete state into ``state``; returns the step to resume at.

        Every rank gets the same step. The agent picks memory when its snapshot is intact, else
        the newest complete checkpoint on disk that verifies; ``self.restored`` says which.

        Raises:
            SessionError: the saved state does not match ``state``'s keys.
        """
        started = time.perf_counter()
        self._activity(messages.ActivityKind.RESTORE, True)
        request_id = self._link.next_request_id()
        plan = self._link.request(messages.RestorePlanRequest(request_id),
                                  request_id=request_id, timeout=self._request_timeout)
        if not isinstance(plan, messages.RestorePlan):
            raise SessionError(f"the agent could not plan a restore: {plan}")
        self._unmap()
        self._slot_paths = list(plan.slot_paths)
        self._next_slot = plan.next_slot
        self._tracked = state
        step = 0
        if plan.note:
            logger.warning("rank %d: %s", self.rank, plan.note)
        if plan.source is not messages.RestoreSource.NONE:
            try:
                header, tree = snapshot.read_snapshot(plan.path)
            except snapshot.SnapshotError as error:
                raise SessionError(f"cannot restore from {plan.source}: {error}") from error
            self._load(state, tree["state"])
            if restore_rng and "rng" in tree:
                rng.restore(tree["rng"])
            step = header.step
            self._saved_step = step
        self.restored = RestoreInfo(str(plan.source), step, time.perf_counter() - started,
                                    plan.note)
        self._activity(messages.ActivityKind.RESTORE, False)
        return step

    @staticmethod
    def _load(state: MutableMapping[str, Any] | Mapping[str, Any],
              saved: Mapping[str, Any]) -> None:
        missing = sorted(set(saved) - set(state))
        if missing:
            raise SessionError(f"the checkpoint holds {missing}, which the state passed to "
                               f"restore() lacks (it has {sorted(state)})")
        for key, value in saved.items():
            target = state[key]
            if hasattr(target, "load_state_dict"):
                target.load_state_dict(value)
            elif isinstance(state, MutableMapping):
                state[key] = value
            else:
                raise SessionError(
                    f"cannot restore {key!r}: it has no load_state_dict() and the state is not "
                    "a mutable mapping to put it back into")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tell the agent this rank's work is done, then disconnect (also done at exit).

        Call it (or leave a ``with Session() ...`` block) before tearing the process group down:
        a process that hangs in that teardown, as torch 2.13's gloo sometimes does, is then
        ended by the agent once the exit timeout passes, and its job still succeeds.
        """
        if self._closed:
            return
        self._closed = True
        self._link.send(messages.Finished(time.monotonic()))
        self._link.close()
        self._unmap()

    def _unmap(self) -> None:
        for mapped in self._mapped.values():
            mapped.close()
        self._mapped.clear()
