"""The standby process forks workers on request: scripts, modules and programs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from trainguard.agent.standby_client import StandbyError, StandbyProcess, WorkerLaunch

T = TypeVar("T")
WAIT = 30.0  # seconds any one thing may take before the test fails


class ExitLog:
    """The standby's exit reports, by pid."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}
        self.lost: list[str] = []
        self._changed = asyncio.Event()

    def on_exit(self, pid: int, returncode: int) -> None:
        self.codes[pid] = returncode
        self._changed.set()

    def on_lost(self, reason: str) -> None:
        self.lost.append(reason)
        self._changed.set()

    async def wait(self, pid: int) -> int:
        async def reported() -> int:
            while pid not in self.codes:
                self._changed.clear()
                await self._changed.wait()
            return self.codes[pid]

        return await asyncio.wait_for(reported(), WAIT)


class PipeReader:
    """The read end of a pipe a worker writes to, read by the event loop."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        self.data = bytearray()
        self.eof = False
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.read_end, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.read_end, 65536)
        except BlockingIOError:
            return
        if chunk:
            self.data += chunk
        else:
            self.eof = True
            asyncio.get_running_loop().remove_reader(self.read_end)
        self._changed.set()

    def handed_over(self) -> None:
        """The worker has its copy of the write end; ours would keep the pipe open."""
        os.close(self.write_end)
        self.write_end = -1

    async def until(self, done: Callable[[PipeReader], bool]) -> bytes:
        async def waiting() -> bytes:
            while not done(self):
                self._changed.clear()
                await self._changed.wait()
            return bytes(self.data)

        return await asyncio.wait_for(waiting(), WAIT)

    async def all(self) -> bytes:
        return await self.until(lambda reader: reader.eof)

    def close(self) -> None:
        if not self.eof:
            asyncio.get_running_loop().remove_reader(self.read_end)
        os.close(self.read_end)
        if self.write_end >= 0:
            os.close(self.write_end)


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stream:
            state = stream.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def until_gone(pid: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not gone(pid):
        assert loop.time() < deadline, f"process {pid} still runs after {WAIT} s"
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, standby: StandbyProcess, exits: ExitLog) -> None:
        self.standby = standby
        self.exits = exits
        self.readers: list[PipeReader] = []
        self.pids: list[int] = []

    async def spawn(self, launch: WorkerLaunch) -> tuple[int, PipeReader, PipeReader]:
        stdout, stderr = PipeReader(), PipeReader()
        self.readers += [stdout, stderr]
        try:
            pid = await asyncio.wait_for(
                self.standby.spawn(launch, stdout=stdout.write_end, stderr=stderr.write_end),
                WAIT)
        finally:
            stdout.handed_over()
            stderr.handed_over()
        self.pids.append(pid)
        return pid, stdout, stderr


def run_with_standby(env: Mapping[str, str], use: Callable[[Harness], Awaitable[T]]) -> T:
    async def scenario() -> T:
        exits = ExitLog()
        standby = StandbyProcess(preload=[], env=env, on_exit=exits.on_exit,
                                 on_lost=exits.on_lost)
        await standby.start(timeout=WAIT)
        harness = Harness(standby, exits)
        try:
            return await use(harness)
        finally:
            await standby.close(timeout=10)
            for pid in harness.pids:
                if not gone(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
            if standby.pid is not None and not gone(standby.pid):
                os.kill(standby.pid, signal.SIGKILL)
            for reader in harness.readers:
                reader.close()

    return asyncio.run(scenario())


def write_script(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


def base_env() -> dict[str, str]:
    return dict(os.environ, TG_STANDBY_ONLY="standby")


def worker_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}


def test_start_reports_ready(tmp_path: Path) -> None:
    async def use(harness: Harness) -> tuple[int | None, list[str], bool]:
        return harness.standby.pid, harness.standby.preloaded, harness.standby.alive

    pid, preloaded, alive = run_with_standby(base_env(), use)
    assert pid is not None
    assert pid != os.getpid()
    assert preloaded == []
    assert alive


def test_preload_failures_do_not_stop_the_standby(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], bool]:
        exits = ExitLog()
        standby = StandbyProcess(preload=["json", "tg_no_such_module_anywhere"],
                                 env=base_env(), on_exit=exits.on_exit, on_lost=exits.on_lost)
        await standby.start(timeout=WAIT)
        try:
            return standby.preloaded, standby.alive
        finally:
            await standby.close(timeout=10)

    preloaded, alive = asyncio.run(scenario())
    assert preloaded == ["json"]
    assert alive


def test_script_runs_with_its_argv_env_and_cwd(tmp_path: Path) -> None:
    script = write_script(tmp_path / "train.py", """\
        import json, os, sys
        print(json.dumps({
            "argv": sys.argv, "env": os.environ.get("TG_TEST"),
            "standby_only": os.environ.get("TG_STANDBY_ONLY"), "cwd": os.getcwd(),
            "name": __name__, "path0": sys.path[0],
        }))
        sys.stderr.write("to stderr\\n")
        raise SystemExit(3)
        """)
    workdir = tmp_path / "work"
    workdir.mkdir()
    launch = WorkerLaunch(mode="path", target=str(script), args=("--lr", "0.1", "two words"),
                          env=worker_env(TG_TEST="hello"), cwd=str(workdir))

    async def use(harness: Harness) -> tuple[int, bytes, bytes]:
        pid, stdout, stderr = await harness.spawn(launch)
        returncode = await harness.exits.wait(pid)
        return returncode, await stdout.all(), await stderr.all()

    returncode, out, err = run_with_standby(base_env(), use)
    assert returncode == 3
    report = json.loads(out)
    assert report == {
        "argv": [str(script), "--lr", "0.1", "two words"], "env": "hello",
        "standby_only": None, "cwd": str(workdir), "name": "__main__",
        "path0": str(tmp_path),
    }
    assert err == b"to stderr\n"


def test_module_runs_as_with_dash_m(tmp_path: Path) -> None:
    modules = tmp_path / "mods"
    modules.mkdir()
    write_script(modules / "tg_standby_example.py", """\
        import json, os, sys
        print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__,
                          "cwd": os.getcwd()}))
        sys.exit(0)
        """)
    env = dict(base_env(), PYTHONPATH=str(modules))
    launch = WorkerLaunch(mode="module", target="tg_standby_example", args=("x", "y"),
                          env=worker_env(PYTHONPATH=str(modules)), cwd=str(tmp_path))

    async def use(harness: Harness) -> tuple[int, bytes]:
        pid, stdout, _ = await harness.spawn(launch)
        returncode = await harness.exits.wait(pid)
        return returncode, await stdout.all()

    returncode, out = run_with_standby(env, use)
    assert returncode == 0
    report = json.loads(out)
    module_file = str(modules / "tg_standby_example.py")
    assert report == {"argv": [module_file, "x", "y"], "name": "__main__", "file": module_file,
                      "cwd": str(tmp_path)}


def test_exec_runs_a_program(tmp_path: Path) -> None:
    launch = WorkerLaunch(mode="exec", target="/bin/sh",
                          args=("-c", 'echo "$TG_TEST in $(pwd)"; exit 5'),
                          env=worker_env(TG_TEST="sh-env"), cwd=str(tmp_path))

    async def use(harness: Harness) -> tuple[int, bytes]:
        pid, stdout, _ = await harness.spawn(launch)
        returncode = await harness.exits.wait(pid)
        return returncode, await stdout.all()

    returncode, out = run_with_standby(base_env(), use)
    assert returncode == 5
    assert out == f"sh-env in {tmp_path}\n".encode()


def test_exec_of_a_missing_program_exits_127(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    launch = WorkerLaunch(mode="exec", target=missing, args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> tuple[int, bytes]:
        pid, _, stderr = await harness.spawn(launch)
        returncode = await harness.exits.wait(pid)
        return returncode, await stderr.all()

    returncode, err = run_with_standby(base_env(), use)
    assert returncode == 127
    assert f"trainguard: cannot execute {missing!r}".encode() in err


def test_a_worker_killed_by_a_signal(tmp_path: Path) -> None:
    script = write_script(tmp_path / "die.py", """\
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    launch = WorkerLaunch(mode="path", target=str(script), args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> int:
        pid, _, _ = await harness.spawn(launch)
        return await harness.exits.wait(pid)

    assert run_with_standby(base_env(), use) == -signal.SIGKILL


def test_an_uncaught_exception(tmp_path: Path) -> None:
    script = write_script(tmp_path / "fail.py", """\
        def train():
            raise ValueError("boom in worker")
        train()
        """)
    launch = WorkerLaunch(mode="path", target=str(script), args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> tuple[int, bytes]:
        pid, _, stderr = await harness.spawn(launch)
        returncode = await harness.exits.wait(pid)
        return returncode, await stderr.all()

    returncode, err = run_with_standby(base_env(), use)
    assert returncode == 1
    text = err.decode()
    assert text.startswith("Traceback (most recent call last):")
    assert 'in train' in text
    assert text.rstrip().endswith("ValueError: boom in worker")


def test_workers_run_one_after_another_and_side_by_side(tmp_path: Path) -> None:
    script = write_script(tmp_path / "echo.py", """\
        import os, sys
        print(os.environ["RANK"])
        sys.exit(int(os.environ["RANK"]) + 10)
        """)

    async def use(harness: Harness) -> dict[int, tuple[int, bytes]]:
        spawned = []
        for rank in range(3):
            launch = WorkerLaunch(mode="path", target=str(script), args=(),
                                  env=worker_env(RANK=str(rank)), cwd=str(tmp_path))
            spawned.append((rank, *await harness.spawn(launch)))
        results = {}
        for rank, pid, stdout, _ in spawned:
            results[rank] = (await harness.exits.wait(pid), await stdout.all())
        return results

    results = run_with_standby(base_env(), use)
    assert results == {rank: (rank + 10, f"{rank}\n".encode()) for rank in range(3)}


def test_worker_has_its_own_process_group_and_dies_with_the_standby(tmp_path: Path) -> None:
    script = write_script(tmp_path / "long.py", """\
        import time
        print("started", flush=True)
        time.sleep(300)
        """)
    launch = WorkerLaunch(mode="path", target=str(script), args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> dict[str, Any]:
        pid, stdout, _ = await harness.spawn(launch)
        await stdout.until(lambda reader: b"started\n" in reader.data)
        facts: dict[str, Any] = {"pgid": os.getpgid(pid), "sid": os.getsid(pid), "pid": pid,
                                 "own_pgid": os.getpgid(0)}
        standby_pid = harness.standby.pid
        assert standby_pid is not None
        await harness.standby.close(timeout=10)
        facts["alive_after_close"] = harness.standby.alive
        await until_gone(pid)
        facts["standby_gone"] = gone(standby_pid)
        facts["report"] = harness.exits.codes.get(pid)
        return facts

    facts = run_with_standby(base_env(), use)
    assert facts["pgid"] == facts["pid"]
    assert facts["sid"] == facts["pid"]
    assert facts["own_pgid"] != facts["pid"]
    assert facts["alive_after_close"] is False
    assert facts["standby_gone"] is True


def test_a_dead_standby_is_reported_lost(tmp_path: Path) -> None:
    async def use(harness: Harness) -> tuple[list[str], bool, str]:
        pid = harness.standby.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

        async def lost() -> None:
            while not harness.exits.lost:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(lost(), WAIT)
        launch = WorkerLaunch(mode="exec", target="/bin/true", args=(), env=worker_env(),
                              cwd=str(tmp_path))
        with pytest.raises(StandbyError) as caught:
            await harness.spawn(launch)
        return harness.exits.lost, harness.standby.alive, str(caught.value)

    lost, alive, error = run_with_standby(base_env(), use)
    assert lost == ["the standby process exited"]
    assert alive is False
    assert error == "the standby process is not running"


def test_a_refused_spawn_raises_instead_of_hanging(tmp_path: Path) -> None:
    # The standby refuses a request it cannot run ("spawn-failed"); the caller must learn of it.
    launch = WorkerLaunch(mode="bogus", target="x", args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> str:
        with pytest.raises(StandbyError) as caught:
            await asyncio.wait_for(
                harness.standby.spawn(launch, stdout=sys.stdout.fileno(),
                                      stderr=sys.stderr.fileno()), 5)
        return str(caught.value)

    assert "bad mode 'bogus'" in run_with_standby(base_env(), use)


@pytest.mark.parametrize("mode", ["path", "module"])
def test_the_scripts_objects_live_until_the_interpreter_shuts_down(tmp_path: Path,
                                                                   mode: str) -> None:
    """As with ``python script.py``: atexit handlers run first, the script's objects go last.

    Freeing them earlier, while the interpreter still runs, deadlocks a DDP job at exit.
    """
    write_script(tmp_path / "lifetime.py", """\
        import atexit
        import sys

        class Witness:
            def __del__(self):
                sys.stdout.write("freed\\n")

        witness = Witness()
        atexit.register(lambda: sys.stdout.write("atexit\\n"))
        """)
    target = str(tmp_path / "lifetime.py") if mode == "path" else "lifetime"
    launch = WorkerLaunch(mode=mode, target=target, args=(), env=worker_env(),
                          cwd=str(tmp_path))

    async def use(harness: Harness) -> tuple[int, bytes]:
        pid, stdout, _ = await harness.spawn(launch)
        return await harness.exits.wait(pid), await stdout.all()

    returncode, out = run_with_standby(base_env(), use)
    assert returncode == 0
    assert out.decode().splitlines() == ["atexit", "freed"]
