"""A cluster job in the controller's table, while its hosts join and while it runs: who may
join it, at which place (a node that holds ranks, or a spare), and what every host must agree
on; a job being taken over keeps its nodes for the hosts that held them."""

from __future__ import annotations

import asyncio

from google.protobuf import message as protobuf_message

from trainguard.controller import agent_proxy, cluster_agents, job_controller, spare_pool
from trainguard.job import profiling_switch
from trainguard.proto import control_pb2 as pb
from trainguard.store import recorder

__all__ = ["AGREED", "ClusterJob", "JoinError"]


class JoinError(RuntimeError):
    """A host may not join a job; the message says why, naming both values."""


def _difference(first: protobuf_message.Message, other: protobuf_message.Message, *,
                names: tuple[str, ...] | None = None, prefix: str = "") -> str | None:
    """The first field (of ``names``; None: all) two messages disagree on, with both values;
    None if they agree."""
    for field in first.DESCRIPTOR.fields:
        if names is not None and field.name not in names:
            continue
        name = prefix + field.name
        mine, theirs = getattr(first, field.name), getattr(other, field.name)
        if field.message_type is not None and not field.is_repeated:
            found = _difference(mine, theirs, prefix=f"{name}.")
            if found:
                return found
        elif mine != theirs:
            if field.is_repeated:
                return f"{name} {list(theirs)}, the job has {list(mine)}"
            return f"{name} {theirs!r}, the job has {mine!r}"
    return None


AGREED = ("nnodes", "max_nodes", "nproc_per_node", "program", "version", "dp_size",
           "recovery", "persist_interval")
"""What every host of a job must agree on."""


class ClusterJob:
    """One job while its hosts join and while it runs.

    Places 0..nnodes-1 are the nodes that hold ranks; a host at a place past them, or any
    host joining once the job runs, is a spare (its place names only its run directory)."""

    def __init__(self, first: pb.Register, *, running: bool = False) -> None:
        """``running``: the store holds its record, left by a controller that went away (its
        first host to register may be a new one, not one that registers again)."""
        self.first = first
        self.adopting = running or first.HasField("rejoin")
        """Its hosts ran it under a controller that went away, and join this one again."""
        self.hosts: dict[int, agent_proxy.AgentProxy] = {}
        self.spares = spare_pool.SparePool()
        self.agents: cluster_agents.ClusterAgents | None = None  # once it runs
        self.controller: job_controller.JobController | None = None  # once it runs
        self.claimed: dict[int, str] = {}  # place -> the host connected there
        self.replaced: list[int] = []
        """Nodes whose host did not register again in a takeover: a spare holds them."""
        self.started = False
        self.ended = asyncio.Event()
        self.profiling = profiling_switch.ProfilingSwitch()
        """Its lightweight-profiling marks (controller.data_trace)."""
        self.recorder: recorder.EventRecorder | None = None  # once it runs

    def connected(self) -> list[agent_proxy.AgentProxy]:
        """Its hosts and spares still connected."""
        return [proxy for proxy in self.hosts.values() if proxy.gone is None] + \
            self.spares.waiting()

    def admit(self, register: pb.Register) -> tuple[int, bool]:
        """The place ``register`` gets, and whether it is a spare.

        Raises:
            JoinError: it disagrees with the job, or its place is taken or out of range, or
                every place is taken.
        """
        job = self.first.job
        found = _difference(self.first, register, names=AGREED)
        if found:
            raise JoinError(f"host {register.host} may not join job {job}: it has {found}")
        rejoining = register.HasField("rejoin")
        if rejoining and not self.adopting and not (self.started or register.rejoin.spare):
            raise JoinError(f"host {register.host} rejoins job {job}, which was formed by this "
                            "controller: try again once it runs")
        if rejoining and self.started and not register.rejoin.spare:
            raise JoinError(f"host {register.host} rejoins job {job} holding node "
                            f"{register.node_rank}, which runs here without it")
        # A job being taken over keeps its nodes for the hosts that held them, as far as it
        # can: a host new to it without a node rank takes a spare place first (one may be
        # started to replace a host that does not return). One that names a node takes it
        # (the job started again anew, its hosts gone with their controller).
        newcomer = self.adopting and not rejoining and not self.started
        places = max(register.max_nodes, register.nnodes)
        if register.HasField("node_rank"):
            place = register.node_rank
            if place not in range(places):
                raise JoinError(f"host {register.host}: node rank {place} is out of range for "
                                f"{places} hosts (0..{places - 1})")
            if place in self.claimed:
                raise JoinError(f"host {register.host} claims node rank {place} of job {job}, "
                                f"which host {self.claimed[place]} holds")
        else:
            if self.started:
                first_free = range(places)
            elif newcomer:
                first_free = range(register.nnodes, places)  # the spare places
            else:
                first_free = range(register.nnodes)
            free = [n for n in first_free if n not in self.claimed] or [
                n for n in range(places) if n not in self.claimed]
            if not free:
                raise JoinError(f"host {register.host} may not join job {job}: its "
                                f"{register.nnodes} hosts and {places - register.nnodes} "
                                "spares are all there")
            place = free[0]
        self.claimed[place] = register.host
        if rejoining:
            return place, register.rejoin.spare
        return place, self.started or place >= register.nnodes

    def release(self, place: int) -> None:
        """The host at ``place`` went away: the place is free for another (before the job
        starts, it no longer counts towards it)."""
        self.claimed.pop(place, None)
        if not self.started:
            self.hosts.pop(place, None)

    @property
    def missing(self) -> list[int]:
        """The nodes no host holds."""
        return sorted(set(range(self.first.nnodes)) - set(self.hosts))

    @property
    def complete(self) -> bool:
        return not self.missing


