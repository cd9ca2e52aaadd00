# Sourced by the benchmark scripts (from the repository root): the load generator and the ONNX
# Runtime library they use (LOADGEN and ORT, either settable), and `serve_ports LOG`, which
# waits until the tensorport server writing LOG has loaded its models, then sets `grpc` and
# `rest` to the addresses it listens on (start it with --grpc-port 0 --rest-port 0 and its
# output in LOG). `large_ranker_models` sets `models` to a model directory holding
# `ranker_large` (1 MiB of float32 features per row), removed when the script exits.
serve_ports() {
    for _ in $(seq 600); do
        grep -q "initial load settled" "$1" && break
        sleep 0.1
    done
    grpc=$(grep -o 'listening grpc=[^ ]*' "$1" | head -n 1 | cut -d= -f2)
    rest=$(grep -o 'rest=[^ ]*' "$1" | head -n 1 | cut -d= -f2)
}

LOADGEN=${LOADGEN:-target/release/tensorport-loadgen}
ORT=${ORT:-$(ls .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so* | head -n 1)}

large_ranker_models() {
    models=$(mktemp -d)
    trap 'rm -rf "$models"' EXIT
    .venv/bin/python scripts/make_example_models.py --large-ranker "$models" >/dev/null
}
