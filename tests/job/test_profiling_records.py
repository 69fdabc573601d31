"""The profiling record format, written and read back in one place."""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.job import profiling_records


def test_a_written_record_is_the_originals_json_and_reads_back() -> None:
    line = profiling_records.marker(profiling_records.START, 7, 'step "3"', "default",
                                    timestamp=12, process=100, thread=101)
    assert json.loads(line) == {
        "Kind": 1, "Flag": 2, "SourceKind": 0, "Timestamp": 12, "Id": 7,
        "MsptiObjectId": {"Pt": {"ProcessId": 100, "ThreadId": 101}}, "Name": 'step "3"',
        "Domain": "default"}
    assert profiling_records.parse(line.encode()) == profiling_records.Mark(2, 7, 12, 'step "3"')


def test_what_is_no_whole_marker_record_is_passed_over() -> None:
    assert profiling_records.parse(b'{"Kind": 1, "Flag": 2') is None
    assert profiling_records.parse(b'{"Kind": 2, "Flag": 2, "Id": 1, "Timestamp": 1, '
                                   b'"Name": ""}') is None
    assert profiling_records.parse(b"[1]") is None


def test_step_names() -> None:
    assert profiling_records.step_of(profiling_records.step_name(17)) == 17
    assert [profiling_records.step_of(name) for name in ("stepper", "step x", "forward")] == [
        None, None, None]


def test_a_ranks_files_by_the_second_they_started(tmp_path: Path) -> None:
    for name in ("10", "9", "parallel_group.json"):
        (tmp_path / name).write_text("")
    assert [path.name for path in profiling_records.files(tmp_path)] == ["9", "10"]
    assert profiling_records.files(tmp_path / "absent") == []
