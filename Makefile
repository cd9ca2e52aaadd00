# tensorport: `make serve` sets everything up and serves examples/models; `make test` runs every test.

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python
PERF_ANALYZER := .cache/perf_analyzer/perf_analyzer
# `make serve`'s own environment: the onnxruntime wheel alone, for its libonnxruntime.so.
RUNTIME_VENV := .cache/runtime-venv
RUNTIME_STAMP := $(RUNTIME_VENV)/.installed
ORT_REQUIREMENT = $(shell grep '^onnxruntime==' requirements-dev.txt)
MLSERVER_VENV := .cache/mlserver
MLSERVER_STAMP := $(MLSERVER_VENV)/.installed
# Native Triton 2.51 with its ONNX Runtime backend, the peer of the pipeline and Triton
# benchmarks, set up by the workspace's shared tool (override TRITON_SETUP to point at another copy).
TRITON_ONNX := .cache/triton-onnx
TRITON_SETUP ?= ../shared/tools/setup-triton-onnx.sh
# `make bench` runs the Triton comparison too where Triton is installed or can be.
TRITON_AVAILABLE = $(shell [ -x $(TRITON_ONNX)/start-triton.sh ] || [ -x "$(TRITON_SETUP)" ] && echo yes)
MODEL_DIR ?= examples/models
GRPC_PORT ?= 8500
REST_PORT ?= 8501
# Optional backends for `make serve`/`release`: e.g. FEATURES=torch (TorchScript; fetches
# LibTorch, about 490 MB, into .cache/libtorch) or FEATURES=tensorflow (SavedModels; fetches
# TensorFlow's C API, about 560 MB, into .cache/libtensorflow). ONNX is always built.
FEATURES ?=
# Every optional backend: what `make test`, `make lint` and `make serve-all` build.
ALL_FEATURES := torch tensorflow
LIBTORCH := .cache/libtorch
LIBTENSORFLOW := .cache/libtensorflow
# The native libraries the chosen features need, fetched before cargo runs.
native_libs = $(if $(filter torch,$(1)),libtorch) $(if $(filter tensorflow,$(1)),libtensorflow)
cargo_features = $(if $(strip $(1)),--features "$(strip $(1))")

K8S_VERSION ?= 1.30.0
K8S_RESOURCES := deploy/k8s/deployment.yaml deploy/k8s/service.yaml deploy/k8s/hpa.yaml \
	deploy/k8s/pdb.yaml deploy/k8s/pvc.yaml
# KServe's SDK wheel: its generated API types are what deploy/kserve/ is checked against.
KSERVE_VERSION := 0.21.0
KSERVE_WHEEL_DIR ?= .cache/kserve
KSERVE_WHEEL := $(KSERVE_WHEEL_DIR)/kserve-$(KSERVE_VERSION)-py3-none-any.whl

# apt-get needs root; elsewhere it runs under sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: serve serve-all runtime test venv build release lint fmt models torch-fixtures tf-fixtures \
	perf-analyzer bench bench-quick bench-all bench-build bench-compare bench-overload bench-pipeline bench-triton triton-onnx mlserver clean tools \
	deploy-check image-check libtorch libtensorflow test-under-load

## serve: build in release mode and serve $(MODEL_DIR) on ports $(GRPC_PORT) (gRPC) and $(REST_PORT) (REST)
## (`cargo run` finds the binary wherever CARGO_TARGET_DIR or build.target-dir put it)
serve: runtime $(call native_libs,$(FEATURES))
	@echo "==> building tensorport in release mode (first time: a few minutes), then serving $(MODEL_DIR)"
	cargo run --release $(call cargo_features,$(FEATURES)) --bin tensorport -- \
		serve --model-dir $(MODEL_DIR) --grpc-port $(GRPC_PORT) --rest-port $(REST_PORT)

## runtime: what the server needs to run, apart from itself: ONNX Runtime's library (the
## onnxruntime wheel without its Python dependencies, a 24 MB download) in .cache/runtime-venv
runtime: $(RUNTIME_STAMP)

$(RUNTIME_STAMP): requirements-dev.txt
	@echo "==> installing $(ORT_REQUIREMENT) (its libonnxruntime.so) into $(RUNTIME_VENV)"
	$(PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --disable-pip-version-check --no-deps \
		--progress-bar on "$(ORT_REQUIREMENT)"
	touch $@

## serve-all: `make serve` with every backend (ONNX, TorchScript, TensorFlow)
serve-all:
	$(MAKE) serve FEATURES="$(ALL_FEATURES)"

## test: unit and integration tests (Rust), then the end-to-end suites against the real binary
## (the server's, including the OpenAPI checks and schemathesis, then the Python client's)
test: venv perf-analyzer deploy-check $(call native_libs,$(ALL_FEATURES))
	cargo build --bins $(call cargo_features,$(ALL_FEATURES))
	cargo test $(call cargo_features,$(ALL_FEATURES))
	cargo test -p tensorport-client
	cargo test -p tensorport-loadgen
	PERF_ANALYZER=$(PERF_ANALYZER) $(PY) -m pytest tests/python -q
	$(PY) -m pytest clients/python/tests -q

## test-under-load: `make test` while stress-ng keeps every core busy, as on a shared CI
## machine; the suite must pass the same (no test may depend on a model being slow enough)
test-under-load:
	@command -v stress-ng >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends stress-ng >/dev/null; }
	stress-ng --cpu $$(nproc) --quiet & load=$$!; \
		trap 'kill $$load 2>/dev/null' EXIT; \
		$(MAKE) test

## venv: Python environment with ONNX Runtime (the server loads its library) and the test clients
venv: $(VENV_STAMP)

$(VENV_STAMP): requirements-dev.txt scripts/install-tfs-client.sh clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q -e clients/python
	scripts/install-tfs-client.sh $(VENV)
	touch $@

## tools: promtool (Debian's prometheus package) for the deployment checks and the metrics scrape test; a no-op once present
tools:
	@command -v promtool >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

## deploy-check: what can be checked of deploy/ and docker-compose.yml without Docker or a cluster
deploy-check: venv tools $(KSERVE_WHEEL)
	$(VENV)/bin/yamllint -s openapi deploy docker-compose.yml .yamllint.yaml
	$(VENV)/bin/openapi-spec-validator openapi/tensorport.yaml
	$(VENV)/bin/kubernetes-validate --quiet -k $(K8S_VERSION) --strict $(K8S_RESOURCES)
	$(PY) scripts/check_kserve_manifests.py $(KSERVE_WHEEL) $(K8S_VERSION) deploy/kserve/*.yaml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml
	promtool check config deploy/prometheus/prometheus.yml
	$(PY) scripts/check_docker_context.py deploy/Dockerfile
	$(VENV)/bin/hadolint deploy/Dockerfile

## image-check: the runtime image built and run: deploy/Dockerfile's runtime stage on a Debian
## base made with debootstrap (no registry), with the ONNX server built here (BIN=... to pass
## one), run as deploy/k8s runs it; checks its user, probes, an inference over HTTP and gRPC, a
## shared-memory client in a second container, and the SIGTERM drain. Needs root or sudo
## (apt-get installs docker.io and debootstrap when missing; dockerd is started when none runs).
## Its build leaves an ONNX-only target/debug/tensorport; `make test` builds its own again
image-check: venv
	PY=$(PY) scripts/image_check.sh

$(KSERVE_WHEEL): | venv
	$(PY) -m pip download --quiet --no-deps --dest $(KSERVE_WHEEL_DIR) kserve==$(KSERVE_VERSION)

## perf-analyzer: Triton's load generator, a real TF Serving / KServe client used by the tests
perf-analyzer: $(PERF_ANALYZER)

$(PERF_ANALYZER): scripts/setup-perf-analyzer.sh
	scripts/setup-perf-analyzer.sh $(dir $(PERF_ANALYZER)) $(PYTHON)

## bench: release build, then tensorport, MLServer and the in-process floor side by side on
## loopback (about 15 minutes), then against native Triton where it is installed or installable
## (bench-triton, about 5 minutes more); the tables go into docs/BENCHMARKS.md
bench: venv perf-analyzer mlserver bench-build $(if $(TRITON_AVAILABLE),triton-onnx)
	PERF_ANALYZER=$(PERF_ANALYZER) $(PY) scripts/bench.py
	$(if $(TRITON_AVAILABLE),$(PY) scripts/bench_triton.py --triton $(TRITON_ONNX),\
	@echo "no native Triton ($(TRITON_SETUP) missing): scripts/bench_triton.py skipped")

## bench-quick: a subset of the matrix in about two minutes, printed (docs/BENCHMARKS.md untouched)
bench-quick: venv perf-analyzer mlserver bench-build
	PERF_ANALYZER=$(PERF_ANALYZER) $(PY) scripts/bench.py --quick --doc -

## bench-all: bench, then the other suites in docs/BENCHMARKS.md and the micro-benchmarks
bench-all: bench $(call native_libs,$(ALL_FEATURES))
	cargo bench --bench shm_vs_inline
	cargo bench $(call cargo_features,$(ALL_FEATURES)) --bench backends
	PERF_ANALYZER=$(PERF_ANALYZER) $(PY) scripts/bench_perf_analyzer.py
	cargo bench --bench codecs --bench request_path --bench ensemble_steps

## bench-pipeline: ensembles and the response cache against native Triton (about 5 minutes);
## the table goes into docs/BENCHMARKS.md; then the scheduler's own cost per step, in process
bench-pipeline: venv bench-build triton-onnx
	$(PY) scripts/bench_pipeline.py --triton $(TRITON_ONNX)
	cargo bench --bench ensemble_steps

## bench-triton: tensorport and native Triton alternating on the same .onnx files, KServe
## protocol (about 5 minutes); the table goes into docs/BENCHMARKS.md ("Against native Triton")
bench-triton: venv bench-build triton-onnx
	$(PY) scripts/bench_triton.py --triton $(TRITON_ONNX)

## triton-onnx: native Triton with its ONNX Runtime backend in .cache/triton-onnx (about 500 MB)
triton-onnx: $(TRITON_ONNX)/start-triton.sh

$(TRITON_ONNX)/start-triton.sh:
	@[ -x "$(TRITON_SETUP)" ] || { echo "no $(TRITON_SETUP): set TRITON_SETUP to setup-triton-onnx.sh" >&2; exit 1; }
	$(TRITON_SETUP) $(TRITON_ONNX)

## bench-compare: the working tree's release build against BASE's (a revision, built once into
## .cache/bench-compare/), alternated in rounds on the small-request and 1,000-row cells, with
## per-round figures, median ratios and each server's CPU per inference (about 8 minutes)
BASE ?= main
bench-compare: venv bench-build
	$(PY) scripts/bench_compare.py --base $(BASE) $(BENCH_COMPARE_ARGS)

bench-build:
	cargo build --release -p tensorport -p tensorport-loadgen

## mlserver: the benchmark's peer (PyPI mlserver, and the onnxruntime the server uses) in
## .cache/mlserver; only `make bench` needs it
mlserver: $(MLSERVER_STAMP)

$(MLSERVER_STAMP): bench/mlserver/requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(MLSERVER_VENV)
	$(MLSERVER_VENV)/bin/python -m pip install -q -r bench/mlserver/requirements.txt \
		"$$(grep '^onnxruntime==' requirements-dev.txt)"
	touch $@

## bench-overload: about 4x capacity for 20 s with overload protection on and off (server on
## core 0, load on core 1)
bench-overload: release
	cargo bench --bench overload --no-run
	taskset -c 1 cargo bench --bench overload

build: $(call native_libs,$(FEATURES))
	cargo build $(call cargo_features,$(FEATURES))

release: $(call native_libs,$(FEATURES))
	cargo build --release $(call cargo_features,$(FEATURES))

## libtorch: LibTorch 2.13.0 for the torch feature, from PyPI wheels into .cache/libtorch (once)
libtorch:
	scripts/fetch-libtorch.sh $(LIBTORCH)

## libtensorflow: TensorFlow 2.13's C API for the tensorflow feature, from the tensorflow-cpu
## wheel into .cache/libtensorflow (once)
libtensorflow: $(LIBTENSORFLOW)/.complete

$(LIBTENSORFLOW)/.complete: scripts/fetch-libtensorflow.sh
	scripts/fetch-libtensorflow.sh $(LIBTENSORFLOW) $(PYTHON)
	touch $@

## lint: formatting and clippy, as CI runs them (with every backend, so all code is checked)
lint: $(call native_libs,$(ALL_FEATURES))
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets $(call cargo_features,$(ALL_FEATURES)) -- -D warnings

fmt:
	cargo fmt --all

## models: regenerate the example and test models
models: venv
	$(PY) scripts/make_example_models.py

## torch-fixtures: regenerate the TorchScript test models (installs PyTorch in .cache/torch-venv)
torch-fixtures:
	$(PYTHON) -m venv .cache/torch-venv
	.cache/torch-venv/bin/pip install -q torch==2.13.0 onnx==1.23.2 onnxruntime==1.31.1 numpy
	.cache/torch-venv/bin/python scripts/make_torch_fixtures.py

## tf-fixtures: regenerate the SavedModel test model (installs TensorFlow in .cache/tf-python)
tf-fixtures:
	$(PYTHON) -m venv .cache/tf-python
	.cache/tf-python/bin/pip install -q tensorflow-cpu==2.13.0 onnx
	.cache/tf-python/bin/pip install -q --no-deps tensorflow-serving-api==2.13.0
	.cache/tf-python/bin/python scripts/make_tf_fixtures.py
	.cache/tf-python/bin/python scripts/make_tf_classify_fixture.py

clean:
	cargo clean
	rm -rf $(VENV) .cache

# Mutation fuzzing of every decoder that takes client bytes, FUZZ_SECS seconds per target
# (see docs/RELIABILITY.md).
FUZZ_SECS ?= 600
fuzz:
	TENSORPORT_FUZZ_SECS=$(FUZZ_SECS) cargo test --test fuzz_decoders -- --nocapture --test-threads 1
.PHONY: fuzz
