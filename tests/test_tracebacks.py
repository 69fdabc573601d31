"""Worker tracebacks: trainguard's and runpy's frames left out, each distinct one printed once."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from trainguard import tracebacks

SCRIPT = """
def load(batch):
    raise ValueError(f"bad batch shape {batch}")

load(BATCH)
"""


def _run_script(tmp_path: Path, batch: int) -> tuple[type[BaseException], BaseException]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    try:
        runpy.run_path(str(script), init_globals={"BATCH": batch}, run_name="__main__")
    except ValueError as error:
        return type(error), error
    raise AssertionError("not raised")


def test_runpys_frames_are_left_out(tmp_path: Path) -> None:
    kind, error = _run_script(tmp_path, 3)
    text = tracebacks.format_exception(kind, error, error.__traceback__)
    assert "<frozen runpy>" not in text
    assert "runpy.py" not in text
    assert text.splitlines()[3:] == [
        f'  File "{tmp_path / "train.py"}", line 5, in <module>',
        "    load(BATCH)",
        f'  File "{tmp_path / "train.py"}", line 3, in load',
        '    raise ValueError(f"bad batch shape {batch}")',
        "ValueError: bad batch shape 3",
    ]
    assert "in _run_script" in text.splitlines()[1], "the caller's frame is the user's"


def test_each_distinct_traceback_is_printed_once(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    hook = tracebacks.install(str(tmp_path / "seen"))
    try:
        for batch in (3, 4):  # the same place, another message: the same failure
            kind, error = _run_script(tmp_path, batch)
            hook(kind, error, error.__traceback__)
        other = KeyError("x")
        hook(KeyError, other, None)
    finally:
        sys.excepthook = sys.__excepthook__
    printed = capsys.readouterr().err
    assert printed.count("Traceback (most recent call last)") == 1
    _, second = printed.split("ValueError: bad batch shape 3\n")
    (saved,) = [path for path in (tmp_path / "seen").glob("*.txt")
                if "ValueError" in path.read_text()]
    assert second.startswith("ValueError: bad batch shape 4\n(the same traceback as printed "
                             f"before; saved in {saved})\n")
    assert second.endswith("KeyError: 'x'\n"), "another failure is printed in full"
    assert len(list((tmp_path / "seen").glob("*.txt"))) == 2
