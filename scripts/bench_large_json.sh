#!/usr/bin/env bash
# One client sending 1 MiB float32 inputs as KServe JSON (`ranker_large`, about 5 MB of text
# per request, float32s printed as float64s the way Python clients print them), per server
# binary: at concurrency 1 and 2 with the server free to use every core, and at concurrency 1
# with the server held to one core (`taskset -c 0`, the client on the other). Binaries
# alternate ROUNDS times so that a change in the machine's load shows as a spread.
#
# Usage: scripts/bench_large_json.sh [BINARY ...]   (default target/release/tensorport;
#        DURATION=S, ROUNDS=N)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve_ports.sh
. scripts/serve_ports.sh
DURATION=${DURATION:-6}
ROUNDS=${ROUNDS:-2}
BINARIES=("${@:-target/release/tensorport}")

large_ranker_models

cell() { # binary server-cpus client-cpus concurrency
    local log server result
    log=$(mktemp)
    ORT_DYLIB_PATH=$ORT taskset -c "$2" "$1" serve --model-dir "$models" --host 127.0.0.1 \
        --grpc-port 0 --rest-port 0 >"$log" 2>&1 &
    server=$!
    serve_ports "$log"
    result=$(taskset -c "$3" "$LOADGEN" --protocol kserve-http --target "$rest" \
        --model ranker_large --input features:262144 --concurrency "$4" \
        --duration "$DURATION" --warmup 1 --format json | tail -n 1)
    python3 - "$1" "$2" "$4" "$result" <<'PY'
import json, sys
r = json.loads(sys.argv[4])
print(f"| {sys.argv[1]} | {sys.argv[2]} | {sys.argv[3]} | {r['requests_per_s']:,.1f} "
      f"| {r['p50_us']:,.0f} | {r['p99_us']:,.0f} | {r['error_count']} |")
PY
    kill "$server"
    wait "$server" || true
    rm -f "$log"
}

all=0-$(( $(nproc) - 1 ))
echo "| server | server CPUs | concurrency | req/s | p50 (us) | p99 (us) | errors |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for _ in $(seq "$ROUNDS"); do
    for binary in "${BINARIES[@]}"; do
        cell "$binary" "$all" "$all" 1
        cell "$binary" "$all" "$all" 2
        cell "$binary" 0 1 1
    done
done
