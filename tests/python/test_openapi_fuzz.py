"""schemathesis against a live server: generated requests, valid and invalid, on every
documented operation; none may get a 5xx or an answer the document does not describe.

It gets a server of its own, because it registers and unregisters shared-memory regions at
random. The run is bounded (examples per operation and a time budget) and seeded, so a
failure reproduces with the command it prints.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from openapi_spec import SPEC_PATH
from tensorport_server import ServerStartError, link_models, start_server

MAX_EXAMPLES = 20
MAX_TIME_S = 60
SEED = 8501

CHECKS = ",".join([
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    # Invalid requests (wrong types, missing fields) must be refused.
    "negative_data_rejection",
    # Undocumented methods must answer 405 with an Allow header.
    "unsupported_method",
    "missing_required_header",
])
# Not run: positive_data_acceptance, since a request can fit the schema yet not the model (a
# wrong shape or an unknown model name is a correct 400 / 404); and the auth checks, since the
# server has no authentication.

@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    model_dir = link_models(tmp_path_factory.mktemp("fuzz_models"))
    log_path = tmp_path_factory.mktemp("fuzz_server") / "tensorport.log"
    try:
        # schemathesis keeps a pool of keep-alive connections and may reuse one after it sat
        # unused for the whole run; the server closing it at the idle timeout just as a POST
        # goes out reads as a network error (clients do not retry POSTs). Idle connections
        # are the transport tests' subject, not this one's.
        server = start_server(model_dir, log_path,
                              ["--idle-timeout-secs", str(MAX_TIME_S * 10)])
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    yield server
    server.stop()


def test_schemathesis_finds_no_server_error_or_schema_violation(fuzz_server, tmp_path):
    command = [
        str(Path(sys.executable).parent / "schemathesis"), "run", str(SPEC_PATH),
        "--url", fuzz_server.rest_url,
        "--checks", CHECKS,
        "--phases", "examples,coverage,fuzzing",
        "--max-examples", str(MAX_EXAMPLES),
        "--max-time", str(MAX_TIME_S),
        "--seed", str(SEED),
        "--request-timeout", "30",
        "--no-color",
    ]
    # cwd: schemathesis keeps its example database in the working directory.
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=MAX_TIME_S + 120)
    output = run.stdout + run.stderr
    assert fuzz_server.process.poll() is None, f"the server died under schemathesis\n{fuzz_server.log()[-3000:]}"
    assert run.returncode == 0, f"schemathesis failed (exit {run.returncode}):\n{output[-12000:]}"
    # Every selected operation was exercised, and the cases all passed.
    selected = re.search(r"Selected: (\d+)/\d+", output)
    tested = re.search(r"Tested: (\d+)", output)
    cases = re.search(r"(\d+) generated, (\d+) passed", output)
    assert selected and tested and cases, output[-3000:]
    assert int(tested.group(1)) == int(selected.group(1)) >= 30, output[-3000:]
    assert int(cases.group(1)) == int(cases.group(2)) > 0, output[-3000:]
