"""The detection-latency benchmark's reading of the store, its verdicts and its summary section
(the measurement itself starts real jobs, 11 s for its smallest run: ``python -m
benchmarks.detection_latency --kinds device-notice --trials 1``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common, detection_latency, summary
from trainguard.faults.node import node_faults
from trainguard.store import sqlite

START = "2026-12-02T18:25:56.000Z"


def _document(device: int, code: str | None) -> dict[str, str]:
    """A device document as the agent writes it (fields that matter here)."""
    faults = [] if code is None else [{"npu_name": f"Ascend910-{device}", "fault_code": code,
                                       "fault_level": "SeparateNPU"}]
    listed = {"huawei.com/Ascend910": "Ascend910-0", "huawei.com/Ascend910-Fault":
              json.dumps(faults)}
    return {"DeviceInfoCfg": json.dumps({"DeviceInfo": {"DeviceList": listed,
                                                        "UpdateTime": 1}}),
            "ManuallySeparateNPU": ""}


@pytest.fixture
def store(tmp_path: Path) -> sqlite.SqliteStore:
    return sqlite.SqliteStore.open(tmp_path / "state.db")


def test_the_first_matching_event_and_document_revision_count_with_the_stores_times(
        store: sqlite.SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detection_latency, "node_name", lambda: "host")
    store.append_event("device-fault-noticed", {"code": "80E3A201", "device": "Ascend910-1",
                                                "reason": "Occur"}, time=START)  # before
    store.put_document("doc", _document(1, "80E3A201"), time=START)  # revision 1: before
    after_id = store.append_event("step-progress", {}, time=START)
    store.append_event("device-fault-noticed", {"code": "80E3A201", "device": "Ascend910-0",
                                                "reason": "Occur"},
                       time="2026-12-02T18:25:56.001Z")  # another device
    store.append_event("device-fault-noticed", {"code": "80E3A201", "device": "Ascend910-1",
                                                "reason": "Occur"},
                       time="2026-12-02T18:25:56.012Z")
    store.append_event("device-fault-reported", {"code": "80E3A201", "device": "host/device-1",
                                                 "assertion": "occur"},
                       time="2026-12-02T18:25:56.015Z")
    store.append_event("decision", {"strategy": "recover"}, time="2026-12-02T18:25:56.020Z")
    store.append_event("decision", {"strategy": "recover"}, time="2026-12-02T18:25:57.000Z")
    store.put_document("doc", _document(1, "80E3A201"), time="2026-12-02T18:25:56.014Z")

    seen = detection_latency.first_seen(
        store, after_id=after_id, events=detection_latency._fault_events("80E3A201", 1),
        document=("doc", 1, lambda data: detection_latency.shows_fault(data, 1, "80E3A201")),
        required=["document", "noticed", "controller", "decision"], optional_grace=0.0,
        timeout=5.0, poll=0.01)

    start = detection_latency.stored_epoch(START)
    assert {name: round(found.stored - start, 3) for name, found in seen.items()} == {
        "noticed": 0.012, "controller": 0.015, "decision": 0.02, "document": 0.014}
    result = detection_latency._result(detection_latency.BY_NAME["device-separate"], 0, start,
                                       seen)
    assert result["document_seconds"] == pytest.approx(0.014, abs=1e-4)
    assert set(result["polled"]) == {"noticed", "controller", "decision", "document"}


def test_a_document_not_showing_the_fault_is_not_seen_and_a_missing_one_times_out(
        store: sqlite.SqliteStore) -> None:
    store.put_document("doc", _document(0, None), time=START)
    store.put_document("doc", _document(0, "8C204E00"), time=START)  # another code
    with pytest.raises(TimeoutError, match="only"):
        detection_latency.first_seen(
            store, after_id=0, events={},
            document=("doc", 0, lambda data: detection_latency.shows_fault(data, 0, "80E3A201")),
            required=["document"], optional_grace=0.0, timeout=0.1, poll=0.01)
    # an optional one (a decision where none is asked for) is given the grace only
    store.append_event("device-fault-noticed", {"code": "80E21007", "device": "Ascend910-0",
                                                "reason": "Occur"}, time=START)
    seen = detection_latency.first_seen(
        store, after_id=0, events=detection_latency._fault_events("80E21007", 0),
        document=None, required=["noticed"], optional_grace=0.05, timeout=5.0, poll=0.01)
    assert set(seen) == {"noticed"}


def test_the_node_document_is_read_as_the_agent_publishes_it() -> None:
    power = node_faults.NodeFaultDevice("Power Supply", 81, ("08000001",))
    table = node_faults.NodeCodeTable({"08000001": node_faults.NodeFaultLevel.SEPARATE_FAULT})
    assert detection_latency.node_unhealthy(node_faults.node_info([power], table=table).to_data())
    assert not detection_latency.node_unhealthy(node_faults.node_info([], table=table).to_data())


def test_targets_hold_for_the_worst_trial_of_the_checked_measures() -> None:
    device = detection_latency.BY_NAME["device-restart"]

    def trial(document: float, decision: float | None) -> dict[str, float | None]:
        return {"document_seconds": document, "noticed_seconds": 0.001,
                "controller_seconds": 0.002, "decision_seconds": decision}

    met = detection_latency.evaluate(device, [trial(0.01, 0.02), trial(0.9, 0.03)])
    assert (met["met"], met["median_document_seconds"], met["worst_document_seconds"]) == (
        True, 0.455, 0.9)
    assert detection_latency.evaluate(device, [trial(0.01, 1.2)])["met"] is False
    # a decision missing in a trial of a kind that asks for one: not measured
    assert detection_latency.evaluate(device, [trial(0.01, None), trial(0.01, 0.1)])[
        "met"] is None
    # the process kind's document (replaced once a second) is shown, not held to 1 s
    process = detection_latency.BY_NAME["process"]
    assert detection_latency.evaluate(process, [trial(1.4, 0.05)])["met"] is True
    # a decision that came for a kind that asks for none is not held to its target
    notice = detection_latency.BY_NAME["device-notice"]
    assert detection_latency.evaluate(notice, [trial(0.01, 3.0)])["met"] is True


def test_the_summary_shows_each_kind_with_its_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    kinds = {"device-separate": detection_latency.evaluate(
        detection_latency.BY_NAME["device-separate"],
        [{"document_seconds": 0.003, "noticed_seconds": 0.001, "controller_seconds": 0.003,
          "decision_seconds": 1.2}]),
        "storage": {"met": None, "why": "needs root"}}
    result = {**common.header("detection-latency", ["--trials", "1"]), "setup": "one host",
              "resolution": {"store_timestamps_seconds": 0.001, "poll_seconds": 0.02},
              "not_measured": {"node": "no BMC"}, "kinds": kinds, "trials": []}
    (tmp_path / "detection-latency.json").write_text(json.dumps(result))
    lines: list[str] = []
    summary._detection(lines)
    text = "\n".join(lines)
    assert "`python -m benchmarks.detection_latency --trials 1`" in text
    assert "the store read every 20 ms" in text
    assert "| device-separate | 1 | mindx-dl-deviceinfo-<node> | 3.0 ms (3.0 ms) | 1.0 ms " \
           "(1.0 ms) | 3.0 ms (3.0 ms) | 1.20 s (1.20 s) | under 1 s (device fault, " \
           "subscription) |" in text
    assert "- device-separate, under 1 s (device fault, subscription), for the document, " \
           "grading, decision: **not met**" in text
    assert "- storage: not measured (needs root)" in text
    assert "- node: not measured (no BMC)" in text
