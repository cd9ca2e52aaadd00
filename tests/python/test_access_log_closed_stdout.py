"""The access log when stdout stops taking lines: a pipe whose reader has gone (EPIPE on every
write). Requests are unaffected, and the lines lost are said and counted in the diagnostic
log (stderr), as those dropped when stdout is slow are."""

from __future__ import annotations

import re

import requests

from tensorport_server import read_log, start_server
from test_payload_log import ranker_models, wait_for

TIMEOUT = 10


def test_lines_refused_by_a_closed_stdout_are_counted_and_requests_succeed(tmp_path):
    models = ranker_models(tmp_path, "")
    # The server's stdout is a pipe whose reader has already exited: bash makes the pipe for a
    # process substitution that runs `:`, waits for it to end, then execs the server (a
    # prefix, not a `preexec_fn`, so no Python runs in the forked child; see start_server).
    stdout_to_a_gone_reader = ["bash", "-c", 'exec 1> >(:); wait $!; exec "$@"', "bash"]
    server = start_server(models, tmp_path / "server.log", ["--access-log", "text"],
                          prefix=stdout_to_a_gone_reader)
    try:
        body = {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                            "data": [0.5] * 16}]}
        for _ in range(5):
            answer = requests.post(f"{server.rest_url}/v2/models/ranker/infer", json=body,
                                   timeout=TIMEOUT)
            assert answer.status_code == 200, answer.text

        def said():
            log = read_log(server.log_path)
            return re.search(r"access log lines dropped: stdout cannot be written: .* dropped=1\b", log)

        wait_for(said, server.log_path)
        assert requests.get(f"{server.rest_url}/v2/health/ready", timeout=TIMEOUT).status_code == 200
    finally:
        server.stop()
