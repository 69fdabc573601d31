"""Regenerate the Python code of trainguard/proto's .proto files (``make proto``).

The code is committed, so that an install needs no protobuf compiler; the dev extra pins
grpcio-tools, whose compiler makes the same bytes each time, and a test compares.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # the dev extra: only regenerating needs the compiler

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "trainguard" / "proto"
SUFFIXES = ("_pb2.py", "_pb2.pyi")


def generate(into: Path) -> list[Path]:
    """Compile every .proto of trainguard/proto into ``into``; returns the files written."""
    protos = sorted(HERE.glob("*.proto"))
    # The include path is the repository root, so the generated imports are package paths.
    status = protoc.main(["protoc", f"-I{ROOT}", f"--python_out={into}", f"--pyi_out={into}",
                          *(str(p.relative_to(ROOT)) for p in protos)])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    # No gRPC stubs: grpc_channel.py serves and calls Control.Connect by its descriptor,
    # passing the envelopes' bytes through as they are.
    return sorted(path for path in into.rglob("*") if path.name.endswith(SUFFIXES))


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        for path in generate(Path(scratch)):
            target = HERE / path.name
            target.write_bytes(path.read_bytes())
            sys.stdout.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
