"""End to end: only the job's own user (and root) may act on its agent or read its files.

The attacks run for real as a second local user (created here, so these tests need root). That
user runs the system's ``python3``: the job's interpreter may live where it cannot enter.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import unavailable
from tests.e2e.jobs import SCRIPTS, Job
from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

pytestmark = pytest.mark.e2e

SESSION_JOB = str(SCRIPTS / "session_job.py")
OTHER_USER = "trainguard-other"
OTHER_PYTHON = "/usr/bin/python3"

# As the other user, with the system's python (no trainguard): send the agent at argv[1] the
# messages framed in hex in argv[2] (ask to crash rank 1), then those in argv[3] (say hello as
# rank 1, its pid read from ps, without its secret, and ask the job to stop). Prints in hex
# what came back to each.
ATTACK = """
import json, socket, sys

def talk(data):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(5)
        connection.connect("\\0" + sys.argv[1][1:])
        try:
            connection.sendall(bytes.fromhex(data))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed before the rest was sent: what was answered counts
        try:
            return connection.makefile("rb").read().hex()
        except TimeoutError:
            return "no answer: the connection stayed open"
        except ConnectionResetError:
            return ""

print(json.dumps({"inject": talk(sys.argv[2]), "hello": talk(sys.argv[3])}))
"""


def frames(*items: messages.Message) -> str:
    """The messages as the agent reads them, in hex for a command line."""
    return b"".join(versioned.frame(worker_codec.encode(item)) for item in items).hex()


def replies(answer: str) -> list[messages.Message]:
    stream = io.BytesIO(bytes.fromhex(answer))
    return [worker_codec.decode(data) for data in iter(lambda: versioned.read_frame(stream), None)]


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    """A second local user, created for these tests unless it exists."""
    if os.geteuid() != 0:
        unavailable("needs root: the attacks run as a second local user created for them")
    for tool in ("useradd", "userdel", "runuser", OTHER_PYTHON):
        if shutil.which(tool) is None:
            unavailable(f"needs {tool} to run the attacks as a second local user")
    created = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", OTHER_USER], check=True,
                       timeout=60)
        created = True
    yield OTHER_USER
    if created:
        subprocess.run(["userdel", OTHER_USER], check=False, timeout=60)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every user may enter: pytest's own temporary directory is 0700, which would
    hide the job from the other user whatever trainguard does."""
    root = Path(tempfile.mkdtemp(prefix="trainguard-access-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def as_other(user: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", OTHER_PYTHON, "-c", code, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def start(root: Path, *args: str, run_id: str) -> Job:
    return Job([*args], run_root=root / "runs", run_id=run_id, cwd=root)


def worker_of_rank(job: Job, rank: int) -> int | None:
    """The pid of ``rank``'s worker once it has taken a snapshot (it maps the rank's slot), as
    another user reads it from ``ps``."""
    try:
        workers = psutil.Process(job.children()["standby"]).children()
    except (KeyError, psutil.Error):
        return None  # not started yet
    for worker in workers:
        try:
            if f"trainguard-rank{rank}-slot" in Path(f"/proc/{worker.pid}/maps").read_text():
                return worker.pid
        except OSError:
            continue
    return None


def not_owner_only(run_dir: Path) -> list[str]:
    """Every directory under ``run_dir`` (itself included) not 0700 and file not 0600."""
    found = []
    for path in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            found.append(f"{path.relative_to(run_dir)} {mode:o}")
    return found


def test_run_files_are_owner_only_and_another_user_cannot_read_a_checkpoint(
        other_user: str, open_root: Path) -> None:
    job = start(open_root, "--nproc-per-node", "2", "-r", "3", "--persist-interval", "0",
                SESSION_JOB, "--steps", "12", "--step-sleep", "0.05", run_id="modes")
    try:
        agent_file = job.wait_for("agent.json", lambda: (
            path := job.run_dir / "agent.json").exists() and path)
        running = as_other(other_user, "import sys; open(sys.argv[1]).read()", str(agent_file))
        assert job.wait() == 0, job.output()
    finally:
        job.kill()
    assert "PermissionError" in running.stderr, "another user read the agent's address"
    assert not_owner_only(job.run_dir) == []
    shard = next(job.run_dir.glob("checkpoints/step-*/rank-*.tgsnap"))
    for path in (shard, job.run_dir / "state.db"):
        read = as_other(other_user, "import sys; open(sys.argv[1], 'rb').read(1)", str(path))
        assert "PermissionError" in read.stderr, f"another user read {path}: {read.stderr}"


def test_another_user_can_neither_inject_a_fault_nor_forge_a_hello(
        other_user: str, open_root: Path) -> None:
    steps = 150
    job = start(open_root, "--nproc-per-node", "2", "-r", "3", SESSION_JOB, "--steps",
                str(steps), "--step-sleep", "0.05", run_id="attacked")
    try:
        agent_file = job.wait_for("agent.json", lambda: (
            path := job.run_dir / "agent.json").exists() and path)
        address = json.loads(agent_file.read_text())["address"]
        worker = job.wait_for("rank 1's worker", lambda: worker_of_rank(job, 1))
        inject = frames(messages.InjectRequest(request_id=1, rank=1,
                                               kind=messages.InjectionKind.CRASH, at_step=None))
        hello = frames(messages.Hello(rank=1, local_rank=1, pid=worker, generation=0),
                       messages.StopRequested(time=0.0))
        attack = as_other(other_user, ATTACK, address, inject, hello)
        assert attack.returncode == 0, attack.stderr
        answers = json.loads(attack.stdout)
        assert job.wait() == 0, job.output()
    finally:
        job.kill()
    own = os.geteuid()
    assert replies(answers["inject"]) == [messages.ControlReply(
        request_id=1, ok=False,
        detail=f"the agent refused: uid {pwd.getpwnam(other_user).pw_uid} is neither the "
               f"job's user (uid {own}) nor root")]
    assert answers["hello"] == "", "the forged hello was not refused"
    assert job.events("fault-injection") == job.events("fault-detected") == []
    assert len(job.events("generation-started")) == 1
    finished = job.events("job-finished")[-1]
    assert finished["outcome"] == "succeeded", finished
    assert "refused a connection from pid" in job.output()


def test_a_hello_without_the_workers_secret_is_refused(tmp_path: Path) -> None:
    """Even from the worker's own process and user: only its secret makes a hello count. The
    secret is in no process's command line, and in no log."""
    secret_file = tmp_path / "secret"
    job = Job(["--nproc-per-node", "1", "-r", "3", str(SCRIPTS / "forged_hello_job.py"),
               str(secret_file)], run_root=tmp_path / "runs", run_id="forged", cwd=tmp_path)
    try:
        assert job.wait() == 0, job.output()
    finally:
        job.kill()
    stdout = (job.run_dir / "logs" / "forged" / "attempt_0" / "0" / "stdout.log").read_text()
    assert "wrong secret kept open: False" in stdout, stdout
    assert "own secret kept open: True" in stdout, stdout
    assert "secret in a command line: False" in stdout, stdout
    secret = secret_file.read_text()
    assert len(secret) >= 32
    logs = [job.output(), *(path.read_text() for path in job.run_dir.rglob("*.log"))]
    assert all(secret not in text for text in logs), "the secret was logged"
