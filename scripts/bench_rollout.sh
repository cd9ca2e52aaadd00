#!/usr/bin/env bash
# What payload logging and shadow copies cost the requests clients send: KServe gRPC on the
# example ranker (versions 1 and 2, every request routed to 1 by a `[traffic]` split of
# 100), batch 1, in five cells against the same folder without either:
#
#   logging   `[logging] sample = 1.0`, prediction_log TFRecords, concurrency 8
#   shadow    `[traffic.shadow] target = "2"`, percent 100, concurrency 8 (no headroom: the
#             server's core is saturated, so copies should be dropped, not run)
#   headroom  open loop at a quarter of the plain cell's throughput, with and without the
#             shadow: the primary's p99 while the machine has room for the copies
#
# Server on CPU 0, load generator on CPU 1 (taskset); the cells alternate ROUNDS times. One
# JSON line per cell on stdout (tensorport-loadgen --format json), on stderr the shadow and
# payload-log counters of each server, then a summary of the ratios per round.
#
# Usage: scripts/bench_rollout.sh   (after `make bench-build`; DURATION=S WARMUP=S ROUNDS=N)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve_ports.sh
. scripts/serve_ports.sh
BIN=${BIN:-target/release/tensorport}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
CLIENT_CPU=${CLIENT_CPU:-1}
PYTHON=${PYTHON:-.venv/bin/python}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.jsonl"

folder() { # name extra-config
    mkdir -p "$work/$1/ranker"
    cp -r examples/models/ranker/1 examples/models/ranker/2 "$work/$1/ranker/"
    printf '[version_policy]\nall = true\n\n[traffic]\nsplit = { "1" = 100 }\n%s' "$2" \
        >"$work/$1/ranker/config.toml"
}
folder plain ""
folder logging "$(printf '\n[logging]\npath = "%s"\nsample = 1.0\n' "$work/logs")"
folder shadow "$(printf '\n[traffic.shadow]\ntarget = "2"\npercent = 100\n')"

run() { # label models load-args...
    local label=$1 models=$2 log
    shift 2
    log=$(mktemp)
    ORT_DYLIB_PATH=$ORT taskset -c 0 "$BIN" serve --model-dir "$work/$models" --host 127.0.0.1 \
        --grpc-port 0 --rest-port 0 >"$log" 2>&1 &
    server=$!
    serve_ports "$log"
    taskset -c "$CLIENT_CPU" "$LOADGEN" --target "$grpc" --protocol kserve-grpc "$@" \
        --model ranker --input features:16 --duration "$DURATION" --warmup "$WARMUP" \
        --format json --label "$label" | tee -a "$results"
    echo "$label: $(curl -s "http://$rest/metrics" \
        | grep -E '^tensorport_(shadow_copies_[a-z]+_total|payload_log_records_total)' \
        | tr '\n' ' ')" >&2
    kill "$server"
    wait "$server" || true
    rm -f "$log" "$work"/logs/* 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
    run "plain c8 round $round" plain --concurrency 8
    run "logging c8 round $round" logging --concurrency 8
    run "shadow c8 round $round" shadow --concurrency 8
    rate=$("$PYTHON" -c '
import json, sys
cells = [json.loads(l) for l in open(sys.argv[1])]
print(round(cells[-3]["requests_per_s"] / 4))' "$results")
    run "plain rate round $round" plain --rate "$rate"
    run "shadow rate round $round" shadow --rate "$rate"
done

"$PYTHON" - "$results" >&2 <<'EOF'
import json, re, sys
cells = {}
for line in open(sys.argv[1]):
    cell = json.loads(line)
    name, n = re.fullmatch(r"(.*) round (\d+)", cell["label"]).groups()
    cells[(name, int(n))] = cell
for n in sorted({n for _, n in cells}):
    plain, rate = cells[("plain c8", n)], cells[("plain rate", n)]
    print(f"round {n}: logging/plain throughput "
          f"{cells[('logging c8', n)]['requests_per_s'] / plain['requests_per_s']:.3f}; "
          f"shadow/plain c8 throughput "
          f"{cells[('shadow c8', n)]['requests_per_s'] / plain['requests_per_s']:.3f}, "
          f"p99 {cells[('shadow c8', n)]['p99_us'] / plain['p99_us']:.3f}; "
          f"at {rate['rate']:.0f}/s shadow/plain p99 "
          f"{cells[('shadow rate', n)]['p99_us'] / rate['p99_us']:.3f}")
EOF
