"""The committed code generated from the .proto files is what they generate now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _generator() -> object:
    spec = importlib.util.spec_from_file_location("generate_proto",
                                                  ROOT / "tools" / "generate_proto.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_generated_code_is_not_stale(tmp_path: Path) -> None:
    generator: object = _generator()
    written: list[Path] = generator.generate(tmp_path)  # type: ignore[attr-defined]
    assert [path.name for path in written] == ["control_pb2.py", "control_pb2.pyi",
                                              "helpers_pb2.py", "helpers_pb2.pyi",
                                              "profiling_pb2.py", "profiling_pb2.pyi",
                                              "pubfault_pb2.py", "pubfault_pb2.pyi",
                                              "worker_pb2.py", "worker_pb2.pyi"]
    stale = [path.name for path in written
             if path.read_bytes() != (ROOT / "trainguard" / "proto" / path.name).read_bytes()]
    assert stale == [], f"run `make proto`: {stale} differ from what the .proto files generate"
