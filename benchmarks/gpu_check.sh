#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): snapshot stall against a raw copy, NCCL abort and
# two ranks on one GPU, a kill -9 and an in-place recovery; prints JSON. Under 8 minutes on a
# machine with one GPU (the whole run is bounded at 480 s).
#
# No virtualenv is made: a GPU machine often reaches no package registry. It uses an existing
# python that has a CUDA build of torch ($PYTHON, else python3: on this workplace's GPU
# machines that is /opt/torch/.venv/bin/python3), runs trainguard from this checkout
# (PYTHONPATH), and first checks that trainguard's own dependencies (pyproject.toml) import,
# naming any that are missing. Exit codes: 0 every check passed, 1 one failed, 2 no GPU or a
# missing dependency, 124 over time. Arguments are passed on (--device cpu checks the script
# on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "gpu_check: $python cannot import torch; set PYTHON to a python with a CUDA build" \
         "of torch" >&2
    exit 2
fi
missing=$("$python" - <<'PY'
import importlib.metadata
import re
import tomllib


def installed(name):
    # By distribution, not module: protobuf's module is google.protobuf.
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


with open("pyproject.toml", "rb") as stream:
    needed = tomllib.load(stream)["project"]["dependencies"]
names = [re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0] for requirement in needed]
print(" ".join(name for name in names if not installed(name)))
PY
)
if [ -n "$missing" ]; then
    echo "gpu_check: $python lacks trainguard's dependencies: $missing; install them, or" \
         "bring their wheels (pip download --no-deps NAME) and pip install --target a" \
         "folder on PYTHONPATH" >&2
    exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --kill-after 10 480 "$python" -m benchmarks.gpu_check "$@"
