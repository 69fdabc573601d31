"""The standby process: imports the heavy modules once, then forks ready workers on request.

Starting Python and importing torch costs about 2 s here (more with four ranks on two cores), which
would dominate every restart. The agent starts one standby process per node; it imports the preload
modules (``torch`` by default) without running any torch operation, so it holds no threads and no
device context, and then waits. Each spawn request forks it: the child becomes a new session
(process group), takes the worker's stdout/stderr, environment and working directory, and runs the
script through :mod:`runpy` exactly as ``python script.py`` would, so a fork replaces import time
with a few milliseconds of copy-on-write. Non-Python commands (``--no-python``) are executed.

Runs as ``python -m trainguard.agent.standby FD PRELOAD...`` where FD is one end of a
``SOCK_SEQPACKET`` socket pair. Protocol (helpers.proto), one message per packet:

- agent -> standby: ``StandbyRequest{spawn{id, mode: path|module|exec, target, args, env,
  cwd}}`` with the worker's stdout and stderr file descriptors attached (SCM_RIGHTS).
- standby -> agent: ``StandbyEvent``: ``ready{pid, preloaded, failed}`` once, then
  ``spawned{id, pid}`` or ``spawn_failed{id, error}``, and ``exited{pid, returncode}``
  (negative: killed by that signal) for every child.

Workers die with the standby process (PR_SET_PDEATHSIG), and the standby process with the agent.
A worker's uncaught exception prints without the standby's and runpy's frames, each distinct
traceback once per job (:mod:`trainguard.tracebacks`, in ``$TRAINGUARD_TRACEBACKS``).
This module imports only the standard library, setproctitle and protobuf (with
:mod:`.lifeline`, :mod:`trainguard.tracebacks` and the generated messages): it must start fast
and preload nothing by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import os
import runpy
import select
import signal
import socket
import sys
import types

import setproctitle

from trainguard import tracebacks
from trainguard.agent import lifeline
from trainguard.proto import helpers_pb2 as pb
from trainguard.proto import versioned

__all__ = ["SpawnRequest", "main", "worker_title"]

_MAX_PACKET = 1 << 20


@dataclasses.dataclass(frozen=True)
class SpawnRequest:
    id: int
    mode: str  # "path": run a script; "module": run a module (-m); "exec": run a program
    target: str
    args: list[str]
    env: dict[str, str]
    cwd: str


class _Standby:
    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel
        self._pid = os.getpid()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        signal.set_wakeup_fd(self._wake_write)
        # A Python handler makes SIGCHLD wake the loop through the wakeup fd.
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # The agent decides when the job stops; a Ctrl-C on the terminal, or a SIGTERM to the
        # whole process group, is its to handle.
        lifeline.leave_stop_signals_to_parent()

    def send(self, event: pb.StandbyEvent) -> None:
        self._channel.send(versioned.serialize(event))

    def serve(self) -> SpawnRequest | None:
        """Serve until the agent hangs up; returns only in a forked child, with its request."""
        while True:
            channel = self._channel.fileno()
            readable, _, _ = select.select([channel, self._wake_read], [], [])
            if self._wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
                self._reap()
            if channel in readable:
                message, fds, _, _ = socket.recv_fds(self._channel, _MAX_PACKET, 4)
                if not message:
                    return None
                request = self._parse(message, fds)
                if request is None:
                    continue
                if self._fork(request, fds):
                    return request

    def _parse(self, message: bytes, fds: list[int]) -> SpawnRequest | None:
        request_id = 0
        try:
            spawn = versioned.parse(pb.StandbyRequest, message).spawn
            request_id = spawn.id
            request = SpawnRequest(id=spawn.id, mode=spawn.mode, target=spawn.target,
                                   args=list(spawn.args), env=dict(spawn.env), cwd=spawn.cwd)
            if request.mode not in ("path", "module", "exec") or len(fds) != 2:
                raise ValueError(f"bad mode {request.mode!r} or {len(fds)} descriptors")
        except ValueError as error:  # versioned.ProtocolError is one
            for fd in fds:
                os.close(fd)
            self.send(pb.StandbyEvent(spawn_failed=pb.SpawnFailed(
                id=request_id, error=f"bad request: {error}")))
            return None
        return request

    def _fork(self, request: SpawnRequest, fds: list[int]) -> bool:
        """Fork a worker; True in the child."""
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as error:
            for fd in fds:
                os.close(fd)
            self.send(pb.StandbyEvent(spawn_failed=pb.SpawnFailed(id=request.id,
                                                                  error=str(error))))
            return False
        if pid == 0:
            self._become_worker(request, fds)
            return True
        for fd in fds:
            os.close(fd)
        self.send(pb.StandbyEvent(spawned=pb.Spawned(id=request.id, pid=pid)))
        return False

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.send(pb.StandbyEvent(exited=pb.Exited(
                pid=pid, returncode=os.waitstatus_to_exitcode(status))))

    def _become_worker(self, request: SpawnRequest, fds: list[int]) -> None:
        os.setsid()
        # Before the environment is replaced: setproctitle finds argv's memory through it.
        setproctitle.setproctitle(worker_title(request))
        lifeline.die_with_parent(self._pid)
        stdout, stderr = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (devnull, stdout, stderr, self._wake_read, self._wake_write):
            os.close(fd)
        self._channel.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for signum in lifeline.STOP_SIGNALS:  # a worker gets them as under python script.py
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request.env)
        os.chdir(request.cwd)
        # Output should reach the agent as it is written, as it does on a terminal.
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            # A fresh interpreter seeds numpy's global generator from the OS; forks would share it.
            numpy.random.seed()


def worker_title(request: SpawnRequest) -> str:
    """``trainguard: rank 1 train.py``: what ps and pgrep show for a worker (forked workers
    otherwise all look like the standby process)."""
    name = os.path.basename(request.target) if request.mode == "path" else request.target
    return f"trainguard: rank {request.env.get('RANK', '?')} {name}"


def _run_worker(request: SpawnRequest) -> None:
    """Run the worker's program in this (forked) process, as the interpreter would."""
    if request.mode == "exec":
        try:
            os.execvpe(request.target, [request.target, *request.args], dict(os.environ))
        except OSError as error:
            sys.stderr.write(f"trainguard: cannot execute {request.target!r}: {error}\n")
            os._exit(127)
    tracebacks.install(os.environ.get("TRAINGUARD_TRACEBACKS"))
    if request.mode == "module":
        sys.argv = [request.target, *request.args]
        sys.path[0] = os.getcwd()
        _stay_main(runpy.run_module(request.target, run_name="__main__", alter_sys=True))
    else:
        sys.argv = [request.target, *request.args]
        sys.path[0] = os.path.dirname(os.path.abspath(request.target))
        _stay_main(runpy.run_path(request.target, run_name="__main__"))


def _stay_main(script_globals: dict[str, object]) -> None:
    """Keep the script's objects in ``__main__`` until the interpreter shuts down.

    runpy runs the script in a temporary ``__main__`` and, once it returns, drops it, which can
    free the script's objects while the interpreter still runs. ``python script.py`` never does
    that, and torch relies on it: freeing a DDP reducer joins gloo's worker thread while holding
    the GIL, and that thread may need the GIL to finish (seen here: a deadlock at exit). At
    shutdown, ``__main__`` is cleared first, and a thread that asks for the GIL is ended instead.
    """
    main = types.ModuleType("__main__")
    main.__dict__.update(script_globals)
    sys.modules["__main__"] = main


def main(argv: list[str]) -> None:
    fd, parent, *preload = argv
    lifeline.die_with_parent(int(parent))
    channel = socket.socket(fileno=int(fd))
    standby = _Standby(channel)
    loaded: list[str] = []
    failed: dict[str, str] = {}
    for name in preload:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as error:
            failed[name] = f"{type(error).__name__}: {error}"
    # Objects that exist now are shared with every worker; keep the collector from touching
    # (and so copying) their pages.
    gc.freeze()
    standby.send(pb.StandbyEvent(ready=pb.Ready(pid=os.getpid(), preloaded=loaded,
                                                failed=failed)))
    request = standby.serve()
    if request is not None:
        _run_worker(request)


if __name__ == "__main__":
    main(sys.argv[1:])
