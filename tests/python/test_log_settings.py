"""Triton's logging extension with tritonclient's own calls, over HTTP and gRPC: both read the
same settings, a change over one is seen over the other, `log_verbose_level` really turns the
server's debug lines on and off while it runs, and what cannot change is refused whole."""

from __future__ import annotations

import time

import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, start_server

LOG_WAIT_S = 60
DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "ISO8601"}


@pytest.fixture()
def server(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log")
    yield server
    server.stop()


def _grpc_settings(client) -> dict:
    answer = client.get_log_settings(as_json=True)["settings"]
    # as_json spells each value as its oneof field: {"bool_param": true}, {"uint32_param": 1}.
    return {name: next(iter(value.values())) for name, value in answer.items()}


def _probe(server, request_id: str) -> None:
    answer = requests.get(f"{server.rest_url}/v2/models/ranker", headers={"x-request-id": request_id},
                          timeout=30)
    assert answer.status_code == 200, answer.text


def _wait_for(server, text: str) -> str:
    deadline = time.monotonic() + LOG_WAIT_S
    while text not in server.log():
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{server.log()}"
        time.sleep(0.05)
    return server.log()


def test_both_protocols_read_one_state_and_report_the_extension(server):
    http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    assert "logging" in http.get_server_metadata()["extensions"]
    assert http.get_log_settings() == DEFAULTS
    assert _grpc_settings(grpc) == DEFAULTS
    http.update_log_settings({"log_verbose_level": 2})
    assert _grpc_settings(grpc)["log_verbose_level"] == 2
    answer = grpc.update_log_settings({"log_verbose_level": 0, "log_warning": False}, as_json=True)
    assert answer["settings"]["log_warning"] == {"bool_param": False}
    assert http.get_log_settings() == {**DEFAULTS, "log_warning": False}


def test_the_verbose_level_turns_debug_lines_on_and_off_at_run_time(server):
    http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    _probe(server, "quiet-before")
    http.update_log_settings({"log_verbose_level": 1})
    _probe(server, "verbose-on")
    _wait_for(server, "verbose-on")
    grpcclient.InferenceServerClient(server.grpc_target).update_log_settings({"log_verbose_level": 0})
    _probe(server, "quiet-again")
    http.update_log_settings({"log_verbose_level": 1})
    _probe(server, "verbose-later")
    # Lines are written in order, so once the last one is there the quiet ones would be too.
    log = _wait_for(server, "verbose-later")
    assert "quiet-before" not in log and "quiet-again" not in log, log


# tritonclient's gRPC client itself refuses a non-integer verbose level before sending it.
@pytest.mark.parametrize("change, named, over_grpc", [
    ({"log_file": "/tmp/elsewhere.log"}, "log_file", True),
    ({"log_format": "default"}, "log_format", True),
    ({"log_verbose_level": "high"}, "log_verbose_level", False),
    ({"log_colour": True}, "log_colour", True),
])
def test_a_change_that_cannot_be_made_is_refused_whole(server, change, named, over_grpc):
    body = {"log_info": False, **change}
    answer = requests.post(f"{server.rest_url}/v2/logging", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["error"], answer.text
    if over_grpc:
        grpc = grpcclient.InferenceServerClient(server.grpc_target)
        with pytest.raises(InferenceServerException) as refused:
            grpc.update_log_settings(body)
        assert "INVALID_ARGUMENT" in str(refused.value.status()) and named in refused.value.message()
    assert requests.get(f"{server.rest_url}/v2/logging", timeout=30).json() == DEFAULTS


@pytest.mark.parametrize("body", [b"[]", b"{\"log_verbose_level\": -1}", b"{\"log_info\": null}",
                                  b"{\"log_verbose_level\": 4294967296}", b"not json"])
def test_malformed_bodies_are_bad_requests(server, body):
    answer = requests.post(f"{server.rest_url}/v2/logging", data=body, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]
