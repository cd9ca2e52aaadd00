# Sourced by the benchmark scripts. `serve_ports LOG` waits until the tensorport server writing
# LOG has loaded its models, then sets `grpc` and `rest` to the addresses it listens on (start
# it with --grpc-port 0 --rest-port 0 and its output in LOG).
serve_ports() {
    for _ in $(seq 600); do
        grep -q "initial load settled" "$1" && break
        sleep 0.1
    done
    grpc=$(grep -o 'listening grpc=[^ ]*' "$1" | head -n 1 | cut -d= -f2)
    rest=$(grep -o 'rest=[^ ]*' "$1" | head -n 1 | cut -d= -f2)
}
