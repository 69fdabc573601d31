"""Snapshot state that data-parallel replicas share in shares, each written once.

The ``dp`` replicas of a replica group (:class:`trainguard.job.replicas.ReplicaLayout`) hold
identical model and optimizer state, so copying all of it on every rank writes the same bytes
``dp`` times into the host's memory. With shares, the replicated tensors (everything under the
tree's ``"state"`` except the keys named per-rank) are split into ``dp`` contiguous runs of
about equal bytes, in the tree's order. Replica ``i`` of the group is the *holder* of run ``i``
and writes it; every other tensor is marked with its holder
(:mod:`trainguard.ipc.snapshot_layout`). Per-rank parts (the step, random generators, keys
named per-rank) stay whole in every snapshot.

Written once, a run is lost with a rank that dies before committing its snapshot of a step,
while the others have theirs. That step is not lost with it: until the next optimizer step,
which needs the lost rank's gradients, every other replica's parameters and optimizer state
*are* that step's. So the lost rank's successor in the group's ring writes its snapshot again
with the lost run too, taken from its live tensors (:meth:`AgentMemoryBackend.complete`, on the
agent's order), and that snapshot stands in for the lost rank. Only the optimizers' tensors
(parameters and their state, :func:`trainguard.train.copy_behind.optimizer_tensors`) are
written once; other replicated tensors, such as batch-norm statistics, change in the next
forward pass, so the ring successor keeps a copy of its predecessor's run of those in every
snapshot. With two replicas shares are not used.

Replicas are trusted only after they are checked: at the first snapshot of every generation
each rank with a replica checksums its replicated tensors and the ranks compare them over the
process group, with shares in use or not (two replicas), since a replica's snapshot also stands
in for a rank whose own is lost (the agent's restore plan). Replicas that differ (a script that
is not data parallel, a wrong ``dp_size``) turn shares off for the rest of the process, with a
warning, so every snapshot is whole again; and the agent is told, so that no replica stands in
from then on. Shares turned off turn the comparison off too (the way out for a script whose
ranks do not all snapshot the same steps): the replicas then stand in unchecked.

A restore decodes the rank's snapshot (or the one standing in for it) and reads each tensor
held elsewhere from its holder's snapshot of the same step (:func:`fill_from_files`): memory
slots on this host, or shard files on disk. No process group is needed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
import xxhash

from trainguard.job import replicas
from trainguard.train import collectives, copy_behind, environment, snapshot

__all__ = ["ReplicaShares", "SharesError", "assign", "fill_from_files", "kept"]

logger = logging.getLogger(__name__)


class SharesError(RuntimeError):
    """A snapshot's shares cannot be assembled; the message says why."""


def _per_rank_sources(tree: dict[str, Any], per_rank: Collection[str]) -> set[int]:
    """The ``id()`` of every tensor of ``tree`` outside ``tree["state"]`` (the step, random
    generators) or under its ``per_rank`` keys: they differ between replicas. Found by the
    snapshot's own pickler, so that a tensor it finds anywhere (in an object's attributes too)
    is counted as it will be saved."""
    parts = [value for key, value in tree.items() if key != "state"]
    parts += [tree["state"][key] for key in per_rank if key in tree["state"]]
    sources: list[int] = []
    snapshot.flatten(parts, sources=sources)
    return set(sources)


def assign(tensors: list[torch.Tensor], group: tuple[int, ...]) -> list[int]:
    """The holder of each tensor: ``group``'s ranks in turn, each a run of about equal bytes
    (a tensor goes to the share its first byte falls in)."""
    sizes = [tensor.numel() * tensor.element_size() for tensor in tensors]
    total = max(1, sum(sizes))
    holders = []
    before = 0
    for size in sizes:
        holders.append(group[min(len(group) - 1, before * len(group) // total)])
        before += size
    return holders


def kept(rank: int, group: tuple[int, ...]) -> frozenset[int]:
    """The holders whose runs ``rank``'s snapshot keeps of the tensors the optimizers do not
    own: its own and its predecessor's in the group's ring, so that every such run is in two
    snapshots (one, in a group of one)."""
    index = group.index(rank)
    return frozenset((rank, group[index - 1]))


def _digest(tensors: list[torch.Tensor]) -> int:
    hasher = xxhash.xxh3_64()
    for tensor in tensors:
        hasher.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        data = tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
        hasher.update(data.data)
    return hasher.intdigest() - 2**63  # to a signed 64-bit value, for an int64 tensor


def fill_from_files(absent: list[snapshot.Absent], snapshots: Mapping[int, str]) -> None:
    """Complete a decoded tree: each absent tensor is read from the snapshot of its holder
    (``snapshots``: rank -> a memory slot or shard file of the same step), so no process group
    is needed.

    Raises:
        snapshot.SnapshotError: a holder's snapshot is not given, is unreadable, lacks the
            tensor, or holds one of another shape or type.
    """
    by_holder: dict[int, list[snapshot.Absent]] = {}
    for item in absent:
        by_holder.setdefault(item.holder, []).append(item)
    for holder, items in sorted(by_holder.items()):
        path = snapshots.get(holder)
        if not path:
            raise snapshot.SnapshotError(f"no snapshot of rank {holder} is at hand, and it "
                                         "holds part of the replicated state")
        snapshot.copy_tensors(path, {item.index: item.tensor for item in items})


class ReplicaShares:
    def __init__(self, *, rank: int, layout: replicas.ReplicaLayout, enabled: bool,
                 per_rank: Collection[str] = (), local_world_size: int | None = None) -> None:
        """Args:
            layout: which ranks hold the same state.
            enabled: whether to write shares at all (a group of one or two replicas never
                does: with each run kept twice, two replicas' shares are whole snapshots;
                nor a group across hosts: a rank's whole state stays in its host's memory).
                Off, the replicas are not compared either.
            per_rank: keys of the saved state that differ per rank and stay whole.
            local_world_size: the ranks of each host, numbered in a run (None: one host).
        """
        self._rank = rank
        self._layout = layout
        self._group = layout.group(rank)
        self._per_rank = frozenset(per_rank)
        per_host = local_world_size or layout.world_size
        one_host = len({member // per_host for member in self._group}) == 1
        self.enabled = enabled and len(self._group) > 2 and one_host
        self._compared = enabled  # off: the ranks may not all snapshot together
        self._checked = False
        self.differ = ""
        """Once the replicas were found to differ: which groups, said for a person."""
        # The last answer of holders(), with what it depended on (see there).
        self._last: tuple[tuple[Any, ...], list[int | None] | None] | None = None

    @classmethod
    def from_env(cls, *, rank: int, world_size: int, enabled: bool | None,
                 dp_size: int | None, per_rank: Collection[str] = (),
                 environ: Mapping[str, str] = os.environ) -> ReplicaShares:
        """The session's settings, ``TRAINGUARD_SNAPSHOT_SHARES`` (``0``/``1``) winning over
        ``enabled``; shares are on unless turned off. The replicas are the job's, which the
        agent passes as ``TRAINGUARD_DP_SIZE`` (``trainguard run --dp-size``, by default every
        rank: pure data parallelism), since the agent restores a rank from its replicas by
        them; ``dp_size`` must agree with it.

        Raises:
            SharesError: a setting is malformed, or ``dp_size`` is not the job's; the message
                names it.
        """
        try:
            enabled = environment.flag("TRAINGUARD_SNAPSHOT_SHARES", enabled, environ=environ)
        except ValueError as error:
            raise SharesError(str(error)) from None
        size = environ.get("TRAINGUARD_DP_SIZE")
        where = f"TRAINGUARD_DP_SIZE={size!r}" if size is not None else f"dp_size={dp_size}"
        try:
            layout = replicas.ReplicaLayout(
                world_size, int(size) if size is not None else dp_size or world_size)
        except ValueError as error:
            raise SharesError(f"{where}: {error}") from error
        if dp_size is not None and layout.dp_size != dp_size:
            raise SharesError(
                f"dp_size={dp_size} is not the job's dp-size {layout.dp_size} "
                f"({where}: trainguard run --dp-size, by default the world size), by which "
                f"the agent restores a rank from its replicas: run with --dp-size {dp_size}")
        local = environ.get("LOCAL_WORLD_SIZE")
        try:
            per_host = int(local) if local else None
        except ValueError:
            raise SharesError(f"LOCAL_WORLD_SIZE={local!r}: not a number of ranks") from None
        return cls(rank=rank, layout=layout, enabled=enabled is None or enabled,
                   per_rank=per_rank, local_world_size=per_host)

    @property
    def replicated(self) -> bool:
        """Whether another rank holds this rank's state: a replica whose snapshot can stand in
        for one this rank leaves unfinished (unless the replicas were found to differ)."""
        return len(self._group) > 1 and not self.differ

    def new_generation(self) -> None:
        """The next snapshot checks again that the replicas are identical."""
        self._checked = False
        self._last = None

    @property
    def predecessor(self) -> int:
        """The rank whose lost run this rank writes on completion (its ring predecessor)."""
        return self._group[self._group.index(self._rank) - 1]

    def holders(self, tree: dict[str, Any], tensors: list[torch.Tensor], sources: list[int],
                *, optimizers: Sequence[torch.optim.Optimizer] = ()) -> list[int | None] | None:
        """A :data:`snapshot.HolderRule` (given ``optimizers``): for each of ``tree``'s
        tensors (as the snapshot's pickler found them, each once, in the tree's order), the
        rank that writes it instead of this one; None when this snapshot is to be whole. The
        replicated tensors are those outside the per-rank parts; of them, those the optimizers
        own (:func:`copy_behind.optimizer_tensors`) are kept by their holder only, the others
        by their holder and its ring successor.

        The answer depends only on which tensors are per-rank, on each replicated tensor's
        place and size in memory and on the places of the optimizers' parameters; while those
        are as they were at the last call, the last answer is given again without working it
        out: a training loop snapshots the same tensors every step, and the working out is a
        good part of what a small snapshot costs. The optimizers' state is among the tree's
        tensors (it is saved with them), so a state tensor replaced shows as another place."""
        if not self.enabled and (self._checked or not self._compared or not self.replicated):
            return None
        per_rank = _per_rank_sources(tree, self._per_rank)
        flags = tuple(source in per_rank for source in sources)
        if not self.enabled:  # no shares, but a replica that may stand in: compare
            self._check([tensor for tensor, flag in zip(tensors, flags, strict=True)
                         if not flag])
            return None
        signature = (flags,
                     tuple((tensor.data_ptr(), tensor.nbytes)
                           for tensor, flag in zip(tensors, flags, strict=True) if not flag),
                     tuple(parameter.data_ptr() for optimizer in optimizers
                           for group in optimizer.param_groups for parameter in group["params"]))
        if self._checked and self._last is not None and self._last[0] == signature:
            return self._last[1]
        held = self._work_out(tensors, flags, optimizers)
        self._last = (signature, held) if self.enabled else None
        return held

    def _work_out(self, tensors: list[torch.Tensor], per_rank: tuple[bool, ...],
                  optimizers: Sequence[torch.optim.Optimizer]) -> list[int | None] | None:
        replicated = [index for index, flag in enumerate(per_rank) if not flag]
        if not self._checked and not self._check([tensors[index] for index in replicated]):
            return None
        assigned = assign([tensors[index] for index in replicated], self._group)
        if len(set(assigned)) < len(self._group):
            # Too few tensors for a share each: whole, so that every snapshot written as
            # shares lacks some tensor on every rank, and every rank of the group assembles.
            return None
        keep = kept(self._rank, self._group)
        owned = copy_behind.optimizer_tensors(optimizers) if optimizers else frozenset()
        held: list[int | None] = [None] * len(tensors)
        for index, holder in zip(replicated, assigned, strict=True):
            if holder != self._rank and (holder not in keep
                                         or tensors[index].data_ptr() in owned):
                held[index] = holder
        return held

    def _check(self, tensors: list[torch.Tensor]) -> bool:
        """Compare the replicas' ``tensors`` (a collective: every rank checks at the same
        snapshot); whether they are identical. Replicas that differ turn shares off and set
        :attr:`differ`; without a process group shares are off, unchecked."""
        self._checked = True
        if not collectives.grouped():
            if self.enabled:
                logger.warning("rank %d: replicated state is snapshotted whole on every rank: "
                               "shares need the process group to compare the replicas "
                               "(checkpoint after init_process_group())", self._rank)
            self.enabled = False
            return False
        where = collectives.device()  # a GPU when the job's group is NCCL's alone
        mine = torch.tensor([_digest(tensors)], dtype=torch.int64, device=where)
        every = [torch.zeros(1, dtype=torch.int64, device=where)
                 for _ in range(self._layout.world_size)]
        collectives.hold(dist.all_gather(every, mine, async_op=True))
        digests = [int(digest.item()) for digest in every]
        # Every rank sees every digest, so every rank takes the same decision.
        differing = [list(group) for group in map(self._layout.group, range(self._layout.parts))
                     if len({digests[rank] for rank in group}) > 1]
        if not differing:
            return True
        self.enabled = False
        self.differ = f"replica groups {differing} at dp-size {self._layout.dp_size}"
        if self._rank == 0:
            logger.warning(
                "the replicated state (everything saved but the per-rank keys) differs between "
                "ranks that should hold the same: %s. Is the script data parallel, and is the "
                "dp-size right? Snapshots stay whole on every rank from now on, and no "
                "replica stands in for a lost rank.", self.differ)
        return False
