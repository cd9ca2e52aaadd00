# tensorport: `make serve` sets everything up and serves examples/models; `make test` runs every test.

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python
PERF_ANALYZER := .cache/perf_analyzer/perf_analyzer
MODEL_DIR ?= examples/models
GRPC_PORT ?= 8500
REST_PORT ?= 8501
# The TensorFlow C API for the `tensorflow` feature (SavedModels), fetched by `make libtensorflow`.
LIBTENSORFLOW := .cache/libtensorflow
# Runtimes beyond ONNX that `make test` and `make lint` build and test.
TEST_FEATURES := tensorport/tensorflow

K8S_VERSION ?= 1.30.0
K8S_RESOURCES := deploy/k8s/deployment.yaml deploy/k8s/service.yaml deploy/k8s/hpa.yaml \
	deploy/k8s/pdb.yaml deploy/k8s/pvc.yaml

.PHONY: serve test venv build release lint fmt models perf-analyzer bench clean tools deploy-check \
	libtensorflow

## serve: build in release mode and serve $(MODEL_DIR) on ports $(GRPC_PORT) (gRPC) and $(REST_PORT) (REST)
serve: venv release
	target/release/tensorport serve --model-dir $(MODEL_DIR) --grpc-port $(GRPC_PORT) --rest-port $(REST_PORT)

## test: unit and integration tests (Rust), then the end-to-end suites against the real binary
## (the server's, including the OpenAPI checks and schemathesis, then the Python client's)
test: venv perf-analyzer deploy-check libtensorflow
	cargo build --bins --features $(TEST_FEATURES)
	cargo test --features $(TEST_FEATURES)
	cargo test -p tensorport-client
	TENSORPORT_BIN=target/debug/tensorport PERF_ANALYZER=$(PERF_ANALYZER) $(PY) -m pytest tests/python -q
	TENSORPORT_BIN=target/debug/tensorport $(PY) -m pytest clients/python/tests -q

## venv: Python environment with ONNX Runtime (the server loads its library) and the test clients
venv: $(VENV_STAMP)

$(VENV_STAMP): requirements-dev.txt scripts/install-tfs-client.sh clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q -e clients/python
	scripts/install-tfs-client.sh $(VENV)
	touch $@

## libtensorflow: TensorFlow 2.13's C API (about 560 MB) from the tensorflow-cpu wheel, for
## `cargo build --features tensorflow`; a no-op once present
libtensorflow: $(LIBTENSORFLOW)/.complete

$(LIBTENSORFLOW)/.complete: scripts/fetch-libtensorflow.sh
	scripts/fetch-libtensorflow.sh $(LIBTENSORFLOW) $(PYTHON)
	touch $@

## tools: promtool (Debian's prometheus package) for the deployment checks; a no-op once present
tools:
	@command -v promtool >/dev/null 2>&1 || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

## deploy-check: what can be checked of deploy/ and docker-compose.yml without Docker or a cluster
deploy-check: venv tools
	$(VENV)/bin/yamllint -s openapi deploy docker-compose.yml .yamllint.yaml
	$(VENV)/bin/openapi-spec-validator openapi/tensorport.yaml
	$(VENV)/bin/kubernetes-validate --quiet -k $(K8S_VERSION) --strict $(K8S_RESOURCES)
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml
	promtool check config deploy/prometheus/prometheus.yml

## perf-analyzer: Triton's load generator, a real TF Serving / KServe client used by the tests
perf-analyzer: $(PERF_ANALYZER)

$(PERF_ANALYZER): scripts/setup-perf-analyzer.sh
	scripts/setup-perf-analyzer.sh $(dir $(PERF_ANALYZER)) $(PYTHON)

## bench: release build, then the benchmarks (figures go to docs/BENCHMARKS.md by hand)
bench: venv perf-analyzer release
	cargo bench --bench shm_vs_inline
	PERF_ANALYZER=$(PERF_ANALYZER) $(PY) scripts/bench_perf_analyzer.py

build:
	cargo build

release:
	cargo build --release

## lint: formatting and clippy, as CI runs them
lint: libtensorflow
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --features $(TEST_FEATURES) -- -D warnings

fmt:
	cargo fmt --all

## models: regenerate the example and test models
models: venv
	$(PY) scripts/make_example_models.py

clean:
	cargo clean
	rm -rf $(VENV) .cache
