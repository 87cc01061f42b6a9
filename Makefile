# The project's commands live here and only here; CI and the README call these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Python's default, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every test
# process and every server or worker a test starts compiled the project (and pytest rewrote
# every test module's asserts) from source again: ~5 s of each pytest process's start.
unexport PYTHONDONTWRITEBYTECODE
STAMP := $(VENV)/.installed
PROTOS := $(wildcard protos/jobwire/v1/*.proto)
GENERATED := shared/jobwire/v1/.generated
PYTEST_ARGS ?=
# Every benchmark the performance targets are judged by (bench/README.md), ~45 min in all;
# `make bench BENCHES=throughput` runs one.
BENCHES ?= throughput fleet idle claims submit watch cancel_storm

.PHONY: install proto dist run serve demo check test lint typecheck migrate bench soak fuzz clean

install: $(STAMP) $(GENERATED)

# Each distribution installs editable as a .pth naming its folder (package-dir "" = "." in its
# pyproject.toml), so the five parts of the namespace package `jobwire` (shared,
# services/jobapi, services/worker, services/server, services/gateway) merge as PEP 420 says,
# and mypy (mypy_path) and import-linter read the very same folders.
$(STAMP): VERSION constraints.txt requirements-dev.txt shared/pyproject.toml shared/setup.py \
          $(wildcard services/*/pyproject.toml services/*/setup.py)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt \
	    -e 'shared[db]' -e 'services/worker[server]' -e services/jobapi -e services/server -e services/gateway
	@touch $@

proto: $(GENERATED)

# jobwire.v1 in place, as shared's build does for an editable install: again after a .proto changes.
$(GENERATED): $(PROTOS) shared/build_protos.py $(STAMP)
	$(PY) shared/build_protos.py
	@touch $@

# The sdist and wheel of each distribution in dist/ (docs/install.md); the Dockerfile's build
# stage and tests/e2e/test_wheels.py run the same script.
dist: $(STAMP)
	rm -rf dist
	$(PY) tools/build_dists.py dist

run: install
	@mkdir -p var
	$(PY) -m jobwire.devrun

demo: install
	$(PY) -m jobwire.devrun --demo

# The inner loop, under a minute: lint, types, and the unit and store tests on SQLite.
check: lint typecheck
	JOBWIRE_REQUIRE_MYSQL= $(PY) -m pytest -q -n $(TEST_PROCESSES) --dist worksteal -m "not mysql" tests/unit tests/store $(PYTEST_ARGS)

# The whole suite (CI runs it): first what can share the machine, spread over processes
# (unit, store, service, e2e and fuzz tests each on their own ports and databases), then
# alone what cannot (tests marked `alone`: what restarts the shared MariaDB, load tests with
# latency bounds, the soak). The run time is the last line. The project is byte-compiled
# first, once, rather than by each test process at once.
TEST_PROCESSES ?= 4
test: install
	@start=$$(date +%s); \
	$(PY) -m compileall -q shared services; \
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal -m "not alone" $(PYTEST_ARGS) \
	  && $(PY) -m pytest -m alone $(PYTEST_ARGS); status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

migrate: install
	$(PY) -m jobwire migrate

bench: install
	$(PY) -m pip install -q -c constraints.txt -r bench/requirements.txt
	set -e; for b in $(BENCHES); do $(PY) bench/$$b.py; done

# The nemesis soak (tests/soak/soak.py) at length: 4 minutes of faults on MariaDB, then the
# checker's table; `make test` runs a 32-second one. SOAK_ARGS="--seconds 600" for longer.
SOAK_ARGS ?=
soak: install
	$(PY) tests/soak/soak.py $(SOAK_ARGS)

# The fuzzers at length (tests/fuzz): 300 random requests per RPC and 200 model runs, ~15 min;
# `make test` runs 20 and 25 (the same deterministic start of each).
fuzz: install
	JOBWIRE_FUZZ_EXAMPLES=300 JOBWIRE_MODEL_EXAMPLES=200 $(PY) -m pytest -q tests/fuzz $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var dist shared/jobwire/v1/*_pb2* $(GENERATED)
