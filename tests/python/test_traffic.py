"""Rolling out a version against the real binary: the `[traffic]` split between two versions
of one model, sticky keys, explicit versions, weights edited while serving, the serving
version in every answer on all four protocols, shadow copies, and score histograms.

Each test starts its own server over a temporary model directory holding the example
ranker's two versions (different weights), polled every second.
"""

from __future__ import annotations

import contextlib
import queue
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import requests
import tritonclient.grpc as triton_grpc
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tensorport_server import read_log, start_server
from tfs import EXAMPLE_MODELS, TEST_MODELS, make_tensor_proto

FEATURES = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float32)
VERSION_HEADER = "x-tensorport-model-version"
TIMEOUT = 10


@dataclass
class Running:
    rest: str
    grpc: str
    log: Path
    models: Path

    def metrics(self) -> str:
        return requests.get(f"{self.rest}/metrics", timeout=TIMEOUT).text

    def metric(self, name: str, **labels: str) -> float:
        """The value of one series (0 when absent)."""
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{"):
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_for(self, what, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting; server log:\n{read_log(self.log)[-4000:]}")


def ranker_folder(models: Path, config: str, versions=(1, 2)) -> Path:
    folder = models / "ranker"
    folder.mkdir(parents=True)
    for version in versions:
        shutil.copytree(EXAMPLE_MODELS / "ranker" / str(version), folder / str(version))
    (folder / "config.toml").write_text(config)
    return folder


@contextlib.contextmanager
def serving(models: Path, *extra: str):
    server = start_server(models, models.parent / "server.log", ["--model-poll-secs", "1", *extra])
    try:
        yield Running(rest=server.rest_url, grpc=server.grpc_target, log=server.log_path, models=models)
    finally:
        server.stop()


def triton_inputs():
    tensor = triton_grpc.InferInput("features", list(FEATURES.shape), "FP32")
    tensor.set_data_from_numpy(FEATURES)
    return [tensor]


def grpc_version(client: triton_grpc.InferenceServerClient, version: str = "", headers=None) -> str:
    result = client.infer("ranker", triton_inputs(), model_version=version, headers=headers)
    return result.get_response().model_version


def http_infer(server: Running, version: str = "", headers=None) -> requests.Response:
    path = f"/v2/models/ranker/versions/{version}/infer" if version else "/v2/models/ranker/infer"
    body = {"inputs": [{"name": "features", "shape": list(FEATURES.shape), "datatype": "FP32",
                        "data": FEATURES.flatten().tolist()}]}
    response = requests.post(server.rest + path, json=body, headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response


SPLIT_90_10 = """
[version_policy]
all = true

[version_labels]
stable = 1
canary = 2

[traffic]
split = { "1" = 90, "2" = 10 }
sticky_header = "x-user-id"
"""


def test_ten_thousand_requests_follow_the_split(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10)
    with serving(models) as server:
        def worker(count: int) -> list[str]:
            client = triton_grpc.InferenceServerClient(server.grpc)
            try:
                return [grpc_version(client) for _ in range(count)]
            finally:
                client.close()

        with ThreadPoolExecutor(8) as pool:
            versions = [v for batch in pool.map(worker, [1250] * 8) for v in batch]
        assert len(versions) == 10_000
        assert set(versions) == {"1", "2"}
        share = versions.count("2") / len(versions)
        assert 0.08 <= share <= 0.12, share
        # The statistics count what the split routed, per version.
        routed = {v: server.metric("tensorport_traffic_split_requests_total", model="ranker", version=v)
                  for v in ("1", "2")}
        assert routed["1"] + routed["2"] == 10_000
        assert routed["2"] == versions.count("2")
        assert server.metric("tensorport_traffic_split_weight", model="ranker", target="1") == 90


def test_a_sticky_key_always_gets_the_same_version(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10)
    with serving(models) as server:
        client = triton_grpc.InferenceServerClient(server.grpc)
        chosen: dict[str, str] = {}
        try:
            for user in range(200):
                key = f"user-{user}"
                seen = {grpc_version(client, headers={"x-user-id": key}) for _ in range(3)}
                seen |= {http_infer(server, headers={"X-User-Id": key}).json()["model_version"]
                         for _ in range(3)}
                assert len(seen) == 1, (key, seen)
                chosen[key] = seen.pop()
        finally:
            client.close()
        # Keys spread over both versions, roughly as weighted.
        assert set(chosen.values()) == {"1", "2"}
        # An explicit version wins over the sticky key.
        on_one = next(key for key, version in chosen.items() if version == "1")
        assert http_infer(server, "2", headers={"x-user-id": on_one}).json()["model_version"] == "2"


def stream_versions(server: Running, key: str, n: int) -> list[str]:
    """The versions that served `n` messages of one ModelStreamInfer stream opened with the
    sticky header `key`."""
    answers: queue.Queue = queue.Queue()
    client = triton_grpc.InferenceServerClient(server.grpc)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)),
                            headers={"x-user-id": key})
        for _ in range(n):
            client.async_stream_infer("ranker", triton_inputs())
        versions = []
        for _ in range(n):
            result, error = answers.get(timeout=TIMEOUT)
            assert error is None, error
            versions.append(result.get_response().model_version)
        client.stop_stream()
        return versions
    finally:
        client.close()


def test_a_streams_sticky_key_holds_for_each_message(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10)
    with serving(models) as server:
        client = triton_grpc.InferenceServerClient(server.grpc)
        try:
            chosen = {f"user-{u}": grpc_version(client, headers={"x-user-id": f"user-{u}"})
                      for u in range(60)}
        finally:
            client.close()
        # Both versions are some user's, so a stream that ignored the key would show it.
        assert set(chosen.values()) == {"1", "2"}
        for key, version in chosen.items():
            assert set(stream_versions(server, key, 4)) == {version}, key


def test_an_explicit_version_or_label_bypasses_the_split(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10.replace('split = { "1" = 90, "2" = 10 }', 'split = { stable = 100 }'))
    with serving(models) as server:
        client = triton_grpc.InferenceServerClient(server.grpc)
        try:
            assert {grpc_version(client) for _ in range(50)} == {"1"}
            assert {grpc_version(client, "2") for _ in range(50)} == {"2"}
            assert {grpc_version(client, "canary") for _ in range(50)} == {"2"}
        finally:
            client.close()
        assert {http_infer(server, "2").json()["model_version"] for _ in range(20)} == {"2"}


def test_every_protocol_names_the_serving_version(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10.replace('{ "1" = 90, "2" = 10 }', '{ "2" = 1 }'))
    with serving(models) as server:
        # KServe HTTP: the body's model_version and the header, with and without a version.
        for version, expected in (("", "2"), ("1", "1")):
            response = http_infer(server, version)
            assert response.json()["model_version"] == expected
            assert response.headers[VERSION_HEADER] == expected

        channel = grpc.insecure_channel(server.grpc)
        try:
            # KServe gRPC: the body's model_version and the initial metadata.
            kserve = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for version, expected in (("", "2"), ("1", "1")):
                request = service_pb2.ModelInferRequest(model_name="ranker", model_version=version)
                tensor = request.inputs.add(name="features", datatype="FP32", shape=list(FEATURES.shape))
                tensor.contents.fp32_contents.extend(FEATURES.flatten().tolist())
                answer, call = kserve.ModelInfer.with_call(request, timeout=TIMEOUT)
                assert answer.model_version == expected
                assert dict(call.initial_metadata())[VERSION_HEADER] == expected

            # TF Serving gRPC: model_spec.version and the initial metadata.
            tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for version, expected in ((None, 2), (1, 1)):
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "ranker"
                if version is not None:
                    request.model_spec.version.value = version
                request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
                answer, call = tfs.Predict.with_call(request, timeout=TIMEOUT)
                assert answer.model_spec.version.value == expected
                assert dict(call.initial_metadata())[VERSION_HEADER] == str(expected)
        finally:
            channel.close()

        # TF Serving REST: predict's body has no version field; the header says it.
        for path, expected in (("", "2"), ("/versions/1", "1"), ("/labels/stable", "1")):
            response = requests.post(f"{server.rest}/v1/models/ranker{path}:predict",
                                     json={"instances": FEATURES.tolist()}, timeout=TIMEOUT)
            assert response.status_code == 200, response.text
            assert response.headers[VERSION_HEADER] == expected


def test_edited_weights_apply_on_the_poll_without_a_failed_request(tmp_path):
    models = tmp_path / "models"
    folder = ranker_folder(models, SPLIT_90_10.replace('{ "1" = 90, "2" = 10 }', '{ "1" = 100, "2" = 0 }'))
    with serving(models) as server:
        failures: list[str] = []
        seen: list[str] = []
        stop = threading.Event()

        def load():
            session = requests.Session()
            body = {"inputs": [{"name": "features", "shape": list(FEATURES.shape), "datatype": "FP32",
                                "data": FEATURES.flatten().tolist()}]}
            while not stop.is_set():
                try:
                    response = session.post(f"{server.rest}/v2/models/ranker/infer", json=body, timeout=TIMEOUT)
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text}")
                    else:
                        seen.append(response.json()["model_version"])
                except requests.RequestException as err:
                    failures.append(repr(err))

        clients = [threading.Thread(target=load) for _ in range(2)]
        for client in clients:
            client.start()
        try:
            server.wait_for(lambda: len(seen) >= 20)
            assert set(seen) == {"1"}
            loads = server.metric("tensorport_model_loads_total", model="ranker")
            (folder / "config.toml").write_text(
                SPLIT_90_10.replace('{ "1" = 90, "2" = 10 }', '{ "1" = 0, "2" = 100 }'))
            server.wait_for(lambda: server.metric("tensorport_traffic_split_weight",
                                                  model="ranker", target="2") == 100)
            mark = len(seen)
            server.wait_for(lambda: len(seen) >= mark + 20)
        finally:
            stop.set()
            for client in clients:
                client.join()
        assert failures == []
        # Requests sent after the new weights were published all went to version 2 (one in
        # flight per client may have been routed just before).
        assert set(seen[mark + 2:]) == {"2"}
        # A weight change reloads no version.
        assert server.metric("tensorport_model_loads_total", model="ranker") == loads == 2


SHADOW = """
[version_policy]
all = true

[traffic]
split = { "1" = 100 }

[traffic.shadow]
target = "2"
percent = 100

[metrics]
score_histograms = ["score"]
"""


def test_shadow_copies_are_counted_and_compared(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SHADOW)
    with serving(models) as server:
        client = triton_grpc.InferenceServerClient(server.grpc)
        try:
            versions = {grpc_version(client) for _ in range(30)}
        finally:
            client.close()
        assert versions == {"1"}

        def settled() -> bool:
            sent = server.metric("tensorport_shadow_copies_sent_total", model="ranker")
            dropped = sum(server.metric("tensorport_shadow_copies_dropped_total", model="ranker", reason=r)
                          for r in ("queue_full", "busy", "near_limit", "shared_memory_input",
                                    "target_unavailable", "memory"))
            return sent + dropped == 30

        server.wait_for(settled)
        sent = server.metric("tensorport_shadow_copies_sent_total", model="ranker")
        assert sent >= 1
        assert server.metric("tensorport_shadow_copies_failed_total", model="ranker") == 0
        # One difference per compared output, and the two versions' weights differ.
        compared = server.metric("tensorport_shadow_max_abs_difference_count", model="ranker", output="score")
        assert compared == sent
        assert server.metric("tensorport_shadow_max_abs_difference_sum", model="ranker", output="score") > 0

        # Score histograms: one observation per row of the answers the clients got, on the
        # version that served them; the copies are not scores of anyone's answer.
        rows = server.metric("tensorport_model_output_score_count", model="ranker", version="1", output="score")
        assert rows == 30 * FEATURES.shape[0]
        assert server.metric("tensorport_model_output_score_count", model="ranker", version="2",
                             output="score") == 0


def test_a_failing_shadow_target_fails_no_primary(tmp_path):
    models = tmp_path / "models"
    folder = ranker_folder(models, SHADOW, versions=(1,))
    # Version 2 takes another input: every copy fails validation on it.
    shutil.copytree(TEST_MODELS / "echo_float32" / "1", folder / "2")
    with serving(models) as server:
        for _ in range(10):
            assert http_infer(server).json()["model_version"] == "1"

        def settled() -> bool:
            failed = server.metric("tensorport_shadow_copies_failed_total", model="ranker")
            dropped = server.metric("tensorport_shadow_copies_dropped_total", model="ranker", reason="busy")
            return failed + dropped == 10

        server.wait_for(settled)
        assert server.metric("tensorport_shadow_copies_failed_total", model="ranker") >= 1


def test_statistics_report_the_split_as_it_happened(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SPLIT_90_10)
    with serving(models) as server:
        for _ in range(200):
            http_infer(server)
        http_infer(server, version="2")  # named: not the split's
        stats = requests.get(f"{server.rest}/v2/models/ranker/stats", timeout=TIMEOUT).json()["model_stats"]
        split = {entry["version"]: entry["traffic_split"] for entry in stats}
        assert set(split) == {"1", "2"}
        assert split["1"]["requests"] + split["2"]["requests"] == 200
        assert split["1"]["weight"] == 0.9 and split["2"]["weight"] == 0.1
        assert abs(split["1"]["share"] + split["2"]["share"] - 1.0) < 1e-9
        assert split["2"]["share"] == split["2"]["requests"] / 200
        # tritonclient reads the same answer (the extra key is beside Triton's own).
        import tritonclient.http as triton_http
        client = triton_http.InferenceServerClient(server.rest.removeprefix("http://"))
        try:
            figures = client.get_inference_statistics("ranker")["model_stats"]
        finally:
            client.close()
        assert sum(entry["inference_count"] for entry in figures) == 201 * FEATURES.shape[0]


def test_the_rollout_dashboard_queries_only_exported_metrics(tmp_path):
    import json
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards"
                            / "rollout.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    referenced = set().union(*(set(re.findall(r"\b(tensorport_[a-z0-9_]+)", q)) for q in queries))
    models = tmp_path / "models"
    ranker_folder(models, SHADOW)
    with serving(models) as server:
        for _ in range(20):
            http_infer(server)
        server.wait_for(lambda: server.metric("tensorport_shadow_copies_sent_total", model="ranker")
                        + server.metric("tensorport_shadow_copies_dropped_total", model="ranker") > 0)
        exported = set()
        for line in server.metrics().splitlines():
            if line.startswith("# TYPE "):
                name, kind = line.split()[2:4]
                suffixes = {"counter": ["", "_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
                exported |= {name + suffix for suffix in suffixes}
        # A shadow's counters exist from the start, failures included, so its rates show at once.
        assert server.metric("tensorport_shadow_copies_failed_total", model="ranker") == 0
        assert 'tensorport_shadow_copies_failed_total{model="ranker"} 0' in server.metrics()
    unknown = referenced - exported
    assert not unknown, f"the rollout dashboard queries metrics the server does not export: {sorted(unknown)}"


SHADOW_ON_LABEL = """
[version_policy]
all = true

[version_labels]
stable = 1
canary = 2

[traffic]
split = { stable = 100 }

[traffic.shadow]
target = "canary"
percent = 100
"""


def test_requests_the_shadow_label_serves_get_no_copy(tmp_path):
    models = tmp_path / "models"
    ranker_folder(models, SHADOW_ON_LABEL)
    with serving(models) as server:
        def copies() -> float:
            return server.metric("tensorport_shadow_copies_sent_total", model="ranker") + sum(
                server.metric("tensorport_shadow_copies_dropped_total", model="ranker", reason=r)
                for r in ("queue_full", "busy", "near_limit", "shared_memory_input", "target_unavailable", "memory"))

        # Version 2 is the label's version: comparing it with itself would say nothing.
        for _ in range(10):
            assert http_infer(server, version="2").json()["model_version"] == "2"
        for _ in range(10):
            assert http_infer(server).json()["model_version"] == "1"
        server.wait_for(lambda: copies() >= 10)
        # One more after the rest: once its copy is counted, any copy of the first ten would be.
        http_infer(server)
        server.wait_for(lambda: copies() >= 11)
        assert copies() == 11
