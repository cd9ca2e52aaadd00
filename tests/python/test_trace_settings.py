"""Triton's trace extension with tritonclient's own calls, over HTTP and gRPC: both read and
change one state; the server started in OpenTelemetry mode reports the rate its command line
gave and still takes changes (Triton refuses them in that mode); a model's own settings
override the server's and clear back to them with null; what cannot change is refused whole."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, start_server


@pytest.fixture()
def server(tmp_path):
    # No collector listens on the URL: its spans are dropped, requests do not notice.
    args = ["--trace-config", "mode=opentelemetry", "--trace-config", "rate=25",
            "--trace-config", "opentelemetry,url=127.0.0.1:9/v1/traces"]
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log", extra_args=args)
    yield server
    server.stop()


def _clients(server):
    http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    return http, grpc


def _grpc_settings(client, model_name=None) -> dict:
    answer = client.get_trace_settings(model_name=model_name, as_json=True)["settings"]
    return {name: value.get("value", []) for name, value in answer.items()}


def test_both_protocols_read_one_state_started_from_the_command_line(server):
    http, grpc = _clients(server)
    assert "trace" in http.get_server_metadata()["extensions"]
    settings = http.get_trace_settings()
    assert settings["trace_rate"] == "25"
    assert settings["trace_level"] == ["OFF"]
    assert settings["trace_mode"] == "opentelemetry"
    assert settings["trace_count"] == "-1"
    assert _grpc_settings(grpc)["trace_rate"] == ["25"]


def test_a_change_over_one_protocol_is_seen_over_the_other(server):
    http, grpc = _clients(server)
    answer = http.update_trace_settings(settings={"trace_rate": "4", "trace_level": ["TIMESTAMPS"]})
    assert answer["trace_rate"] == "4"
    assert _grpc_settings(grpc)["trace_level"] == ["TIMESTAMPS"]
    grpc.update_trace_settings(settings={"trace_rate": "9", "trace_count": "100"})
    settings = http.get_trace_settings()
    assert settings["trace_rate"] == "9" and settings["trace_count"] == "100"
    # Cleared: back to what the command line gave.
    http.update_trace_settings(settings={"trace_rate": None})
    assert _grpc_settings(grpc)["trace_rate"] == ["25"]


def test_a_model_overrides_the_server_and_clears_back_to_it(server):
    http, grpc = _clients(server)
    grpc.update_trace_settings(model_name="ranker", settings={"trace_rate": "1",
                                                              "trace_level": ["TIMESTAMPS"]})
    own = http.get_trace_settings(model_name="ranker")
    assert own["trace_rate"] == "1" and own["trace_level"] == ["TIMESTAMPS"]
    assert http.get_trace_settings()["trace_rate"] == "25"
    # Requests of a traced model are still answered with nobody collecting.
    inputs = httpclient.InferInput("features", [1, 16], "FP32")
    inputs.set_data_from_numpy(np.full((1, 16), 0.5, dtype=np.float32))
    for _ in range(5):
        http.infer("ranker", [inputs])
    grpc.update_trace_settings(model_name="ranker", settings={"trace_rate": None})
    assert _grpc_settings(grpc, "ranker")["trace_rate"] == ["25"]
    assert http.get_trace_settings(model_name="ranker")["trace_level"] == ["TIMESTAMPS"]
    http.update_trace_settings(model_name="ranker", settings={"trace_level": None})
    assert http.get_trace_settings(model_name="ranker")["trace_level"] == ["OFF"]


@pytest.mark.parametrize("change, named", [
    ({"trace_level": ["LOUD"]}, "trace_level"),
    ({"trace_rate": "often"}, "trace_rate"),
    ({"trace_mode": "triton"}, "trace_mode"),
    ({"trace_file": "/tmp/trace.json"}, "trace_file"),
    ({"trace_colour": "red"}, "trace_colour"),
])
@pytest.mark.parametrize("over_grpc", [False, True])
def test_what_cannot_change_is_refused_whole(server, change, named, over_grpc):
    http, grpc = _clients(server)
    client = grpc if over_grpc else http
    with pytest.raises(InferenceServerException) as refused:
        client.update_trace_settings(settings={"trace_rate": "2", **change})
    assert named in str(refused.value)
    assert http.get_trace_settings()["trace_rate"] == "25"
