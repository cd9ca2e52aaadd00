#!/usr/bin/env python3
"""What a client inventing a new API key for every request costs the server, and whether it
escapes the rate limit: one server with `--rate-limit-key-header x-api-key` and a keys file
listing one key, then --requests (default 300,000) requests from loopback, each with a key
never seen before. Samples the server's VmRSS before, right after, and after the limiter's
pruning interval; counts how many requests the limit let through. Prints a Markdown table for
docs/BENCHMARKS.md.

    .venv/bin/python scripts/rate_limit_keys_rss.py [--bin target/release/tensorport]

The binary defaults to $TENSORPORT_BIN, else cargo's target/debug/tensorport.
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import tensorport_server  # noqa: E402

PATH = "/v2/models/echo_float32"
RATE_PER_SEC = 100
PRUNE_WAIT_S = 25  # the limiter prunes idle buckets every 10 s; two rounds and some slack


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def send(host: str, port: int, first: int, count: int, tally: Counter, lock: threading.Lock):
    connection = http.client.HTTPConnection(host, port, timeout=30)
    local: Counter = Counter()
    for n in range(first, first + count):
        connection.request("GET", PATH, headers={"x-api-key": f"invented-{n:09d}"})
        response = connection.getresponse()
        response.read()
        local[response.status] += 1
    connection.close()
    with lock:
        tally.update(local)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="server binary")
    parser.add_argument("--requests", type=int, default=300_000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if args.bin:
        os.environ["TENSORPORT_BIN"] = args.bin

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        keys = workdir / "keys.txt"
        keys.write_text("# the one key this server knows\nlisted-key\n")
        models = Path(__file__).resolve().parents[1] / "tests" / "models"
        server = tensorport_server.start_server(models, workdir / "server.log", [
            "--rate-limit-per-sec", str(RATE_PER_SEC),
            "--rate-limit-burst", str(RATE_PER_SEC),
            "--rate-limit-key-header", "x-api-key",
            "--rate-limit-keys-file", str(keys),
        ])
        try:
            pid = server.process.pid
            url = urlsplit(server.rest_url)
            host, port = url.hostname or "127.0.0.1", url.port or 80
            tally: Counter = Counter()
            lock = threading.Lock()
            send(host, port, 0, 1000, Counter(), lock)  # warm-up: connections, allocator
            time.sleep(2)
            before = vm_rss(pid)
            started = time.monotonic()
            per_client = args.requests // args.clients
            workers = [threading.Thread(target=send,
                                        args=(host, port, 1000 + i * per_client, per_client,
                                              tally, lock))
                       for i in range(args.clients)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            elapsed = time.monotonic() - started
            right_after = vm_rss(pid)
            time.sleep(PRUNE_WAIT_S)
            later = vm_rss(pid)
        finally:
            server.stop()

    sent = per_client * args.clients
    allowed = tally[200]
    mib = 1 << 20
    print(f"{sent} requests, each with a new key, in {elapsed:.0f} s "
          f"(rate limit {RATE_PER_SEC}/s, burst {RATE_PER_SEC}, one client address)\n")
    print("| figure | value |")
    print("| --- | ---: |")
    print(f"| answered 200 | {allowed} |")
    print(f"| answered 429 | {tally[429]} |")
    print(f"| other answers | {sent - allowed - tally[429]} |")
    print(f"| at most allowed by the address's budget (burst + rate x time) | "
          f"{RATE_PER_SEC + math.ceil(RATE_PER_SEC * elapsed)} |")
    print(f"| VmRSS before | {before / mib:.1f} MiB |")
    print(f"| VmRSS right after | {right_after / mib:.1f} MiB ({(right_after - before) / mib:+.1f}) |")
    print(f"| VmRSS {PRUNE_WAIT_S} s later | {later / mib:.1f} MiB ({(later - before) / mib:+.1f}) |")
    escaped = allowed > RATE_PER_SEC + RATE_PER_SEC * elapsed
    grew = later - before > 10 * mib
    return 1 if escaped or grew else 0


if __name__ == "__main__":
    sys.exit(main())
