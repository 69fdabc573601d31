"""Which devices a worker sees, so that a script indexing devices by ``LOCAL_RANK`` (as
``torch.cuda.set_device(LOCAL_RANK)`` does) lands on the device its rank was assigned.

The job's devices are numbered 0.. (its ranks' devices, then its spares). When a rank has been
moved off a device, every worker gets the same visible list: the devices of local ranks
0, 1, ... in that order (so index ``LOCAL_RANK`` is a worker's own device, and each worker still
sees its peers' devices, as NCCL's peer-to-peer paths expect), then the job's other devices
still in use (free spares), never a device a rank was moved off. When the user set the variable
for the job, the job's device numbers index into the user's list, and the user's entries beyond
the job's devices follow, untouched. With no user list and no rank moved the variable is left
unset: every device stays visible, exactly as under torchrun.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["VISIBILITY_VARIABLES", "visible_devices"]

VISIBILITY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
"""NVIDIA's and Ascend's (CANN runtime) device visibility variables, handled alike."""


def visible_devices(base: Mapping[str, str], *, placement: Sequence[int], devices: int,
                    retired: Sequence[int]) -> dict[str, str]:
    """The visibility variables to give every worker.

    Args:
        base: the job's environment (a user's own visibility list is read from it).
        placement: the job device of each local rank, in local rank order.
        devices: how many devices the job has (its ranks' and its spares').
        retired: job devices ranks were moved off (never visible again).

    Raises:
        ValueError: a user's list names fewer devices than the job has.
    """
    moved = list(placement) != list(range(len(placement)))
    spare = [d for d in range(devices) if d not in placement and d not in retired]
    order = [*placement, *spare]
    chosen = {}
    for variable in VISIBILITY_VARIABLES:
        given = base.get(variable)
        if given is None:
            if moved:
                chosen[variable] = ",".join(str(device) for device in order)
            continue
        entries = [entry.strip() for entry in given.split(",") if entry.strip()]
        if len(entries) < devices:
            raise ValueError(
                f"{variable}={given!r} lists {len(entries)} devices; the job needs {devices} "
                "(its ranks' and its spare devices'), numbered into that list")
        chosen[variable] = ",".join([*(entries[device] for device in order),
                                     *entries[devices:]])
    return chosen
