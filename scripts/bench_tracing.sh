#!/usr/bin/env bash
# What tracing costs: KServe gRPC at concurrency 8 on the example ranker, batch 1, against the
# same server untraced (no --trace-config), tracing 1 request in 100 (rate=100, the
# OTEL_TRACES_SAMPLER_ARG=0.01 of the issue) and every request (rate=1), the last two
# exporting over OTLP/HTTP to a live collector (a small Python server on loopback that takes
# every export and answers 200). Server on CPU 0, load generator on CPU 1 (taskset); the
# configurations alternate ROUNDS times, so that a change in the machine's load shows as a
# spread. One JSON line per cell on stdout (tensorport-loadgen --format json, labelled
# "<config> round <n>"), and on stderr the spans each server exported and dropped.
#
# Usage: scripts/bench_tracing.sh   (after `make bench-build`; DURATION=S WARMUP=S ROUNDS=N)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve_ports.sh
. scripts/serve_ports.sh
BIN=${BIN:-target/release/tensorport}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-2}
CLIENT_CPU=${CLIENT_CPU:-1}
PYTHON=${PYTHON:-python3}

collector_log=$(mktemp)
"$PYTHON" -c '
import http.server, sys
class Collector(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
print(f"collector={server.server_address[0]}:{server.server_address[1]}", flush=True)
server.serve_forever()
' >"$collector_log" &
collector_pid=$!
trap 'kill $collector_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q collector= "$collector_log" && break; sleep 0.1; done
collector=$(grep -o 'collector=[^ ]*' "$collector_log" | cut -d= -f2)

traced() { # rate
    echo --trace-config mode=opentelemetry --trace-config level=TIMESTAMPS \
        --trace-config "rate=$1" --trace-config "opentelemetry,url=$collector/v1/traces"
}

run() { # label extra-args...
    local label=$1 log
    shift
    log=$(mktemp)
    # shellcheck disable=SC2068
    ORT_DYLIB_PATH=$ORT taskset -c 0 "$BIN" serve --model-dir examples/models --host 127.0.0.1 \
        --grpc-port 0 --rest-port 0 $@ >"$log" 2>&1 &
    server=$!
    serve_ports "$log"
    taskset -c "$CLIENT_CPU" "$LOADGEN" --target "$grpc" --protocol kserve-grpc --concurrency 8 \
        --model ranker --input features:16 --duration "$DURATION" --warmup "$WARMUP" \
        --format json --label "$label"
    echo "$label: $(curl -s "http://$rest/metrics" | grep -E '^tensorport_trace_spans_(exported|dropped)_total' | tr '\n' ' ')" >&2
    kill "$server"
    wait "$server" || true
    rm -f "$log"
}

for round in $(seq "$ROUNDS"); do
    run "untraced round $round"
    run "rate=100 round $round" $(traced 100)
    run "rate=1 round $round" $(traced 1)
done
