"""Detection latency on one host: from a fault's injection to the host's document showing it and
to the controller's grading and decision, per fault kind (issue 13).

Each kind runs in a real job: ``trainguard run --nproc-per-node 2 --spare-devices 1`` of
tests/e2e/scripts/inprocess_job.py (0.1 s steps), its devices simulated (``sim`` backend, which
pushes its events: subscription). Kinds:

- ``device-separate``: SeparateNPU ``80E3A201`` on rank 1's device (the rank moves to the
  spare; one job per trial, as a device once separated does not come back as a spare);
- ``device-restart``: RestartBusiness ``8C204E00`` on rank 0's device (restarted in place;
  the device recovered after each trial);
- ``device-notice``: NotHandleFault ``80E21007`` (recorded only, then recovered);
- ``process``: ``kill -9`` of rank 1's worker (its pid from the live document
  ``job-ranks-<job>``), which the agent sees die;
- ``network`` (root): a veth link to a gateway in a network namespace, watched with
  ``--training-interfaces IF=0``, taken down with ``ip link set IF down`` (link-down
  ``81078603``; the link state is read every 0.2 s, the gateway probed every 2.5 s); up again
  between trials;
- ``storage`` (root): a tmpfs watched with ``--storage-mounts``, remounted read-only (public
  fault ``110001023`` on every device; probed every 5 s); read-write again between trials;
- ``node``: a power supply alarm (``08000001``, graded SeparateFault) appears in the BMC's log,
  an ``ipmitool`` on PATH that prints it once the trial fails the BMC
  (:mod:`trainguard.testing.fake_bmc`), read every second (``--bmc-period 1``); the node is
  UnHealthy and the one-host job stops (exit code 4), so one job per trial. Its ``decision`` is
  the job's end (``job-finished``, after its dying checkpoint), shown, not held to the target.

Device faults are injected in process (``trainguard.agent.control.inject_device_fault``, the
agent's control socket, as ``trainguard fault inject --device`` does, without its interpreter's
start-up); the time is taken just before the request is sent. Network and storage faults are
timed from just before ``ip``/``mount`` starts (that command's own run, a few ms, is
included). Each trial waits a random pause first (seeded; 0-1 s, storage 0-5 s: its probe
period), so that faults fall at any phase of the periodic detectors.

Measured, from the run's state store (``state.db``, read every ``--poll`` seconds):

- ``document``: the first revision of ``mindx-dl-deviceinfo-<node>`` listing the fault (its
  ``updated`` time; the process kind: ``job-ranks-<job>`` counting it, a document the job
  replaces about once a second);
- ``noticed``: the agent's detector recorded the fault (``device-fault-noticed``);
- ``controller``: the controller graded it (``device-fault-reported``; the process kind:
  ``fault-detected``, its own monotonic ``detected_at``);
- ``decision``: the controller decided (``decision``), where the fault asks for one.

Times are those the store records (wall clock, millisecond resolution); ``polled`` says when
the poll first saw each (an upper bound, ``--poll`` resolution). Targets (worst trial): device
and process faults under 1 s; network within the 2.5 s probe period; storage within its 5 s
probe period; node within 1 s of the BMC read that finds the alarm (2 s from the alarm here).
Memory and disk pressure (95% use of memory or of ``/``) are not measured: filling a shared
machine's memory or root disk is not done.

    python -m benchmarks.detection_latency --trials 5 --output

Why one module past 500 lines: every kind of fault is measured by the same job, the same reading
of the store and the same verdicts; what differs per kind is how the fault is caused (an
injection, a kill, a link taken down, a mount made read-only), a few lines each. Split by kind,
each piece would be those few lines and an import of all the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import common
from trainguard import names
from trainguard.agent import control
from trainguard.faults.device.device_events import Assertion
from trainguard.store import api, sqlite
from trainguard.testing import fake_bmc, gateway_link

__all__ = ["KINDS", "Kind", "Seen", "evaluate", "first_seen", "main", "shows_fault", "stored_epoch"]

NAME = "detection-latency"
REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "e2e" / "scripts" / "inprocess_job.py"
MEASURES = ("document", "noticed", "controller", "decision")
LINK_DOWN = "81078603"
STORAGE = "110001023"
NODE_ALARM = "08000001"  # a power supply failure, graded SeparateFault: the node is UnHealthy
BMC_PERIOD = 1.0


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    code: str | None  # the fault code the events and the document carry
    target_seconds: float
    target: str  # what the target is, in words
    decides: bool  # the controller decides on it (else a decision is not waited for)
    checked: tuple[str, ...] = ("document", "controller", "decision")
    """The measures the target holds for (a decision only where one is asked for)."""
    needs_root: bool = False
    pause: float = 1.0
    """Seconds a trial waits at most, at random, before its fault (the detector's period)."""
    document: str = "mindx-dl-deviceinfo-<node>"


DEVICE_TARGET = "under 1 s (device fault, subscription)"
KINDS = (
    Kind("device-separate", "80E3A201", 1.0, DEVICE_TARGET, True),
    Kind("device-restart", "8C204E00", 1.0, DEVICE_TARGET, True),
    Kind("device-notice", "80E21007", 1.0, DEVICE_TARGET, False),
    # job-ranks-<job> is replaced about once a second: shown, not held to the target
    Kind("process", None, 1.0, "under 1 s (process fault: the agent's detection and the "
         "decision)", True, checked=("controller", "decision"), document="job-ranks-<job>"),
    Kind("network", LINK_DOWN, 2.5, "within the 2.5 s gateway probe period (link state read "
         "every 0.2 s)", False, needs_root=True),
    Kind("storage", STORAGE, 5.0, "within the 5 s storage probe period", False,
         needs_root=True, pause=5.0),
    # A stop, not a decision: the one-host job ends (after its dying checkpoint), shown only.
    Kind("node", NODE_ALARM, 1.0 + BMC_PERIOD, f"within 1 s of the BMC read that finds the "
         f"alarm (read every {BMC_PERIOD:g} s here; 60 s by default)", True,
         checked=("document",), pause=BMC_PERIOD, document="mindx-dl-nodeinfo-<node>"),
)
BY_NAME = {kind.name: kind for kind in KINDS}


@dataclasses.dataclass(frozen=True)
class Seen:
    stored: float  # wall seconds the store records for it
    polled: float  # wall seconds the poll first saw it


def stored_epoch(text: str) -> float:
    """Wall seconds of the store's ISO-8601 UTC time (``2026-11-30T07:02:50.123Z``)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def shows_fault(data: Mapping[str, Any], device: int, code: str) -> bool:
    """Whether the device document lists ``code`` among ``Ascend910-<device>``'s faults."""
    try:
        listed = json.loads(data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
        entries = json.loads(listed.get("huawei.com/Ascend910-Fault") or "[]")
    except (KeyError, TypeError, ValueError):
        return False
    return any(entry.get("npu_name") == f"Ascend910-{device}"
               and code in str(entry.get("fault_code", "")) for entry in entries)


EventMatch = Callable[[api.StoredEvent], bool]


def first_seen(store: api.StateStore, *, after_id: int, events: Mapping[str, EventMatch],
               document: tuple[str, int, Callable[[Mapping[str, Any]], bool]] | None,
               required: Sequence[str], optional_grace: float, timeout: float, poll: float,
               alive: Callable[[], bool] = lambda: True) -> dict[str, Seen]:
    """Poll the store until each of ``required`` is seen (events after ``after_id`` matching
    ``events[name]``; ``document``: name, revision seen before, what must show, as
    ``"document"``); then give the others ``optional_grace`` seconds more.

    Raises:
        TimeoutError: not every required one within ``timeout`` seconds.
        RuntimeError: the job ended first.
    """
    seen: dict[str, Seen] = {}
    start = time.monotonic()
    complete_at: float | None = None
    wanted = set(events) | ({"document"} if document is not None else set())
    while True:
        for event in store.events(after_id=after_id):
            after_id = event.id
            for name, match in events.items():
                if name not in seen and match(event):
                    seen[name] = Seen(stored_epoch(event.time), time.time())
        if document is not None and "document" not in seen:
            name, before, shows = document
            found = store.get_document(name)
            if found is not None and found.revision > before and shows(found.data):
                seen["document"] = Seen(stored_epoch(found.updated), time.time())
        now = time.monotonic()
        if complete_at is None and set(required) <= seen.keys():
            complete_at = now
        if seen.keys() >= wanted or (complete_at is not None
                                     and now - complete_at >= optional_grace):
            return seen
        if now - start > timeout:
            raise TimeoutError(f"within {timeout} s only {sorted(seen)} of {sorted(required)}")
        if not alive():
            raise RuntimeError(f"the job ended; seen only {sorted(seen)}")
        time.sleep(poll)


def _last_event_id(store: sqlite.SqliteStore) -> int:
    found = store.select_events(limit=1)
    return found[-1].id if found else 0


def _revision(store: api.StateStore, name: str) -> int:
    found = store.get_document(name)
    return found.revision if found is not None else 0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _run(*command: str) -> float:
    """Run a command; the wall time just before it started."""
    started = time.time()
    subprocess.run(list(command), check=True, capture_output=True, timeout=30)
    return started


@contextlib.contextmanager
def _tmpfs(directory: Path) -> Iterator[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "trainguard-bench",
                    str(directory)], check=True, capture_output=True, timeout=30)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30,
                       check=False)


def node_name() -> str:
    """The name a job on one host gives its host (its documents' names): the host name in
    lower case, as the launcher takes it (``--node-name`` counts across hosts only)."""
    try:
        return names.node_name(socket.gethostname().lower(), what="host name")
    except names.InvalidNameError:
        return "localhost"


class Job:
    """One ``trainguard run`` of the test job, stepping, its store open for reading."""

    def __init__(self, workdir: Path, name: str, extra: Sequence[str], *, poll: float,
                 env: Mapping[str, str] | None = None) -> None:
        self.run_dir = workdir / "runs" / name
        self.name = name
        self.poll = poll
        self.group = common.ProcessGroup(
            [sys.executable, "-m", "trainguard", "run", "--run-root", str(workdir / "runs"),
             "--rdzv-id", name, "--nproc-per-node", "2",
             "--spare-devices", "1", "--dp-size", "2", "--max-restarts", "100", *extra,
             str(JOB), "--steps", "1000000", "--step-sleep", "0.1"],
            log=workdir / f"{name}.log", cwd=REPO,
            env={"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                             os.environ.get("PYTHONPATH")])),
                 **(env or {})})
        self._store: sqlite.SqliteStore | None = None
        try:
            common.wait_until("the job's store", (self.run_dir / "state.db").exists,
                              timeout=120, process=self.group.process, poll=0.1)
            self._store = sqlite.SqliteStore.open(self.run_dir / "state.db", read_only=True)
            common.wait_until("the job stepping", lambda: self.store.select_events(
                kinds=("snapshot-interval",), limit=1), timeout=120,
                process=self.group.process, poll=0.1)
            common.wait_until("the device document", lambda: self.store.get_document(
                self.device_document), timeout=60, process=self.group.process, poll=0.1)
        except BaseException:
            self.stop()
            raise

    @property
    def store(self) -> sqlite.SqliteStore:
        assert self._store is not None
        return self._store

    @property
    def device_document(self) -> str:
        return f"mindx-dl-deviceinfo-{node_name()}"

    def alive(self) -> bool:
        return self.group.process.poll() is None

    def ranks(self) -> dict[int, dict[str, Any]]:
        found = self.store.get_document(f"job-ranks-{self.name}")
        return {rank["rank"]: rank for rank in (found.data["ranks"] if found else [])}

    def mark(self) -> int:
        return _last_event_id(self.store)

    def wait(self, after_id: int, events: Mapping[str, EventMatch], *,
             document: tuple[str, int, Callable[[Mapping[str, Any]], bool]] | None = None,
             required: Sequence[str], grace: float = 0.0, timeout: float = 30.0
             ) -> dict[str, Seen]:
        try:
            return first_seen(self.store, after_id=after_id, events=events, document=document,
                              required=required, optional_grace=grace, timeout=timeout,
                              poll=self.poll, alive=self.alive)
        except (TimeoutError, RuntimeError):
            tail = self.group.log.read_text(errors="replace").splitlines()[-30:]
            print("\n".join([f"[{NAME}] the job's output, its end:", *tail]), file=sys.stderr)
            raise

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        self.group.stop()


def _noticed(code: str, device: int | None, reason: str) -> EventMatch:
    return lambda e: (e.kind == "device-fault-noticed" and code in str(e.data.get("code"))
                      and (device is None or e.data.get("device") == f"Ascend910-{device}")
                      and e.data.get("reason") == reason)


def _reported(code: str, device: int, assertion: str) -> EventMatch:
    return lambda e: (e.kind == "device-fault-reported" and code in str(e.data.get("code"))
                      and e.data.get("device") == f"{node_name()}/device-{device}"
                      and e.data.get("assertion") == assertion)


def _is(kind: str) -> EventMatch:
    return lambda e: e.kind == kind


def _fault_events(code: str, device: int) -> dict[str, EventMatch]:
    """The agent's notice, the controller's grading and its decision (where none is expected,
    one that comes all the same is seen)."""
    return {"noticed": _noticed(code, device, "Occur"),
            "controller": _reported(code, device, "occur"), "decision": _is("decision")}


def _result(kind: Kind, number: int, start: float, seen: Mapping[str, Seen],
            **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"kind": kind.name, "trial": number}
    for measure in MEASURES:
        result[f"{measure}_seconds"] = (round(seen[measure].stored - start, 4)
                                        if measure in seen else None)
    result["polled"] = {measure: round(found.polled - start, 4)
                        for measure, found in seen.items()}
    return {**result, **extra}


def _device_trial(job: Job, kind: Kind, device: int, number: int
                  ) -> tuple[dict[str, Any], int]:
    """The trial's result, and the last event before it."""
    assert kind.code is not None
    code = kind.code
    before, after_id = _revision(job.store, job.device_document), job.mark()
    start = time.time()
    control.inject_device_fault(job.run_dir, device=device, code=code, assertion=Assertion.OCCUR)
    seen = job.wait(after_id, _fault_events(code, device),
                    document=(job.device_document, before,
                              lambda data: shows_fault(data, device, code)),
                    required=["document", "noticed", "controller",
                              *(["decision"] if kind.decides else [])],
                    grace=0.0 if kind.decides else 1.0)
    strategy = next((e.data["strategy"] for e in job.store.select_events(
        after_id=after_id, kinds=("decision",))), None)
    return _result(kind, number, start, seen, device=device, strategy=strategy), after_id


def _recover_device(job: Job, device: int, code: str, *, since: int | None) -> None:
    """Wait for the job's recovery after the event ``since`` (None: it has none), then clear
    the device's fault."""
    if since is not None:
        job.wait(since, {"recovered": _is("recovery-completed")}, required=["recovered"],
                 timeout=60)
    after_id = job.mark()
    control.inject_device_fault(job.run_dir, device=device, code=code,
                                assertion=Assertion.RECOVER)
    job.wait(after_id, {"cleared": _reported(code, device, "recover")}, required=["cleared"])


def _pause(kind: Kind, rng: random.Random) -> None:
    """A random pause before a fault, as long as the kind's detector's period at most: a fault
    falls at any moment of it, also after a recovery that a probe saw."""
    time.sleep(rng.uniform(0.0, kind.pause))


def _trials_device(kind: Kind, workdir: Path, *, trials: int, rng: random.Random,
                   poll: float) -> list[dict[str, Any]]:
    assert kind.code is not None
    results = []
    if kind.name == "device-separate":  # a separated device is not a spare again: a job each
        for number in range(trials):
            job = Job(workdir, f"separate-{number}", [], poll=poll)
            try:
                _pause(kind, rng)
                results.append(_device_trial(job, kind, job.ranks()[1]["device"], number)[0])
            finally:
                job.stop()
            _print(results[-1])
        return results
    job = Job(workdir, kind.name, [], poll=poll)
    try:
        for number in range(trials):
            _pause(kind, rng)
            device = job.ranks()[0]["device"]
            result, since = _device_trial(job, kind, device, number)
            results.append(result)
            _print(result)
            _recover_device(job, device, kind.code, since=since if kind.decides else None)
    finally:
        job.stop()
    return results


def _counts_more(faults: int) -> Callable[[Mapping[str, Any]], bool]:
    """Whether the live document counts more faults than ``faults``."""
    return lambda data: int(data.get("faults", 0)) > faults


def _new_process(job: Job, *, rank: int, killed: set[int]) -> int:
    """The rank's process, once the live document names one not killed (it is replaced about
    once a second: after a recovery it names the new process late)."""
    def found() -> int | None:
        pid = job.ranks()[rank]["pid"]
        return pid if pid is not None and pid not in killed else None

    pid: int = common.wait_until(f"rank {rank}'s process", found, timeout=30,
                                 process=job.group.process, poll=0.1)
    return pid


def _trials_process(kind: Kind, workdir: Path, *, trials: int, rng: random.Random,
                    poll: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    job = Job(workdir, "process", [], poll=poll)
    try:
        for number in range(trials):
            _pause(kind, rng)
            pid = _new_process(job, rank=1, killed={result["pid"] for result in results})
            name = f"job-ranks-{job.name}"
            found = job.store.get_document(name)
            faults = int(found.data["faults"]) if found is not None else 0
            before, after_id = _revision(job.store, name), job.mark()
            start, start_mono = time.time(), time.monotonic()
            os.kill(pid, signal.SIGKILL)
            seen = job.wait(after_id, {"controller": _is("fault-detected"),
                                       "decision": _is("decision")},
                            document=(name, before, _counts_more(faults)),
                            required=["document", "controller", "decision"])
            detected = job.store.select_events(after_id=after_id, kinds=("fault-detected",))
            strategy = next((e.data["strategy"] for e in job.store.select_events(
                after_id=after_id, kinds=("decision",))), None)
            result = _result(kind, number, start, seen, pid=pid, strategy=strategy)
            if detected:  # the agent's own monotonic time, finer than the store's
                result["controller_seconds"] = round(
                    float(detected[0].data["detected_at"]) - start_mono, 4)
            results.append(result)
            _print(result)
            job.wait(after_id, {"recovered": _is("recovery-completed")},
                     required=["recovered"], timeout=60)
    finally:
        job.stop()
    return results


def _command_trials(job: Job, kind: Kind, *, trials: int, rng: random.Random,
                    fault: Sequence[str], heal: Sequence[str], **extra: Any
                    ) -> list[dict[str, Any]]:
    """Trials of a fault a command causes (on device 0, among others) and another clears: each
    timed from just before ``fault`` starts, then healed and its recovery waited for."""
    assert kind.code is not None
    code, results = kind.code, []
    for number in range(trials):
        _pause(kind, rng)
        before, after_id = _revision(job.store, job.device_document), job.mark()
        start = _run(*fault)
        seen = job.wait(after_id, _fault_events(code, 0),
                        document=(job.device_document, before,
                                  lambda data: shows_fault(data, 0, code)),
                        required=["document", "noticed", "controller"], grace=1.0)
        results.append(_result(kind, number, start, seen, **extra))
        _print(results[-1])
        after_id = job.mark()
        _run(*heal)
        job.wait(after_id, {"healed": _noticed(code, 0, "Recovery")}, required=["healed"])
    return results


def _trials_network(kind: Kind, workdir: Path, *, trials: int, rng: random.Random,
                    poll: float) -> list[dict[str, Any]]:
    with gateway_link.gateway_link("bench", subnet=215) as link:
        interface = link.ours
        job = Job(workdir, "network", ["--training-interfaces", f"{interface}=0"], poll=poll)
        try:
            time.sleep(3.0)  # a gateway probe has run
            if job.store.select_events(kinds=("device-fault-noticed",)):
                raise RuntimeError("the link is faulty before any fault: "
                                   f"{job.store.get_document(f'detectors-{node_name()}')}")
            return _command_trials(job, kind, trials=trials, rng=rng,
                                   fault=("ip", "link", "set", interface, "down"),
                                   heal=("ip", "link", "set", interface, "up"),
                                   interface=interface)
        finally:
            job.stop()


def _trials_storage(kind: Kind, workdir: Path, *, trials: int, rng: random.Random,
                    poll: float) -> list[dict[str, Any]]:
    with _tmpfs(workdir / "storage") as mount:
        job = Job(workdir, "storage", ["--storage-mounts", str(mount)], poll=poll)
        try:
            return _command_trials(job, kind, trials=trials, rng=rng,
                                   fault=("mount", "-o", "remount,ro", str(mount)),
                                   heal=("mount", "-o", "remount,rw", str(mount)),
                                   mount=str(mount))
        finally:
            job.stop()


def node_unhealthy(data: Mapping[str, Any]) -> bool:
    """Whether the node document (as the agent publishes it: ``NodeInfo`` and ``CheckCode``)
    says UnHealthy."""
    info = data.get("NodeInfo")
    return isinstance(info, dict) and info.get("NodeStatus") == "UnHealthy"


def _trials_node(kind: Kind, workdir: Path, *, trials: int, rng: random.Random,
                 poll: float) -> list[dict[str, Any]]:
    """A job per trial: an UnHealthy node stops a one-host job (exit code 4)."""
    results: list[dict[str, Any]] = []
    for number in range(trials):
        bmc = fake_bmc.FakeBmc(Path(tempfile.mkdtemp(dir=workdir)), failed=False)
        job = Job(workdir, f"node-{number}", ["--fault-config-dir", str(bmc.config),
                                              "--bmc-period", f"{BMC_PERIOD:g}"],
                  poll=poll, env={"PATH": bmc.path})
        try:
            name = f"mindx-dl-nodeinfo-{node_name()}"
            common.wait_until("the node document", functools.partial(
                job.store.get_document, name), timeout=30, process=job.group.process, poll=0.1)
            _pause(kind, rng)
            before, after_id = _revision(job.store, name), job.mark()
            start = time.time()
            bmc.fail()
            seen = job.wait(after_id, {"decision": _is("job-finished")},
                            document=(name, before, node_unhealthy),
                            required=["document", "decision"])
            results.append(_result(kind, number, start, seen))
            _print(results[-1])
        finally:
            job.stop()
    return results


TRIALS = {"device-separate": _trials_device, "device-restart": _trials_device,
          "device-notice": _trials_device, "process": _trials_process,
          "network": _trials_network, "storage": _trials_storage, "node": _trials_node}


def _print(result: Mapping[str, Any]) -> None:
    print(json.dumps(result), file=sys.stderr, flush=True)


def evaluate(kind: Kind, trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The kind's medians and worst per measure, and whether its target holds: the worst trial
    of each of the kind's checked measures that was seen (a measure seen in only some trials:
    None, not measured) within it."""
    summary: dict[str, Any] = {"trials": len(trials), "target_seconds": kind.target_seconds,
                               "target": kind.target, "document": kind.document,
                               "checked": [measure for measure in kind.checked
                                           if measure != "decision" or kind.decides]}
    checked = []
    for measure in MEASURES:
        values = [t[f"{measure}_seconds"] for t in trials]
        present = [v for v in values if v is not None]
        summary[f"median_{measure}_seconds"] = (round(statistics.median(present), 4)
                                                if present else None)
        summary[f"worst_{measure}_seconds"] = (None if not present or None in values
                                               else max(present))
        if present and measure in kind.checked and (measure != "decision" or kind.decides):
            checked.append(summary[f"worst_{measure}_seconds"])
    summary["met"] = (None if not trials or not checked or None in checked
                      else all(value <= kind.target_seconds for value in checked))
    return summary


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    kinds = [BY_NAME[name] for name in args.kinds]
    rng = random.Random(args.seed)
    trials: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trainguard-detect-") as root:
        for kind in kinds:
            if kind.needs_root and os.geteuid() != 0:
                summary[kind.name] = {"met": None, "why": "needs root"}
                continue
            found = TRIALS[kind.name](kind, Path(root), trials=args.trials, rng=rng,
                                      poll=args.poll)
            trials += found
            summary[kind.name] = evaluate(kind, found)
            verdict = {True: "met", False: "NOT MET", None: "not measured"}[
                summary[kind.name]["met"]]
            print(f"[{NAME}] {kind.name}: target {kind.target}: {verdict}", file=sys.stderr,
                  flush=True)
    return {
        **common.header(NAME, argv),
        "setup": "one host, trainguard run --nproc-per-node 2 --spare-devices 1 --dp-size 2 of "
                 "tests/e2e/scripts/inprocess_job.py --step-sleep 0.1, sim device backend "
                 "(subscription); device faults injected in process through the agent's "
                 "control socket; network: a veth link taken down with ip link; storage: a "
                 "tmpfs remounted read-only; node: a power supply alarm from an ipmitool on "
                 "PATH (a script printing the BMC's SEL record), --bmc-period 1, the job "
                 "stopping as its decision; times from the state store",
        "resolution": {"store_timestamps_seconds": 0.001, "poll_seconds": args.poll},
        "not_measured": {"node memory and disk": "95% use of memory or of / is no fault to "
                                                "cause safely on a shared machine"},
        "kinds": summary, "trials": trials,
    }


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--trials", type=int, default=5, help="trials per kind")
    result.add_argument("--kinds", nargs="+", choices=list(BY_NAME), default=list(BY_NAME))
    result.add_argument("--poll", type=float, default=0.02,
                        help="seconds between two reads of the store")
    result.add_argument("--seed", type=int, default=1)
    common.add_output_argument(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(arguments)
    if args.trials < 1 or args.poll <= 0:
        raise SystemExit("--trials >= 1, --poll > 0")
    common.exit_cleanly_on_sigterm()
    common.publish(NAME, run(args, arguments), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
