"""Triton's and TF Serving's metric names, scraped the way their dashboards scrape them.

- Triton's `nv_inference_*` families on the metrics port, moving with real inferences sent by
  tritonclient (HTTP).
- TF Serving's `:tensorflow:serving:*` families at the path a real `--monitoring_config_file`
  names, with the command line the project that wrote the file runs (the files and their
  sources are in tests/migration/tfserving-monitoring/SOURCES.md).
- `--peer-metric-names=false` leaves only tensorport's own names.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, REPO, server_binary, start_server

MONITORING = REPO / "tests" / "migration" / "tfserving-monitoring"
METRICS_RE = re.compile(r"listening grpc=\S+ rest=\S+ metrics=(\S+)")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
TF_SERVING_PATH = "/monitoring/prometheus/metrics"
TIMEOUT = 10


def samples(text: str, name: str) -> dict[str, float]:
    """{label text without braces: value} for each sample named `name`."""
    found = {}
    for line in text.splitlines():
        match = SAMPLE_RE.match(line)
        if match and match.group(1) == name:
            found[(match.group(2) or "{}")[1:-1]] = float(match.group(3))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metrics_address(server) -> str:
    found = METRICS_RE.search(server.log())
    assert found, server.log()
    return found.group(1)


def infer_ranker(client, rows: int) -> None:
    features = httpclient.InferInput("features", [rows, 16], "FP32")
    features.set_data_from_numpy(np.ones((rows, 16), dtype=np.float32))
    result = client.infer("ranker", [features])
    assert result.as_numpy("score").shape == (rows, 1)


@pytest.fixture
def served(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "log", ["--metrics-port", "0"])
    yield server
    server.stop()


def test_tritons_names_move_with_real_inferences(served):
    client = httpclient.InferenceServerClient(served.rest_url.removeprefix("http://"))
    scrape_url = f"http://{metrics_address(served)}/metrics"
    before = requests.get(scrape_url, timeout=TIMEOUT).text
    # Every serving version has its series from the start, at 0.
    assert samples(before, "nv_inference_request_success")['model="ranker",version="2"'] == 0
    assert samples(before, "nv_inference_count")['model="two_tower",version="1"'] == 0
    infer_ranker(client, 3)
    infer_ranker(client, 5)
    wrong = httpclient.InferInput("features", [1, 4], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException):
        client.infer("ranker", [wrong])

    text = requests.get(scrape_url, timeout=TIMEOUT).text
    ranker = 'model="ranker",version="2"'
    assert samples(text, "nv_inference_request_success")[ranker] == 2
    assert samples(text, "nv_inference_count")[ranker] == 8
    # Without batching each request is one execution.
    assert samples(text, "nv_inference_exec_count")[ranker] == 2
    assert samples(text, "nv_inference_pending_request_count")[ranker] == 0
    failures = samples(text, "nv_inference_request_failure")
    assert failures['model="ranker",reason="OTHER",version="2"'] == 1
    assert failures['model="ranker",reason="REJECTED",version="2"'] == 0
    for family in ("nv_inference_request_duration_us", "nv_inference_compute_infer_duration_us"):
        assert samples(text, family)[ranker] > 0, family
    for family in ("nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
                   "nv_inference_compute_output_duration_us"):
        assert ranker in samples(text, family), family
    assert "# TYPE nv_inference_request_success counter" in text
    # The request took at least as long as its time in the runtime.
    assert (samples(text, "nv_inference_request_duration_us")[ranker]
            >= samples(text, "nv_inference_compute_infer_duration_us")[ranker])


def test_the_peers_names_parse_and_only_they_break_promtools_style_rules(served):
    client = httpclient.InferenceServerClient(served.rest_url.removeprefix("http://"))
    infer_ranker(client, 2)
    requests.post(f"{served.rest_url}/v1/models/ranker:predict",
                  json={"instances": [[0.0] * 16]}, timeout=TIMEOUT).raise_for_status()
    text = requests.get(f"{served.rest_url}/metrics", timeout=TIMEOUT).text
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=60)
    # 0: clean; 3: style problems only (a parse error is 1).
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr
    problems = [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]
    assert all(p.startswith(("nv_", ":tensorflow:")) for p in problems), problems


def test_openmetrics_scrapes_keep_the_peers_sample_names(served):
    client = httpclient.InferenceServerClient(served.rest_url.removeprefix("http://"))
    infer_ranker(client, 1)
    scrape = requests.get(f"http://{metrics_address(served)}/metrics", timeout=TIMEOUT,
                          headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert scrape.headers["content-type"].startswith("application/openmetrics-text")
    assert scrape.text.endswith("# EOF\n") and scrape.text.count("# EOF") == 1
    assert "# TYPE nv_inference_count unknown" in scrape.text
    assert samples(scrape.text, "nv_inference_count")['model="ranker",version="2"'] == 1


def test_peer_metric_names_false_leaves_only_tensorports(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "log", ["--peer-metric-names=false"])
    try:
        text = requests.get(f"{server.rest_url}/metrics", timeout=TIMEOUT).text
        assert "tensorport_build_info" in text and "tensorport_model_ready" in text
        assert "nv_inference" not in text and ":tensorflow:serving" not in text
    finally:
        server.stop()


def tf_serving(tmp_path, monitoring: Path):
    """TF Serving's Docker line as the projects run it, on free ports."""
    rest_port = free_port()
    line = [f"--port={free_port()}", f"--rest_api_port={rest_port}", "--model_name=ranker",
            "--model_base_path=" + str(EXAMPLE_MODELS / "ranker"),
            f"--monitoring_config_file={monitoring}"]
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tensorflow_model_server"])
    return server, f"http://127.0.0.1:{rest_port}"


@pytest.mark.parametrize("config", ["chicago-taxi-mlops.prometheus.config",
                                    "diabetes-mlops.prometheus.config",
                                    "serving-app.monitoring_config.txt"])
def test_tf_servings_families_at_the_path_a_real_monitoring_config_names(tmp_path, config):
    server, rest = tf_serving(tmp_path, MONITORING / config)
    try:
        assert "--monitoring_config_file" not in server.log()
        for _ in range(2):
            predict = requests.post(f"{rest}/v1/models/ranker:predict",
                                    json={"instances": [[0.5] * 16]}, timeout=TIMEOUT)
            assert predict.status_code == 200, predict.text
        missing = requests.post(f"{rest}/v1/models/nope:predict",
                                json={"instances": [[0.5] * 16]}, timeout=TIMEOUT)
        assert missing.status_code == 404
        bad = requests.post(f"{rest}/v1/models/ranker:predict",
                            json={"instances": [[0.5] * 3]}, timeout=TIMEOUT)
        assert bad.status_code == 400

        scrape = requests.get(rest + TF_SERVING_PATH, timeout=TIMEOUT)
        assert scrape.status_code == 200
        text = scrape.text
        counts = samples(text, ":tensorflow:serving:request_count")
        assert counts['model_name="ranker",status="OK"'] == 2
        assert counts['model_name="ranker",status="INVALID_ARGUMENT"'] == 1
        # A model that does not exist names no series.
        assert not any("nope" in labels for labels in counts)
        latency = 'model_name="ranker",entrypoint="REST"'
        assert samples(text, ":tensorflow:serving:request_latency_count")[latency] == 3
        assert samples(text, ":tensorflow:serving:request_latency_bucket")[latency + ',le="+Inf"'] == 3
        assert samples(text, ":tensorflow:serving:request_latency_sum")[latency] > 0
        assert samples(text, ":tensorflow:serving:runtime_latency_count")['model_name="ranker"'] == 2
        # The same exposition: tensorport's own names and Triton's are there too.
        assert "tensorport_requests_total" in text and "nv_inference_count" in text
    finally:
        server.stop()


def test_a_monitoring_config_moves_or_turns_off_tf_servings_path(tmp_path):
    moved = tmp_path / "moved.config"
    moved.write_text('prometheus_config { enable: true path: "/my/metrics" }\n')
    server, rest = tf_serving(tmp_path, moved)
    try:
        assert requests.get(rest + "/my/metrics", timeout=TIMEOUT).status_code == 200
        assert ":tensorflow:serving:request_count" in requests.get(rest + "/my/metrics",
                                                                   timeout=TIMEOUT).text
        assert requests.get(rest + TF_SERVING_PATH, timeout=TIMEOUT).status_code == 404
        assert requests.get(rest + "/metrics", timeout=TIMEOUT).status_code == 200
    finally:
        server.stop()
    off = tmp_path / "off.config"
    off.write_text("prometheus_config { enable: false }\n")
    (tmp_path / "second").mkdir()
    server, rest = tf_serving(tmp_path / "second", off)
    try:
        assert requests.get(rest + TF_SERVING_PATH, timeout=TIMEOUT).status_code == 404
        assert requests.get(rest + "/metrics", timeout=TIMEOUT).status_code == 200
    finally:
        server.stop()


def test_a_monitoring_config_tf_serving_cannot_parse_stops_the_start(tmp_path):
    config = MONITORING / "heart-mlops.prometheus.config"
    cmd = [str(server_binary()), "tensorflow_model_server", f"--port={free_port()}",
           f"--rest_api_port={free_port()}", "--model_name=ranker",
           "--model_base_path=" + str(EXAMPLE_MODELS / "ranker"),
           f"--monitoring_config_file={config}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert str(config) in done.stderr and "monitoring_config" in done.stderr, done.stderr
