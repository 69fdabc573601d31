"""Connects once to its generation's rendezvous store, before anything else, and says whether it
could; rank 1 then fails on the first attempt (a job-level restart). No torch: it starts fast."""

import contextlib
import os
import socket
import sys
from pathlib import Path

address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
connected = False
with contextlib.suppress(OSError), socket.create_connection(address, timeout=5.0):
    connected = True
(Path(sys.argv[1]) / f"probe-{attempt}-{rank}").write_text(str(connected))
if attempt == 0 and rank == 1:
    sys.exit(3)
