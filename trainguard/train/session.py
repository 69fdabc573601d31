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

To survive faults without exiting (step retry, restarting only the failed ranks), put
everything that belongs to one process group into a function and hand it to
:meth:`Session.run`, which calls it once per generation this process takes part in::

    def train() -> None:
        dist.init_process_group("gloo")           # a new group every generation
        ddp = DistributedDataParallel(model)
        start = session.restore(state)            # after the group: a peer may send the state
        for step in range(start, total_steps):
            with session.step(step):              # the step guard
                train_one_step(ddp, step)
            session.checkpoint(state, step=step + 1)

    session.run(train)

An error inside a step then does not end the process: the rank cuts its communicator (which
releases every peer blocked in a collective with it), tells the agent, and waits; the agent
decides, and every rank that stays calls ``train`` again in the next generation, which restores
the newest state every rank has and redoes the step.

The same script also runs without ``trainguard run``, under plain ``python`` or ``torchrun``:
the session then says once that it has no agent, the step guard does nothing, ``checkpoint()``
saves every ``TRAINGUARD_CHECKPOINT_EVERY`` steps (default 100) to ``TRAINGUARD_CHECKPOINT_DIR``
(default ``./checkpoints``) in the format ``trainguard run`` writes, ``restore()`` loads the newest
complete checkpoint there, and :meth:`Session.run` calls ``train`` once. Where the state goes is a
backend: the agent's memory (:mod:`trainguard.train.agent_memory`) or the directory
(:mod:`trainguard.train.local_directory`).

Why one module past 500 lines: it is the public training-side API, and its parts share one
small piece of state under one lock: the generation this rank is in, whether it has left it, the
agent's pending orders (abort, rejoin, stop step, injections) and the state being tracked. The
step guard, ``run``'s generation loop and the order handlers each read and change all of it.
What does not share it already lives apart: storage (the backends), torch.distributed
(:mod:`.process_group`, :mod:`.communicator`), the agent connection (:mod:`.agent_link`), the
error file and random states, the profiling marks (:mod:`.profiling`; the session holds the
recorder and marks its steps and snapshots); what a share completion does is the agent-memory
backend's, the session only hands it the agent's order or its own uncaught error.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import faulthandler
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

import torch

from trainguard.ipc import messages
from trainguard.job import profiling_records, profiling_switch
from trainguard.train import (
    agent_link,
    agent_memory,
    communicator,
    environment,
    error_file,
    local_directory,
    process_group,
    profiling,
    replica_shares,
    rng,
    state_backend,
    torch_version,
)

__all__ = ["DeviceError", "GenerationAborted", "InjectedFaultError", "RestoreInfo", "Session",
           "SessionError"]

T = TypeVar("T")

_SIMULATED_CODES = {
    messages.InjectionKind.MEMORY_ERROR: ("80E01801", "uncorrectable device memory error"),
    messages.InjectionKind.DEVICE_ERROR: ("80E3A201", "device fault that isolates the device"),
}

logger = logging.getLogger(__name__)


class SessionError(RuntimeError):
    """The session cannot do what was asked; the message says what to change."""


def _flag(variable: str, argument: bool | None) -> bool | None:
    """:func:`environment.flag`, as a :class:`SessionError`."""
    try:
        return environment.flag(variable, argument)
    except ValueError as error:
        raise SessionError(str(error)) from None


def _read_ahead_setting(enabled: bool | None) -> bool:
    """Whether restores are read ahead (:meth:`AgentMemoryBackend.read_ahead`); by default when
    this process may run on more cores than the processes its agent started with it (every rank
    of the host at a generation's start, the replaced ones in a recovery in place; without an
    agent's word, ``LOCAL_WORLD_SIZE``). The read needs a core that the script, building its
    model meanwhile, does not: on 2 cores it sped up the recovery in place of one of 4 ranks and
    slowed down a job-level restart of all 4 (docs/session.md).

    Raises:
        SessionError: ``TRAINGUARD_READ_AHEAD`` is not 0 or 1.
    """
    enabled = _flag("TRAINGUARD_READ_AHEAD", enabled)
    if enabled is not None:
        return enabled
    try:
        starting = int(os.environ.get(messages.STARTING_VARIABLE)
                       or os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        starting = 1
    return len(os.sched_getaffinity(0)) > starting


class InjectedFaultError(RuntimeError):
    """The exception ``trainguard fault inject ... exception`` raises inside a training step."""


class DeviceError(RuntimeError):
    """A device fault with its fault code (hex, as the device reports it), raised in a step.

    The code decides the handling: ``80E01801`` (uncorrectable memory error) is retried in
    place; codes whose level isolates the device move the rank to a spare.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"device fault {code}: {message}")
        self.code = code


class GenerationAborted(Exception):  # noqa: N818 - a control-flow signal, not an error
    """This rank left its generation; :meth:`Session.run` catches it and joins the next."""


@dataclasses.dataclass(frozen=True)
class RestoreInfo:
    source: str  # "memory", "peer", "replica", "disk" or "none" (state_backend.Loaded)
    step: int  # the step training resumes at
    seconds: float
    note: str  # newer checkpoints that were skipped, and why


class Session:
    """Usable as soon as it is constructed; one per training process."""

    def __init__(self, *, request_timeout: float = 600.0, handle_sigterm: bool = True,
                 checkpoint_every: int | None = None,
                 checkpoint_dir: str | os.PathLike[str] | None = None,
                 share_replicas: bool | None = None, dp_size: int | None = None,
                 per_rank: Collection[str] = (), copy_behind: bool | None = None,
                 read_ahead: bool | None = None) -> None:
        """Connect to this worker's node agent, or, without ``trainguard run``, to a checkpoint
        directory.

        Args:
            request_timeout: seconds to wait for the agent to answer a restore or a reservation.
            handle_sigterm: on SIGTERM, stop at a step agreed with the other ranks after saving
                the state (a dying checkpoint) instead of dying at once. Without an agent there
                is nobody to agree with, and SIGTERM ends the process as it would without
                trainguard.
            checkpoint_every: without an agent only: save when the step to resume at is a
                multiple of this (default 100; ``TRAINGUARD_CHECKPOINT_EVERY`` wins when set).
                Under ``trainguard run`` every checkpoint is a memory snapshot, and the agent's
                ``--persist-interval`` paces the disk.
            checkpoint_dir: without an agent only: where checkpoints go (default
                ``./checkpoints``; ``TRAINGUARD_CHECKPOINT_DIR`` wins when set). Under
                ``trainguard run``, ``--checkpoint-dir`` decides.
            share_replicas: under ``trainguard run`` only: with three or more replicas, each
                of the ``dp_size`` replicas snapshots its share of the state they hold alike
                and a copy of its ring neighbour's, not all of it
                (:mod:`trainguard.train.replica_shares`; checked, and turned off with a
                warning, when the replicas differ). Default on; ``TRAINGUARD_SNAPSHOT_SHARES``
                (``1``/``0``) wins when set.
            dp_size: data-parallel replicas (default: every rank); rank ``r``'s replicas are
                the ranks equal to ``r`` modulo ``world_size / dp_size``. Under ``trainguard
                run`` it must be the job's (``--dp-size``, by default the world size), which
                the agent restores ranks from replicas by.
            per_rank: keys of the saved state that differ per rank (a data loader's position):
                every rank snapshots them whole. Random generators always are.
            copy_behind: under ``trainguard run`` only: the optimizers' tensors (parameters,
                moments) of a snapshot are copied while the next step computes, and each
                optimizer's next ``step()`` waits for that copy
                (:mod:`trainguard.train.copy_behind`). Default on where this rank has a
                data-parallel replica (see ``dp_size``), whose snapshot stands in when a kill
                leaves the copy unfinished; off without one, where such a kill would cost a
                step. ``TRAINGUARD_SNAPSHOT_COPY_BEHIND`` (``1``/``0``) wins when set. Turn it
                off for a script that changes parameters in place other than through an
                optimizer between ``checkpoint()`` and the optimizer's next ``step()``.
            read_ahead: under ``trainguard run`` only: read the state to restore on a thread
                of its own from now on (and from each rejoin under :meth:`run`), while the
                script builds its model and its process group; ``restore()`` then takes it.
                Default: when this process may run on more cores than the host has ranks;
                ``TRAINGUARD_READ_AHEAD`` (``1``/``0``) wins when set.

        Raises:
            SessionError: the agent is unreachable; a share or read-ahead setting is
                malformed; without an agent, a checkpoint setting is malformed or the
                directory is not writable.
        """
        address = os.environ.get("TRAINGUARD_AGENT_SOCKET")
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.generation = int(os.environ.get("TRAINGUARD_GENERATION", "0"))
        self.restored: RestoreInfo | None = None
        self.last_snapshot_seconds: float | None = None
        self._lock = threading.Lock()
        self._injections: list[messages.InjectFault] = []
        self._stop_at: int | None = None
        self._tracked: Mapping[str, Any] | None = None
        self._saved_step: int | None = None
        self._skipped_step: int | None = None  # checkpoint() was not due; no step began since
        self._closed = False
        self._in_process = False  # training runs under run(): faults do not end the process
        self._communicator: communicator.Communicator | None = None
        self._aborting = threading.Event()  # the agent said: leave this generation
        self._rejoin: messages.Rejoin | None = None  # under _lock
        self._rejoined = threading.Condition(self._lock)
        self._left = False  # this rank has left its current generation
        self._link: agent_link.AgentLink | agent_link.DetachedLink
        self._state: state_backend.StateBackend
        self._agent = bool(address)
        self._reads_ahead = False  # restores read ahead (only under an agent)
        try:
            self.profiling = profiling.ProfilingRecorder.from_env(rank=self.rank)
            """This rank's lightweight-profiling marks (docs/profiling.md)."""
        except profiling_switch.SwitchError as error:
            raise SessionError(f"TRAINGUARD_PROFILING: {error}") from None
        if self.rank == 0 and (problem := torch_version.untested(torch.__version__)):
            logger.warning("trainguard: %s", problem)
        if not address:
            self._start_without_agent(checkpoint_every, checkpoint_dir)
            return
        self._reads_ahead = _read_ahead_setting(read_ahead)
        try:
            self._link = agent_link.AgentLink(address, on_order=self._on_order)
        except agent_link.AgentLinkError as error:
            raise SessionError(str(error)) from error
        self._state = agent_memory.AgentMemoryBackend(
            self._link, rank=self.rank, world_size=self.world_size,
            request_timeout=request_timeout,
            shares=self._shares(share_replicas, dp_size, per_rank),
            behind=_flag("TRAINGUARD_SNAPSHOT_COPY_BEHIND", copy_behind))
        # After the backend: the agent answers the hello with orders (the snapshot interval).
        self._link.hello(rank=self.rank, local_rank=self.local_rank, generation=self.generation)
        self._read_ahead()  # while the script builds its model and its process group
        error_file.install(self._on_uncaught)
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        # To descriptor 2, the process's standard error whatever sys.stderr is now.
        faulthandler.register(messages.STACKS_SIGNAL, file=2, all_threads=True)
        atexit.register(self.close)

    def _shares(self, enabled: bool | None, dp_size: int | None,
                per_rank: Collection[str]) -> replica_shares.ReplicaShares:
        try:
            return replica_shares.ReplicaShares.from_env(
                rank=self.rank, world_size=self.world_size, enabled=enabled, dp_size=dp_size,
                per_rank=per_rank)
        except replica_shares.SharesError as error:
            raise SessionError(str(error)) from error

    def _start_without_agent(self, every: int | None,
                             directory: str | os.PathLike[str] | None) -> None:
        """Plain ``python`` or ``torchrun``: checkpoints go straight to a directory."""
        try:
            settings = local_directory.LocalDirectorySettings.from_env(
                every=every, directory=None if directory is None else os.fspath(directory))
            self._state = local_directory.LocalDirectoryBackend(
                settings, rank=self.rank, world_size=self.world_size)
        except state_backend.StateError as error:
            raise SessionError(str(error)) from error
        self._link = agent_link.DetachedLink()
        if self.rank == 0:
            logger.warning(
                "trainguard: no agent (not started by `trainguard run`): no fault detection or "
                "recovery; checkpoint() saves every %d steps to %s, restore() loads the newest "
                "there", settings.every, settings.directory.resolve())
        error_file.install(self._on_uncaught)
        atexit.register(self.close)

    # --- orders from the agent (reader thread) and from signals ------------------------------

    def _on_order(self, order: messages.Message) -> None:
        if isinstance(order, messages.CompleteShares):
            # Here, on the thread that reads orders: the training thread is blocked in a
            # collective that waits for the lost rank.
            why = (self._state.complete(order.holder)
                   if isinstance(self._state, agent_memory.AgentMemoryBackend)
                   else "no snapshots in the agent's memory")
            self._link.send(messages.ControlReply(order.request_id, not why, why))
            return
        if isinstance(order, messages.Abort):
            if order.generation == self.generation and self._in_process:
                self._aborting.set()
                if self._communicator is not None:  # releases a collective the step waits in
                    self._communicator.cut()
            return
        with self._lock:
            if isinstance(order, messages.InjectFault):
                self._injections.append(order)
            elif isinstance(order, messages.StopAt):
                self._stop_at = order.step
            elif isinstance(order, messages.Rejoin):
                self._rejoin = order
                self._rejoined.notify_all()
            elif isinstance(order, messages.SnapshotInterval) and isinstance(
                    self._state, agent_memory.AgentMemoryBackend):
                self._state.pace(order)
            elif isinstance(order, messages.Profiling):
                try:
                    self.profiling.switch = profiling_switch.ProfilingSwitch.from_json(
                        order.switch)
                except profiling_switch.SwitchError as error:
                    logger.warning("rank %d: profiling not switched: %s", self.rank, error)

    def _flush(self) -> None:
        """Commit the snapshot copied behind, if any; a failed copy is said, not raised: the
        process is leaving its generation or ending, and the older snapshot stands."""
        try:
            self._state.flush()
        except state_backend.StateError as error:
            logger.warning("rank %d: %s", self.rank, error)

    def _on_uncaught(self, error: BaseException) -> None:
        self._flush()
        self._complete_share()
        code = error.code if isinstance(error, DeviceError) else ""
        self._link.send_now(messages.WorkerFailing(f"{type(error).__name__}: {error}",
                                                   time.monotonic(), code))

    def _complete_share(self) -> None:
        """A rank ending on an error writes its ring predecessor's share of its newest
        snapshot again, if its live state is still that snapshot's: the error is often the
        predecessor's loss (a peer's connection closed), and a rank that exits cannot do it on
        the agent's order later (train/replica_shares.py). A rank that only leaves its
        generation (``session.run``) stays to answer that order."""
        if isinstance(self._state, agent_memory.AgentMemoryBackend):
            why = self._state.complete(wait=False)
            if why:
                logger.debug("rank %d did not write its predecessor's share: %s", self.rank, why)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        # The agent answers with the step at which every rank stops (StopAt).
        self._link.send_from_signal(messages.StopRequested(time.monotonic()))

    # --- generations -------------------------------------------------------------------------

    def run(self, train: Callable[[], T]) -> T:
        """Call ``train`` once per generation this process takes part in; return its result.

        ``train`` creates the process group (``init_process_group`` with the environment's
        defaults: the session sets ``MASTER_PORT`` for each generation), restores, and trains.
        When this rank leaves a generation (an error in a step, or the agent's order), ``run``
        waits for the agent and calls ``train`` again; if the agent decides that this process
        must go, it ends it. Without an agent, it calls ``train`` once.
        """
        if not self._agent:
            return train()
        self._in_process = True
        process_group.keep_process_on_nccl_errors()  # an NCCL error leaves the generation
        self._link.send(messages.RecoverySupported(["retry", "recover-in-place", "recover"]))
        while True:
            self._communicator = communicator.Communicator()
            try:
                return train()
            except GenerationAborted as aborted:
                communicator.abandon(aborted)  # its traceback holds the generation's objects
            except Exception as error:  # outside a step: setting up, restoring, saving
                if self._closed:
                    raise
                self._leave(None, error)
                communicator.abandon(error)
            self._join_next()
            self._read_ahead()  # while train() forms the next process group

    def _read_ahead(self) -> None:
        """Start reading the state the next restore() takes, where that pays
        (:func:`_read_ahead_setting`)."""
        if self._reads_ahead and isinstance(self._state, agent_memory.AgentMemoryBackend):
            self._state.read_ahead()

    def _leave(self, step: int | None, error: BaseException | None) -> None:
        """Cut the communicator, drop the process group, tell the agent (once per generation)."""
        if self._communicator is None or self._left:
            return
        self._communicator.cut()
        self._left = True
        self._flush()  # the snapshot copied behind this step is committed before the plan
        communicator.abandon(*process_group.drop())
        text = code = ""
        if error is not None and not self._aborting.is_set():
            text = "".join(traceback.format_exception(error))[-4000:]
            code = error.code if isinstance(error, DeviceError) else ""
            logger.warning("rank %d left generation %d at step %s: %s", self.rank,
                           self.generation, step, error)
        self._link.send_now(messages.LeftGeneration(self.generation, step, text, code,
                                                    time.monotonic()))

    def _join_next(self) -> None:
        """Wait for the agent's Rejoin; the agent ends this process instead if it must go."""
        with self._lock:
            while self._rejoin is None or self._rejoin.generation <= self.generation:
                if self._link.closed:
                    raise SystemExit(f"rank {self.rank}: the agent went away")
                self._rejoined.wait(1.0)
            order = self._rejoin
        self.generation = order.generation
        os.environ.update({"MASTER_ADDR": order.master_addr,
                           "MASTER_PORT": str(order.master_port),
                           "TRAINGUARD_GENERATION": str(order.generation),
                           "TORCHELASTIC_RESTART_COUNT": str(order.restart_count)})
        self._aborting.clear()
        self._left = False

    # --- the training loop -------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Mark one training step: heartbeat, fault-injection point, place to stop.

        Under :meth:`run`, it is also the step guard: an error inside the step makes this
        rank leave the generation (raising :class:`GenerationAborted`) instead of the process.
        """
        self._skipped_step = None
        self._before_step(step)
        traced = (self.profiling.start(profiling_records.step_name(step))
                  if self.profiling.switch.step else 0)
        self._link.send(messages.StepMark(step, messages.StepPhase.BEGIN, time.monotonic()))
        try:
            self._inject_due(step)
            yield
        except GenerationAborted:
            raise
        except Exception as error:
            if not self._in_process:
                raise
            self._leave(step, error)
            raise GenerationAborted(
                f"rank {self.rank} left generation {self.generation} at step {step}") from error
        finally:
            if traced:
                self.profiling.end(traced)
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
        if self._aborting.is_set():
            self._leave(step, None)
            raise GenerationAborted(f"rank {self.rank} left generation {self.generation} "
                                    f"before step {step}, as the agent asked")
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
        elif kind is messages.InjectionKind.LINK_ERROR:
            if self._communicator is not None:  # the step's next collective fails
                self._communicator.cut()
        elif kind in _SIMULATED_CODES:
            code, what = _SIMULATED_CODES[kind]
            raise DeviceError(code, f"simulated {what} on rank {self.rank} at step {step}")
        else:
            raise InjectedFaultError(f"trainguard injected an exception into rank {self.rank} "
                                f"at step {step}")

    def _stop(self, *, resume_step: int) -> None:
        """Dying checkpoint, then exit: every rank stops after the same step."""
        if self._tracked is not None and self._saved_step != resume_step:
            self._save(self._tracked, step=resume_step)
        self.close()
        raise SystemExit(0)

    def _activity(self, kind: messages.ActivityKind, active: bool) -> None:
        self._link.send(messages.Activity(kind, active, time.monotonic()))

    # --- state -------------------------------------------------------------------------------

    def checkpoint(self, state: Mapping[str, Any], *, step: int) -> None:
        """Save ``state``; ``step`` is the step to resume at.

        Under ``trainguard run``, a snapshot into the agent's shared memory on the steps of
        ``--snapshot-every`` (every step by default): it returns once the bytes are copied, and
        the agent persists them to disk in the background. Without an agent, every
        ``checkpoint_every``-th step is written to the checkpoint directory (every rank calls
        it for the same steps: with several ranks, it is a collective). Other calls return at
        once; under ``trainguard run`` the last of them, when no step follows it, is saved when
        the session closes, so the final state is never left out.

        Raises:
            SessionError: the agent could not reserve memory for the snapshot; without an
                agent, several ranks but no process group.
        """
        if not self._state.due(step):
            self._tracked = state
            self._skipped_step = step
            return
        if not self.profiling.switch.save_checkpoint:
            self._save(state, step=step)
            return
        with self.profiling.mark("save_checkpoint"):
            self._save(state, step=step)

    def _save(self, state: Mapping[str, Any], *, step: int, whole: bool = False) -> None:
        """Save now, due or not (a dying checkpoint, a state a peer sent); ``whole``: see
        `state_backend.StateBackend.save`."""
        self._skipped_step = None
        started = time.perf_counter()
        declared = self._state.slow_save_expected()
        if declared:
            self._activity(messages.ActivityKind.CHECKPOINT, True)
        try:
            seconds = self._state.save(
                state_backend.saved_tree(state, step=step), step=step,
                generation=self.generation, started=started,
                optimizers=[v for v in state.values() if isinstance(v, torch.optim.Optimizer)],
                whole=whole)
        except state_backend.StateError as error:
            raise SessionError(str(error)) from error
        if declared:
            self._activity(messages.ActivityKind.CHECKPOINT, False)
        self._tracked = state
        self._saved_step = step
        self.last_snapshot_seconds = seconds

    def restore(self, state: MutableMapping[str, Any] | Mapping[str, Any], *,
                restore_rng: bool = True) -> int:
        """Load the newest complete state into ``state``; returns the step to resume at.

        Every rank gets the same step. The agent picks memory when its snapshot is intact, else
        the newest complete checkpoint on disk that verifies; without an agent, the newest
        complete checkpoint in the directory that verifies. ``self.restored`` says which.

        Raises:
            SessionError: the saved state does not match ``state``'s keys, or cannot be read.
        """
        started = time.perf_counter()
        self._skipped_step = None
        self._activity(messages.ActivityKind.RESTORE, True)
        try:
            loaded = self._state.load()
        except state_backend.StateError as error:
            raise SessionError(str(error)) from error
        self._tracked = state
        step = 0
        if loaded.note:
            logger.warning("rank %d: %s", self.rank, loaded.note)
        if loaded.tree is not None:
            self._load(state, loaded.tree["state"])
            if restore_rng and "rng" in loaded.tree:
                rng.restore(loaded.tree["rng"])
            step = loaded.step
            self._saved_step = step
            if loaded.source in (messages.RestoreSource.PEER, messages.RestoreSource.REPLICA):
                # State from a replica is in no memory slot of this rank: snapshot it now, or
                # the step is complete nowhere until this rank's next snapshot (never, when
                # it was the last step) and a second fault would lose it. Whole: shares would
                # first compare the replicas, a collective the restoring ranks are not in.
                self._save(state, step=step, whole=True)
        self.restored = RestoreInfo(loaded.source, step, time.perf_counter() - started,
                                    loaded.note)
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
        self._flush()
        if self._agent and self._tracked is not None and self._skipped_step is not None:
            try:  # the final state: no step followed the checkpoint that was not due
                self._save(self._tracked, step=self._skipped_step)
            except (SessionError, agent_link.AgentLinkError) as error:
                logger.warning("rank %d: the final state (step %d) was not snapshotted: %s",
                               self.rank, self._skipped_step, error)
        self._closed = True
        self.profiling.flush()
        self._link.send(messages.Finished(time.monotonic()))
        self._link.close()
        self._state.close()

