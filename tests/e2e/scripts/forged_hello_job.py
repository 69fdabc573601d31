"""A worker that says hello twice on connections of its own, with the secret its agent gave it
and with a wrong one, and prints which the agent kept open: only the agent's own worker process
with its secret may speak for a rank. It also looks for its secret in every process's command
line, and writes it to the file argv[1] for the test to look for in logs."""

import os
import socket
import sys
from pathlib import Path

from trainguard.ipc import messages
from trainguard.proto import versioned, worker_codec

WAIT_SECONDS = 5.0  # an accepted connection stays open; a refused one is closed at once


def kept_open(secret: str) -> bool:
    address = os.environ["TRAINGUARD_AGENT_SOCKET"]
    hello = messages.Hello(rank=int(os.environ["RANK"]), local_rank=int(os.environ["LOCAL_RANK"]),
                           pid=os.getpid(), generation=int(os.environ["TRAINGUARD_GENERATION"]),
                           secret=secret)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(WAIT_SECONDS)
        connection.connect("\0" + address[1:])
        connection.sendall(versioned.frame(worker_codec.encode(hello)))
        try:
            return connection.recv(1) != b""
        except TimeoutError:
            return True


def in_a_command_line(secret: str) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and secret.encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue  # it ended meanwhile
    return False


given = os.environ.get("TRAINGUARD_WORKER_SECRET", "")
Path(sys.argv[1]).write_text(given)
print(f"secret in a command line: {given == '' or in_a_command_line(given)}", flush=True)
print(f"wrong secret kept open: {kept_open('not-' + given)}", flush=True)
print(f"own secret kept open: {kept_open(given)}", flush=True)
