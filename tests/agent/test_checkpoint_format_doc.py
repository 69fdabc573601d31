"""The loader in docs/checkpoint-format.md reads a shard trainguard wrote, without trainguard."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from trainguard.agent.snapshot_slots import SnapshotSlots
from trainguard.ipc import snapshot_layout
from trainguard.job import replicas
from trainguard.train import replica_shares, snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "checkpoint-format.md"

# Run in the test and in the isolated process alike: a digest of every tensor and value.
DIGEST = '''
def digest(tree):
    import hashlib
    import torch

    hasher = hashlib.sha256()

    def visit(node, where):
        if isinstance(node, torch.Tensor):
            hasher.update(f"{where} tensor {node.dtype} {tuple(node.shape)}".encode())
            hasher.update(bytes(node.contiguous().view(-1).view(torch.uint8).tolist()))
        elif isinstance(node, dict):
            for key in sorted(node, key=repr):
                visit(node[key], f"{where}/{key!r}")
        elif isinstance(node, (list, tuple)):
            hasher.update(f"{where} {type(node).__name__} {len(node)}".encode())
            for index, item in enumerate(node):
                visit(item, f"{where}[{index}]")
        else:
            hasher.update(f"{where} {node!r}".encode())

    visit(tree, "")
    return hasher.hexdigest()
'''

DRIVER = '''
import sys

try:
    import trainguard
except ImportError:
    print("trainguard: not importable")
else:
    print("trainguard: imported from", trainguard.__file__)
step, tree = load_shard(sys.argv[1])
print("step:", step)
print("digest:", digest(tree))
'''


def documented_loader() -> str:
    text = DOC.read_text()
    section = text.split("## Loading a shard without trainguard", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no python block under 'Loading a shard without trainguard'"
    return match.group(1)


def sample_state() -> dict[str, Any]:
    generator = torch.Generator().manual_seed(7)
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 6, generator=generator)).sum().backward()
    optimizer.step()
    square = torch.randn(4, 4, generator=generator)
    return {
        "step": 42,
        "state": {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "extra": {"f64": torch.randn(5, dtype=torch.float64, generator=generator),
                      "bf16": torch.randn(3, 2, generator=generator).to(torch.bfloat16),
                      "mask": torch.tensor([True, False, True]),
                      "count": torch.tensor(9, dtype=torch.int64),
                      "empty": torch.empty(0, 4),
                      "transposed": square.t(),
                      "values": [1, 2.5, "three", None, (4, 5)]},
        },
        "rng": {"python": (3, (1, 2), None), "torch": torch.get_rng_state()},
    }


def write_shard(path: Path, tree: dict[str, Any], *, step: int,
                elsewhere: dict[int, int] | None = None) -> None:
    """A shard as trainguard writes one: a slot's committed bytes, copied to a file."""
    slots = SnapshotSlots()
    try:
        prepared = snapshot.prepare(tree, elsewhere=elsewhere)
        slot_path, _ = slots.grant(0, 0, prepared.nbytes)
        mapped = snapshot.MappedSlot(slot_path)
        try:
            mapped.write(prepared, step=step, generation=0, rank=0, world_size=1)
        finally:
            mapped.close()
        header = slots.header(0, 0)
        assert header is not None
        with open(slot_path, "rb") as stream:
            path.write_bytes(stream.read(header.end))
    finally:
        slots.close()


def test_documented_loader_reads_a_shard_without_trainguard(tmp_path: Path) -> None:
    tree = sample_state()
    shard = tmp_path / "rank-00000.tgsnap"
    write_shard(shard, tree, step=42)
    namespace: dict[str, Any] = {}
    exec(DIGEST, namespace)
    expected = namespace["digest"](tree)

    # -I ignores PYTHONPATH, the user's site and the working directory; -S also skips the
    # virtualenv's .pth files, among them the editable install's finder for trainguard. Only
    # torch's site-packages directory is put on the path, by hand.
    site_packages = str(Path(torch.__file__).resolve().parents[1])
    program = (f"import sys\nsys.path.append({site_packages!r})\n"
               + documented_loader() + DIGEST + DRIVER)
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, str(shard)], capture_output=True,
        text=True, timeout=120, cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
        check=False)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == ["trainguard: not importable", "step: 42", f"digest: {expected}"]


def test_documented_loader_assembles_a_rank_from_shares(tmp_path: Path) -> None:
    tree = sample_state()
    shares = replica_shares.ReplicaShares(rank=0, layout=replicas.ReplicaLayout(3, 3),
                                          enabled=True)
    shares._checked = True  # one process: no replicas to compare
    sources: list[int] = []
    _, tensors = snapshot.flatten(tree, sources=sources)
    held = shares.holders(tree, tensors, sources)
    assert held is not None, "the sample state is split in shares"
    elsewhere = {source: holder for source, holder in zip(sources, held, strict=True)
                 if holder is not None}
    random_state = id(tree["rng"]["torch"])
    complement = {source: 0 for source, holder in zip(sources, held, strict=True)
                  if holder is None and source != random_state}
    write_shard(tmp_path / "rank-00000.tgsnap", tree, step=42, elsewhere=elsewhere)
    write_shard(tmp_path / "rank-00001.tgsnap", tree, step=42, elsewhere=complement)
    namespace: dict[str, Any] = {}
    exec(DIGEST, namespace)
    expected = namespace["digest"](tree)
    driver = ('\nfor rank in (0, 1):\n    step, tree = load_shard(f"rank-{rank:05d}.tgsnap", '
              'lambda held: f"rank-{held:05d}.tgsnap")\n    print(step, digest(tree))\n')
    site_packages = str(Path(torch.__file__).resolve().parents[1])
    program = (f"import sys\nsys.path.append({site_packages!r})\n"
               + documented_loader() + DIGEST + driver)
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True,
        text=True, timeout=120, cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
        check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"42 {expected}", f"42 {expected}"]


def test_documented_loader_rejects_a_torn_snapshot(tmp_path: Path) -> None:
    shard = tmp_path / "rank-00000.tgsnap"
    write_shard(shard, {"step": 1, "state": {"w": torch.ones(3)}}, step=1)
    data = bytearray(shard.read_bytes())
    data[16] |= 1  # seq odd: the worker was still writing
    shard.write_bytes(data)
    site_packages = str(Path(torch.__file__).resolve().parents[1])
    program = (f"import sys\nsys.path.append({site_packages!r})\n" + documented_loader()
               + "\nload_shard(sys.argv[1])\n")
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, str(shard)], capture_output=True,
        text=True, timeout=120, cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")},
        check=False)
    assert result.returncode == 1
    assert "AssertionError: not a complete trainguard snapshot" in result.stderr


def test_documented_header_matches_the_layout() -> None:
    text = DOC.read_text()
    match = re.search(r"struct `([^`]+)`", text)
    assert match is not None
    assert match.group(1) == snapshot_layout.HEADER_FORMAT
    assert f"magic `{snapshot_layout.MAGIC.decode()}`" in text
    assert f"header size {snapshot_layout.HEADER_SIZE}" in text
    assert f"aligned to {snapshot_layout.ALIGNMENT} bytes" in text
    assert snapshot_layout.HEADER_FORMAT in documented_loader()
