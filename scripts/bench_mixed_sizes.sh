#!/usr/bin/env bash
# Small requests beside large JSON ones on the same server: while two clients send 1 MiB
# float32 inputs as KServe JSON (`ranker_large`, about 5 MB of text each), one client sends the
# example ranker's batch-1 requests over KServe gRPC at concurrency 1. Prints, per server
# binary and round, both loads' throughput and the small requests' latencies: what a large
# body decoded or encoded on a runtime worker costs the requests queued behind it. Server and
# load generators unpinned (every core), as a deployment runs them.
#
# Usage: scripts/bench_mixed_sizes.sh [BINARY ...]   (default target/release/tensorport;
#        several binaries alternate ROUNDS times; DURATION=S, ROUNDS=N)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve_ports.sh
. scripts/serve_ports.sh
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-2}
BINARIES=("${@:-target/release/tensorport}")

large_ranker_models
cp -r examples/models/ranker "$models/"
rm -f "$models/ranker/config.toml"

run() { # binary
    local log server grpc rest big small
    log=$(mktemp)
    ORT_DYLIB_PATH=$ORT "$1" serve --model-dir "$models" --host 127.0.0.1 \
        --grpc-port 0 --rest-port 0 >"$log" 2>&1 &
    server=$!
    serve_ports "$log"
    big=$(mktemp)
    "$LOADGEN" --protocol kserve-http --target "$rest" --model ranker_large \
        --input features:262144 --concurrency 2 --duration "$DURATION" --warmup 1 \
        --format json >"$big" &
    small=$("$LOADGEN" --protocol kserve-grpc --target "$grpc" --model ranker \
        --input features:16 --concurrency 1 --duration "$DURATION" --warmup 1 --format json)
    wait $!
    python3 - "$1" "$(tail -n 1 "$big")" "$(tail -n 1 <<<"$small")" <<'PY'
import json, sys
big, small = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"| {sys.argv[1]} | {big['requests_per_s']:,.1f} | {small['requests_per_s']:,.0f} "
      f"| {small['p50_us']:,.0f} | {small['p90_us']:,.0f} | {small['p99_us']:,.0f} "
      f"| {big['error_count'] + small['error_count']} |")
PY
    kill "$server"
    wait "$server" || true
    rm -f "$log" "$big"
}

echo "| server | 1 MiB JSON req/s (c2) | small req/s (c1) | small p50 | small p90 | small p99 | errors |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for _ in $(seq "$ROUNDS"); do
    for binary in "${BINARIES[@]}"; do
        run "$binary"
    done
done
