# The two commands of the README. Everything they need is installed here, into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Exactly the torch the measurements in the README were made with (the extra allows 2.13.x).
TORCH := torch==2.13.0

.PHONY: run test lint test-packages proto clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# A stamp per dependency set, so an edit to pyproject.toml reinstalls.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[torch,report]' $(TORCH)
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[torch,report,nvidia,etcd,dev]' $(TORCH)
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/trainguard demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The tests start a real etcd on loopback (tests/store): Debian's etcd-server, installed here
# when missing and this runs as root (CI); elsewhere its tests are skipped, saying so. GCC's
# libatomic (libatomic1) likewise: the memory fence of weakly ordered CPUs is tested through it.
test-packages:
	@{ command -v etcd && ldconfig -p | grep -q 'libatomic\.so\.1'; } >/dev/null || \
	    [ "$$(id -u)" != 0 ] || { \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        --no-install-recommends etcd-server libatomic1 >/dev/null; }

# Two processes run the tests, each test file whole on one; the tests marked serial (their
# deadlines, waits and measurements assume the machine is theirs) run one at a time after.
test: lint test-packages
	$(BIN)/pytest -n 2 --dist loadfile -m "not serial"
	$(BIN)/pytest -m serial

# The Python code generated from trainguard/proto/*.proto, committed beside it; the pinned
# grpcio-tools of the dev extra makes it byte for byte (tests/proto checks it is not stale).
proto: $(VENV)/.installed-dev
	$(BIN)/python tools/generate_proto.py

clean:
	rm -rf $(VENV) trainguard-runs .pytest_cache .mypy_cache .ruff_cache
