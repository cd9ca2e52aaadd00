#!/usr/bin/env bash
# Issue 13's request-path figures side by side in one run, for the example ranker at batch 1:
# KServe JSON infer at concurrency 8 against the same server's GET /v2/health/live, and KServe
# gRPC and HTTP at concurrency 1 against the in-process floor and against the same server's
# KServe gRPC `ServerLive` and `GET /v2/health/live` (the stacks alone); each with inline runs off
# (--inline-run-max-us 0: every request through the batcher) and on (the default). Server on
# CPU 0, load generator on CPU 1 (taskset), the floor on CPU 0. One JSON line per cell on
# stdout (tensorport-loadgen's --format json, labelled "inline=<us> <cell>"), and on stderr
# how many requests of each server ran inline (tensorport_inline_runs_total) and the server's
# CPU time per cell (warm-up included), which unlike latency does not depend on how the
# kernel shares a loaded machine's cores. The two settings
# alternate twice (ROUNDS), so that a change in the machine's load shows as a spread.
#
# Usage: scripts/bench_fast_path.sh   (after `make bench-build`; DURATION=S WARMUP=S to change;
#        CLIENT_CPU=0 puts the load generator on the server's CPU, which takes the wake-up of
#        an idle CPU out of every round trip; SERVER_ARGS adds flags to the server's command
#        line, e.g. SERVER_ARGS="--cpu-wakeup-latency-us 0")
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve_ports.sh
. scripts/serve_ports.sh
BIN=${BIN:-target/release/tensorport}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
CLIENT_CPU=${CLIENT_CPU:-1}
MODEL=examples/models/ranker/2/model.onnx

# The server's CPU time so far (user + system), in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }

cell() { # label target protocol concurrency
    local before
    before=$(cpu_ticks)
    taskset -c "$CLIENT_CPU" "$LOADGEN" --target "$2" --protocol "$3" --concurrency "$4" \
        --model ranker --input features:16 --duration "$DURATION" --warmup "$WARMUP" \
        --format json --label "$1"
    echo "$1: server CPU $(( $(cpu_ticks) - before )) ticks of 1/$(getconf CLK_TCK) s over warm-up and run" >&2
}

for inline in $(for _ in $(seq "$ROUNDS"); do echo 0 50; done); do
    log=$(mktemp)
    ORT_DYLIB_PATH=$ORT taskset -c 0 "$BIN" serve --model-dir examples/models --host 127.0.0.1 \
        --grpc-port 0 --rest-port 0 --inline-run-max-us "$inline" ${SERVER_ARGS:-} >"$log" 2>&1 &
    server=$!
    serve_ports "$log"
    cell "inline=$inline health-live c8" "$rest" health-live 8
    cell "inline=$inline kserve-http c8" "$rest" kserve-http 8
    cell "inline=$inline kserve-grpc c1" "$grpc" kserve-grpc 1
    cell "inline=$inline kserve-http c1" "$rest" kserve-http 1
    # The stacks alone at concurrency 1: what a request costs before any model is involved.
    cell "inline=$inline health-grpc c1" "$grpc" health-grpc 1
    cell "inline=$inline health-live c1" "$rest" health-live 1
    echo "inline=$inline: $(curl -s "http://$rest/metrics" | grep '^tensorport_inline_runs_total')" >&2
    kill "$server"
    wait "$server" || true
    rm -f "$log"
done
taskset -c 0 "$LOADGEN" --protocol floor --model-file "$MODEL" --ort-library "$ORT" \
    --model ranker --input features:16 --concurrency 1 --duration "$DURATION" \
    --warmup "$WARMUP" --format json --label "floor c1"
