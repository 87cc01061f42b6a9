# The project's commands live here and only here; CI and the README call these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)
STAMP := $(VENV)/.installed
PROTOS := $(wildcard protos/jobwire/v1/*.proto)
GENERATED := shared/jobwire/v1/.generated
PYTEST_ARGS ?=
# Every benchmark the performance targets are judged by (bench/README.md), ~45 min in all;
# `make bench BENCHES=throughput` runs one.
BENCHES ?= throughput fleet idle claims submit watch cancel_storm

.PHONY: install proto run serve demo test lint typecheck migrate bench soak clean

install: $(STAMP) $(GENERATED)

# compat editable mode puts each distribution folder on sys.path, so the four parts of the
# `jobwire` namespace package (shared, services/jobapi, services/worker, services/server)
# merge as PEP 420 says (services/gateway too).
$(STAMP): constraints.txt requirements-dev.txt shared/pyproject.toml services/jobapi/pyproject.toml \
          services/worker/pyproject.toml services/server/pyproject.toml services/gateway/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt \
	    --config-settings editable_mode=compat \
	    -e 'shared[db]' -e 'services/worker[server]' -e services/jobapi -e services/server -e services/gateway
	@touch $@

proto: $(GENERATED)

# google/rpc/status.proto (a per-item error of a batch call) ships with googleapis-common-protos.
$(GENERATED): $(PROTOS) $(STAMP)
	$(PY) -m grpc_tools.protoc -Iprotos -I$$($(PY) -c 'import google.rpc.status_pb2 as m, pathlib; print(pathlib.Path(m.__file__).parents[2])') \
	    --python_out=shared --grpc_python_out=shared \
	    --mypy_out=quiet:shared --mypy_grpc_out=quiet:shared $(PROTOS)
	@touch $@

run: install
	@mkdir -p var
	$(PY) -m jobwire.devrun

demo: install
	$(PY) -m jobwire.devrun --demo

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

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
# checker's table; `make test` runs a 40-second one. SOAK_ARGS="--seconds 600" for longer.
SOAK_ARGS ?=
soak: install
	$(PY) tests/soak/soak.py $(SOAK_ARGS)

clean:
	rm -rf $(VENV) var shared/jobwire/v1/*_pb2* $(GENERATED)
