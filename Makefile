# robustctl — developer entry points. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
TORCH  ?= torch==2.13.0

.PHONY: setup run test test-fast test-unit test-integration fuzz bench lint fmt clean device-wheels

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" numpy
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

run: setup
	$(VENV)/bin/robustctl diagnose

# JUNIT_DIR=DIR (.ci/run sets it): each pytest run below also writes its JUnit report there.
JUNIT_DIR ?=
junit = $(if $(JUNIT_DIR),--junitxml=$(JUNIT_DIR)/$(1).xml)

# Every test: the unit tests first, on two worker processes (a failure there shows in minutes), then
# the integration beds one test at a time; each run lists its 30 slowest tests with their times.
test: setup
	bash scripts/testbed-deps.sh
	$(PY) -m pytest -q -n 2 --durations=30 $(call junit,unit) tests/unit
	$(PY) -m pytest -q --durations=30 $(call junit,integration) tests/integration

# The two-minute loop: the in-process unit tests, none that starts sshd, Slurm, a torch job, py-spy or
# a browser (those carry the `integration` or `external` marker), on two worker processes, with fewer
# Hypothesis examples than `make test` runs.
test-fast: setup
	HYPOTHESIS_PROFILE=fast $(PY) -m pytest -q -n 2 -m "not integration and not external" --durations=10 tests/unit

test-unit: setup
	$(PY) -m pytest -q -n 2 tests/unit

test-integration: setup
	bash scripts/testbed-deps.sh
	$(PY) -m pytest -q tests/integration

fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -m fuzz tests/unit

bench: setup
	bash scripts/testbed-deps.sh
	$(PY) -m bench

lint: setup
	$(VENV)/bin/ruff check robustctl diagnostics tests bench
	$(VENV)/bin/ruff format --check robustctl diagnostics tests bench
	$(VENV)/bin/pydoclint --config=pyproject.toml --quiet robustctl
	$(VENV)/bin/mypy

fmt: setup
	$(VENV)/bin/ruff format robustctl diagnostics tests bench
	$(VENV)/bin/ruff check --fix robustctl diagnostics tests bench

# The wheels the GPU device machine lacks, for CPython 3.12 manylinux x86-64, into .whl/ (ignored),
# checked complete; scripts/device-check.sh installs them there without a network.
device-wheels:
	PYTHON=$(PYTHON) bash scripts/device-wheels.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
