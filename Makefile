# tinykube: `make up` starts a local cluster, `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PROTOS := $(wildcard proto/tinykube/v1/*.proto)

.PHONY: install up test check proto proto-check unit integration e2e bench bench-smoke clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/tinykube up

proto: $(STAMP)
	rm -f tinykube/v1/*_pb2*.py tinykube/v1/*_pb2*.pyi
	$(BIN)/python -m grpc_tools.protoc -Iproto \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=. --mypy_out=quiet:. --grpc_python_out=. --mypy_grpc_out=quiet:. \
		$(PROTOS)

# Fails when the committed stubs differ from what the .proto files generate.
proto-check: $(STAMP)
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -Iproto \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=$$tmp --mypy_out=quiet:$$tmp --grpc_python_out=$$tmp --mypy_grpc_out=quiet:$$tmp \
		$(PROTOS) && \
	for f in $$tmp/tinykube/v1/*; do \
		cmp -s $$f tinykube/v1/$$(basename $$f) || { echo "stale generated code: tinykube/v1/$$(basename $$f); run make proto"; rm -rf $$tmp; exit 1; }; \
	done; \
	n_new=$$(ls $$tmp/tinykube/v1 | wc -l); n_old=$$(ls tinykube/v1 | grep -c _pb2); \
	rm -rf $$tmp; \
	[ $$n_new -eq $$n_old ] || { echo "tinykube/v1 holds stubs of a removed .proto; run make proto"; exit 1; }

check: $(STAMP) proto-check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q -m integration tests/integration

e2e: $(STAMP)
	$(BIN)/pytest -q tests/e2e

test: $(STAMP) proto-check
	$(BIN)/pytest -q -ra tests

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
