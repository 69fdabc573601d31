"""A full memory fence, for the sequence lock of snapshot slots shared between processes.

A writer marks its slot odd, copies the snapshot in, then marks it even; a reader reads the mark,
the bytes, then the mark again (:mod:`.snapshot_layout`). That holds only if other cores see the
stores in program order, and the reader's loads happen in program order. x86 keeps both orders
(total store order: only a store followed by a load may be reordered, and the lock never relies
on that), and each of Python's reads and writes of the mapping is an opaque C call the compiler
cannot move, so there :func:`fence` does nothing. Weakly ordered machines (ARM64, as in Ascend's
Kunpeng and NVIDIA's Grace hosts; POWER; RISC-V) reorder both, so the mark could be seen even
before the bytes it vouches for: there :func:`fence` issues a sequentially consistent fence,
through GCC's libatomic (``atomic_thread_fence``; 0.15 us a call through ctypes, measured on
x86) or, where that library is missing, Linux's ``membarrier`` system call (which puts a full
barrier before and after itself in the calling thread; 0.5 us in a process of one thread, more
where it must interrupt the process's other running threads; in every kernel since 4.14).

Python itself has no fence (neither ``ctypes`` nor the standard library issues one), hence the
two backends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
from collections.abc import Callable

__all__ = ["FenceUnavailableError", "fence", "kind"]

_TOTAL_STORE_ORDER = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
_SEQ_CST = 5  # __ATOMIC_SEQ_CST, the memory_order argument of atomic_thread_fence
_MEMBARRIER = {"aarch64": 283, "arm64": 283, "riscv64": 283, "loongarch64": 283,
               "ppc64le": 365, "ppc64": 365, "s390x": 356, "x86_64": 324}
"""Linux's system call number of membarrier, by machine (asm-generic's 283 where it is used)."""
_MEMBARRIER_PRIVATE_EXPEDITED = 1 << 3
_MEMBARRIER_REGISTER_PRIVATE_EXPEDITED = 1 << 4


class FenceUnavailableError(RuntimeError):
    """A weakly ordered machine offers neither fence: snapshots cannot be shared safely."""


def _libatomic() -> Callable[[], None] | None:
    """GCC's libatomic's ``atomic_thread_fence(seq_cst)``; None without the library."""
    name = ctypes.util.find_library("atomic")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).atomic_thread_fence
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = None
    return lambda: function(_SEQ_CST)


def _membarrier(machine: str) -> Callable[[], None] | None:
    """The ``membarrier`` system call (registered for this process once); None where the
    machine's call number is unknown or the kernel refuses it."""
    number = _MEMBARRIER.get(machine)
    if number is None:
        return None
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long
    if syscall(number, _MEMBARRIER_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0:
        return None

    def barrier() -> None:
        if syscall(number, _MEMBARRIER_PRIVATE_EXPEDITED, 0, 0) != 0:
            raise FenceUnavailableError(
                f"membarrier failed: errno {ctypes.get_errno()}")

    return barrier


def _nothing() -> None:
    return None


def _resolve(machine: str) -> tuple[str, Callable[[], None]]:
    """The fence for ``machine`` (``platform.machine()``'s name) and what it is.

    Raises:
        FenceUnavailableError: a weakly ordered machine without libatomic or membarrier.
    """
    if machine.lower() in _TOTAL_STORE_ORDER:
        return "none needed (x86 keeps stores and loads in order)", _nothing
    found = _libatomic()
    if found is not None:
        return "libatomic's atomic_thread_fence", found
    found = _membarrier(machine.lower())
    if found is not None:
        return "Linux's membarrier system call", found
    raise FenceUnavailableError(
        f"this {machine} machine reorders memory, and snapshots shared between processes need "
        "a memory fence: install GCC's libatomic (Debian and Ubuntu: libatomic1) or run a "
        "Linux kernel with membarrier (4.14 or later)")


@functools.cache
def _chosen() -> tuple[str, Callable[[], None]]:
    return _resolve(platform.machine())


def fence() -> None:
    """Order every load and store before it before every one after it, as other cores see
    them.

    Raises:
        FenceUnavailableError: on a weakly ordered machine without a fence.
    """
    _chosen()[1]()


def kind() -> str:
    """What :func:`fence` does on this machine, for people.

    Raises:
        FenceUnavailableError: on a weakly ordered machine without a fence.
    """
    return _chosen()[0]
