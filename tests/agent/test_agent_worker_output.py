"""Where workers' stdout and stderr go: torchrun's --redirects/--tee, prefixes, the kept tail."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from trainguard.agent import worker_output
from trainguard.agent.worker_output import OutputSettings, Std, StreamPump, parse_std


@pytest.mark.parametrize(("value", "expected"), [
    ("0", Std.NONE),
    ("1", Std.OUT),
    ("2", Std.ERR),
    ("3", Std.ALL),
    (" 3 ", Std.ALL),
    ("0:1,1:2", {0: Std.OUT, 1: Std.ERR}),
    ("3:3", {3: Std.ALL}),
    ("0:0, 1:3", {0: Std.NONE, 1: Std.ALL}),
])
def test_parse_std_accepts(value: str, expected: dict[int, Std] | Std) -> None:
    assert parse_std(value, flag="--redirects") == expected


@pytest.mark.parametrize(("value", "message"), [
    ("x", "--redirects: 'x' is not one of 0 (none), 1 (stdout), 2 (stderr), 3 (both)"),
    ("", "--redirects: '' is not one of 0 (none)"),
    ("1.5", "--redirects: '1.5' is not one of"),
    ("0:x", "--redirects: bad entry '0:x' (--redirects: 'x' is not one of"),
    ("a:1", "--redirects: bad entry 'a:1' (invalid literal"),
    ("0:1,1", "--redirects: bad entry '1' ("),
])
def test_parse_std_rejects(value: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:  # noqa: PT011 - the message is checked below
        parse_std(value, flag="--redirects")
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("value", ["4", "7", "-1", "0:4"])
def test_parse_std_rejects_values_outside_0_to_3(value: str) -> None:
    # torchrun accepts only 0-3; Std is an IntFlag, which builds any integer without complaint.
    with pytest.raises(ValueError, match=r"--tee: .*is not one of 0 \(none\)"):
        parse_std(value, flag="--tee")


def test_pump_prefixes_lines_and_writes_the_raw_stream_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "run" / "attempt_0" / "1" / "stdout.log"

    async def scenario() -> tuple[bytes, bool]:
        console = io.BytesIO()
        pump = StreamPump(console=console, log_file=log, prefix="[1]: ")
        pump.data_received(b"hello\nwor")
        pump.data_received(b"ld\n")
        pump.data_received(b"\nlast without newline")
        before_close = console.getvalue()
        assert before_close == b"[1]: hello\n[1]: world\n[1]: \n"
        pump.connection_lost(None)
        return console.getvalue(), pump.closed.done()

    shown, closed = asyncio.run(scenario())
    assert shown == b"[1]: hello\n[1]: world\n[1]: \n[1]: last without newline\n"
    assert closed
    assert log.read_bytes() == b"hello\nworld\n\nlast without newline"


def test_pump_without_prefix_forwards_bytes_as_they_come(tmp_path: Path) -> None:
    async def scenario() -> bytes:
        console = io.BytesIO()
        pump = StreamPump(console=console, log_file=None, prefix="")
        pump.data_received(b"par")
        assert console.getvalue() == b"par"
        pump.data_received(b"tial\n")
        pump.connection_lost(None)
        return console.getvalue()

    assert asyncio.run(scenario()) == b"partial\n"


def test_pump_appends_to_an_existing_log(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_bytes(b"earlier\n")

    async def scenario() -> None:
        pump = StreamPump(console=None, log_file=log, prefix="x ")
        pump.data_received(b"later\n")
        pump.connection_lost(None)

    asyncio.run(scenario())
    assert log.read_bytes() == b"earlier\nlater\n"


def test_tail_keeps_the_end(tmp_path: Path) -> None:
    async def scenario() -> StreamPump:
        pump = StreamPump(console=None, log_file=None, prefix="")
        for number in range(3000):  # about 50 KiB, more than is kept
            pump.data_received(f"line {number:05d} of the worker's stderr\n".encode())
        pump.connection_lost(None)
        return pump

    pump = asyncio.run(scenario())
    assert pump.tail(lines=3) == "\n".join(
        f"line {number:05d} of the worker's stderr" for number in (2997, 2998, 2999))
    assert pump.tail().splitlines()[0] == "line 02980 of the worker's stderr"
    everything = pump.tail(lines=100_000)
    assert "line 00000" not in everything
    assert 16 * 1024 <= len(everything) <= 17 * 1024


def test_tail_of_a_short_stream(tmp_path: Path) -> None:
    async def scenario() -> str:
        pump = StreamPump(console=None, log_file=None, prefix="")
        pump.data_received(b"Traceback\n  File x\nValueError: bad\n")
        return pump.tail(lines=2)

    assert asyncio.run(scenario()) == "  File x\nValueError: bad"


def make_pump(settings: OutputSettings, stream: Std = Std.OUT) -> StreamPump:
    return StreamPump.for_worker(settings, stream=stream, rank=3, local_rank=1, role="trainer",
                                 run_id="run-7", generation=2)


def test_for_worker_prefix_template(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    settings = OutputSettings(line_prefix_template="[$role_name$rank/$local_rank $unknown] ")

    async def scenario() -> None:
        pump = make_pump(settings)
        pump.data_received(b"a\nb\n")
        pump.connection_lost(None)

    asyncio.run(scenario())
    assert capsysbinary.readouterr().out == (
        b"[trainer3/1 $unknown] a\n[trainer3/1 $unknown] b\n")


def test_for_worker_redirect_goes_only_to_the_log(
        tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    settings = OutputSettings(redirects={1: Std.ERR}, log_dir=tmp_path)

    async def scenario() -> None:
        for stream, text in ((Std.OUT, b"out\n"), (Std.ERR, b"err\n")):
            pump = make_pump(settings, stream)
            pump.data_received(text)
            pump.connection_lost(None)

    asyncio.run(scenario())
    captured = capsysbinary.readouterr()
    assert captured.out == b"out\n"
    assert captured.err == b""
    base = tmp_path / "run-7" / "attempt_2" / "1"
    assert (base / "stderr.log").read_bytes() == b"err\n"
    assert not (base / "stdout.log").exists()


def test_for_worker_tee_goes_to_both(
        tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    settings = OutputSettings(tee=Std.ALL, log_dir=tmp_path)

    async def scenario() -> None:
        pump = make_pump(settings, Std.ERR)
        pump.data_received(b"both\n")
        pump.connection_lost(None)

    asyncio.run(scenario())
    # torchrun's header on the console ([<role><local_rank>]:), the raw stream in the file
    assert capsysbinary.readouterr().err == b"[trainer1]:both\n"
    assert (tmp_path / "run-7" / "attempt_2" / "1" / "stderr.log").read_bytes() == b"both\n"


def test_for_worker_tee_prefix_template_wins(
        tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    settings = OutputSettings(tee=Std.OUT, log_dir=tmp_path, line_prefix_template="[$rank] ")

    async def scenario() -> None:
        pump = make_pump(settings, Std.OUT)
        pump.data_received(b"x\n")
        pump.connection_lost(None)

    asyncio.run(scenario())
    assert capsysbinary.readouterr().out == b"[3] x\n"


def test_for_worker_filtered_rank_is_not_shown(
        tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    settings = OutputSettings(local_ranks_filter=frozenset({0}))

    async def scenario() -> str:
        pump = make_pump(settings)
        pump.data_received(b"hidden\n")
        pump.connection_lost(None)
        return pump.tail()

    assert asyncio.run(scenario()) == "hidden"
    assert capsysbinary.readouterr().out == b""


def test_open_pump_forwards_a_pipe_until_it_closes() -> None:
    async def scenario() -> bytes:
        console = io.BytesIO()
        pump = StreamPump(console=console, log_file=None, prefix="> ")
        write_end = await worker_output.open_pump(pump)
        os.write(write_end, b"one\ntwo")
        os.close(write_end)
        await asyncio.wait_for(pump.closed, 10)
        return console.getvalue()

    assert asyncio.run(scenario()) == b"> one\n> two\n"
