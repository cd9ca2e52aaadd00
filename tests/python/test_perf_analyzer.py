"""Triton's perf_analyzer, a real TF Serving gRPC load client, runs against the server without
errors. `make test` installs it (scripts/setup-perf-analyzer.sh) into .cache/perf_analyzer; set
PERF_ANALYZER to use another copy. This checks that it works, not how fast: figures belong in
benchmarks."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tfs import REPO

PERF_ANALYZER = Path(os.environ.get("PERF_ANALYZER", REPO / ".cache" / "perf_analyzer" / "perf_analyzer"))
THROUGHPUT_RE = re.compile(r"Concurrency: (\d+), throughput: ([\d.]+) infer/sec")


def test_perf_analyzer_tfserving_grpc(server):
    if not PERF_ANALYZER.exists():
        pytest.fail(f"perf_analyzer is not installed at {PERF_ANALYZER}: run `make perf-analyzer`")
    command = [
        str(PERF_ANALYZER),
        "--service-kind", "tfserving",
        "-i", "grpc",
        "-u", server.grpc_target,
        "-m", "ranker",
        "--shape", "features:1,16",
        "--concurrency-range", "1:2",
        "--measurement-interval", "1000",
        "--max-trials", "10",
        # A functional check on a shared, noisy machine: accept any stable-enough window.
        "--stability-percentage", "1000",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    rates = {int(c): float(t) for c, t in THROUGHPUT_RE.findall(output)}
    assert set(rates) == {1, 2}, output
    assert all(rate > 0 for rate in rates.values()), output
    assert "error" not in result.stderr.lower(), output
