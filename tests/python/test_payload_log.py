"""Payload logging against the real binary: `[logging]` in config.toml (TFRecord files of
TF Serving's PredictionLog, or KServe v2 JSON lines) and models.config's `logging_config`,
over all four protocols; sampling, an unwritable directory and refused settings.

Each test starts its own server over a temporary model directory holding the example
ranker. The files are read the way TensorFlow reads TFRecords: each frame's two masked
CRC-32C checksums are checked by an implementation written here.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2, prediction_service_pb2_grpc

from tensorport_server import read_log, start_server
from tfs import EXAMPLE_MODELS, make_ndarray, make_tensor_proto

TIMEOUT = 10


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_matches_the_known_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def read_tfrecords(path: Path) -> list[bytes]:
    data = path.read_bytes()
    records, at = [], 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert length_crc == masked(header), f"{path}: bad length checksum at {at}"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked(body), f"{path}: bad data checksum at {at}"
        records.append(body)
        at += 16 + length
    return records


def ranker_models(tmp_path: Path, config: str) -> Path:
    models = tmp_path / "models"
    folder = models / "ranker"
    folder.mkdir(parents=True)
    shutil.copytree(EXAMPLE_MODELS / "ranker" / "1", folder / "1")
    (folder / "config.toml").write_text(config)
    return models


def features(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 16)).astype(np.float32)


class Sender:
    """One request per protocol in turn; remembers what each sent and got back."""

    def __init__(self, server):
        self.server = server
        self.sent: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        meta = requests.get(f"{server.rest_url}/v2/models/ranker", timeout=TIMEOUT).json()
        self.outputs = [o["name"] for o in meta["outputs"]]
        self.channel = grpc.insecure_channel(server.grpc_target)

    def close(self):
        self.channel.close()

    def send(self, n: int):
        http = triton_http.InferenceServerClient(self.server.rest_url.removeprefix("http://"))
        grpc_client = triton_grpc.InferenceServerClient(self.server.grpc_target)
        tfs = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        for i in range(n):
            x = features(len(self.sent) + 1)
            kind = i % 4
            if kind == 0:
                tensor = triton_http.InferInput("features", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                result = http.infer("ranker", [tensor])
                got = {name: result.as_numpy(name) for name in self.outputs}
            elif kind == 1:
                tensor = triton_grpc.InferInput("features", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                result = grpc_client.infer("ranker", [tensor])
                got = {name: result.as_numpy(name) for name in self.outputs}
            elif kind == 2:
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "ranker"
                request.inputs["features"].CopyFrom(make_tensor_proto(x))
                answer = tfs.Predict(request, timeout=TIMEOUT)
                got = {name: make_ndarray(answer.outputs[name]) for name in self.outputs}
            else:
                response = requests.post(f"{self.server.rest_url}/v1/models/ranker:predict",
                                         json={"inputs": {"features": x.tolist()}}, timeout=TIMEOUT)
                assert response.status_code == 200, response.text
                body = response.json()["outputs"]
                if not isinstance(body, dict):
                    body = {self.outputs[0]: body}
                got = {name: np.asarray(body[name]) for name in self.outputs}
            self.sent.append((x, got))
        http.close()
        grpc_client.close()


def log_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(p for p in directory.glob(f"*{suffix}") if p.is_file()) if directory.is_dir() else []


def wait_for(what, log: Path, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting; server log:\n{read_log(log)[-4000:]}")


def prediction_logs(directory: Path, n: int, log: Path):
    def enough():
        records = [r for f in log_files(directory, ".tfrecord") for r in read_tfrecords(f)]
        return records if len(records) >= n else None

    parsed = []
    for record in wait_for(enough, log):
        entry = prediction_log_pb2.PredictionLog()
        entry.ParseFromString(record)
        parsed.append(entry)
    return parsed


def check_prediction_logs(entries, sender: Sender):
    assert len(entries) == len(sender.sent)
    by_input = {}
    for entry in entries:
        assert entry.log_metadata.model_spec.name == "ranker"
        assert entry.log_metadata.model_spec.version.value == 1
        assert entry.log_metadata.timestamp_secs > 0
        predict = entry.predict_log
        x = make_ndarray(predict.request.inputs["features"])
        by_input[x.tobytes()] = (x, predict.response)
    for x, got in sender.sent:
        logged, response = by_input[x.tobytes()]
        np.testing.assert_array_equal(logged, x)
        for name, value in got.items():
            np.testing.assert_allclose(make_ndarray(response.outputs[name]).reshape(value.shape),
                                       value, rtol=1e-6)


def test_prediction_logs_hold_every_protocols_requests_and_answers(tmp_path):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\nformat = "prediction_log"\nsample = 1.0\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        sender = Sender(server)
        sender.send(8)
        sender.close()
        entries = prediction_logs(logs, 8, server.log_path)
        check_prediction_logs(entries, sender)
        assert all(re.fullmatch(r"ranker-\d+-\d+\.tfrecord", p.name) for p in log_files(logs, ".tfrecord"))
    finally:
        server.stop()


def test_tensorflow_reads_the_files_with_tf_data(tmp_path):
    """Where TensorFlow itself is installed (not only its protos, as in this suite's venv),
    `tf.data.TFRecordDataset` reads the files and checks their CRCs."""
    tf = pytest.importorskip("tensorflow")
    if not hasattr(tf, "data"):
        pytest.skip("TensorFlow is not installed here, only its protos")
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        sender = Sender(server)
        sender.send(4)
        sender.close()
        prediction_logs(logs, 4, server.log_path)
    finally:
        server.stop()
    files = [str(p) for p in log_files(logs, ".tfrecord")]
    records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(files)]
    entries = []
    for record in records:
        entry = prediction_log_pb2.PredictionLog()
        entry.ParseFromString(record)
        entries.append(entry)
    check_prediction_logs(entries, sender)


def test_json_lines_hold_the_same(tmp_path):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\nformat = "jsonl"\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        sender = Sender(server)
        sender.send(4)
        sender.close()

        def lines():
            found = [json.loads(l) for f in log_files(logs, ".jsonl") for l in f.read_text().splitlines()]
            return found if len(found) >= 4 else None

        found = wait_for(lines, server.log_path)
        assert len(found) == 4
        by_input = {}
        for line in found:
            assert line["model_name"] == "ranker" and line["model_version"] == "1"
            (inp,) = line["inputs"]
            assert inp["name"] == "features" and inp["datatype"] == "FP32" and inp["shape"] == [2, 16]
            by_input[np.asarray(inp["data"], dtype=np.float32).tobytes()] = line
        for x, got in sender.sent:
            line = by_input[x.flatten().tobytes()]
            outputs = {o["name"]: o for o in line["outputs"]}
            for name, value in got.items():
                np.testing.assert_allclose(np.asarray(outputs[name]["data"]), value.flatten(), rtol=1e-6)
    finally:
        server.stop()


def test_models_config_logging_config_names_the_files(tmp_path):
    models = ranker_models(tmp_path, "")
    prefix = tmp_path / "tfs-logs" / "ranker_log"
    config = models / "models.config"
    config.write_text(
        "model_config_list { config { "
        f'name: "ranker" base_path: "{models / "ranker"}" model_platform: "onnx" '
        f'logging_config {{ log_collector_config {{ filename_prefix: "{prefix}" }} '
        "sampling_config { sampling_rate: 1.0 } } } }\n")
    server = start_server(models, tmp_path / "server.log", ["--model-config-file", str(config)])
    try:
        sender = Sender(server)
        sender.send(4)
        sender.close()
        entries = prediction_logs(prefix.parent, 4, server.log_path)
        check_prediction_logs(entries, sender)
        assert all(p.name.startswith("ranker_log.") for p in log_files(prefix.parent, ".tfrecord"))
    finally:
        server.stop()


def metric(server, name: str, **labels: str) -> float:
    text = requests.get(f"{server.rest_url}/metrics", timeout=TIMEOUT).text
    for line in text.splitlines():
        if line.startswith(name + "{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_sample_zero_logs_nothing(tmp_path):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\nsample = 0.0\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        sender = Sender(server)
        sender.send(8)
        sender.close()
        assert metric(server, "tensorport_payload_log_records_total", model="ranker", outcome="written") == 0
        assert log_files(logs, ".tfrecord") == []
    finally:
        server.stop()


def test_sample_half_logs_about_half(tmp_path):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\nsample = 0.5\nformat = "jsonl"\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        client = triton_grpc.InferenceServerClient(server.grpc_target)
        x = features(1)
        tensor = triton_grpc.InferInput("features", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        for _ in range(400):
            client.infer("ranker", [tensor])
        client.close()
        assert metric(server, "tensorport_payload_log_records_total", model="ranker", outcome="queue_full") == 0
    finally:
        # The drain ends with every model's writer writing what it still holds, so once the
        # process has exited the files hold every sampled record (counted before that, they
        # may hold only the batches written so far).
        server.stop()
    assert server.process.returncode == 0, server.log()
    lines = sum(len(f.read_text().splitlines()) for f in log_files(logs, ".jsonl"))
    # Binomial(400, 0.5): 200 +- 10, so 100 to 300 is ten deviations either side.
    assert 100 <= lines <= 300, lines


SHADOW_LOGGED = """
[version_policy]
all = true

[traffic]
split = {{ "1" = 100 }}

[traffic.shadow]
target = "2"
percent = 100

[logging]
path = "{logs}"
format = "{format}"
shadow = true
"""


def shadow_models(tmp_path: Path, log_format: str) -> tuple[Path, Path]:
    logs = tmp_path / "logs"
    models = tmp_path / "models"
    folder = models / "ranker"
    folder.mkdir(parents=True)
    for version in (1, 2):
        shutil.copytree(EXAMPLE_MODELS / "ranker" / str(version), folder / str(version))
    (folder / "config.toml").write_text(SHADOW_LOGGED.format(logs=logs, format=log_format))
    return models, logs


def shadow_settled(server, n: int) -> bool:
    sent = metric(server, "tensorport_shadow_copies_sent_total", model="ranker")
    dropped = sum(metric(server, "tensorport_shadow_copies_dropped_total", model="ranker", reason=r)
                  for r in ("queue_full", "busy", "near_limit", "shared_memory_input", "target_unavailable"))
    return sent + dropped == n


def send_with_copies(server, n: int) -> int:
    """Sends `n` requests, waits until each copy is sent or dropped: how many were sent."""
    sender = Sender(server)
    sender.send(n)
    sender.close()
    wait_for(lambda: shadow_settled(server, n), server.log_path)
    return int(metric(server, "tensorport_shadow_copies_sent_total", model="ranker"))


def test_shadow_answers_are_logged_beside_the_primary(tmp_path):
    models, logs = shadow_models(tmp_path, "jsonl")
    server = start_server(models, tmp_path / "server.log")
    try:
        sent = send_with_copies(server, 8)
        assert sent >= 1

        def lines():
            found = [json.loads(l) for f in log_files(logs, ".jsonl") for l in f.read_text().splitlines()]
            return found if len(found) >= 8 + sent else None

        found = wait_for(lines, server.log_path)
        primaries = [line for line in found if "origin" not in line]
        copies = [line for line in found if line.get("origin") == "shadow"]
        assert len(primaries) == 8 and len(copies) == sent and len(found) == 8 + sent
        assert {line["model_version"] for line in primaries} == {"1"}
        assert {line["model_version"] for line in copies} == {"2"}
        by_id = {line["id"]: line for line in primaries}
        for copy in copies:
            # The copy carries its primary's id and the same inputs, with version 2's answer.
            primary = by_id[copy["id"]]
            assert copy["inputs"] == primary["inputs"]
            assert copy["outputs"] != primary["outputs"]
            x = np.asarray(copy["inputs"][0]["data"], dtype=np.float32).reshape(copy["inputs"][0]["shape"])
            tensor = triton_http.InferInput("features", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            http = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
            direct = http.infer("ranker", [tensor], model_version="2")
            http.close()
            logged = {o["name"]: np.asarray(o["data"]) for o in copy["outputs"]}
            for name, value in logged.items():
                np.testing.assert_allclose(value, direct.as_numpy(name).flatten(), rtol=1e-6)
    finally:
        server.stop()


def test_shadow_answers_in_prediction_logs_say_their_origin(tmp_path):
    models, logs = shadow_models(tmp_path, "prediction_log")
    server = start_server(models, tmp_path / "server.log")
    try:
        sent = send_with_copies(server, 4)
        entries = prediction_logs(logs, 4 + sent, server.log_path)
        origins = sorted((e.log_metadata.request_origin, e.log_metadata.model_spec.version.value)
                         for e in entries)
        assert origins == [("", 1)] * 4 + [("shadow", 2)] * sent
    finally:
        server.stop()


def test_a_directory_replaced_by_a_file_drops_and_counts_and_requests_succeed(tmp_path):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        sender = Sender(server)
        sender.send(4)
        prediction_logs(logs, 4, server.log_path)
        shutil.rmtree(logs)
        logs.write_text("not a directory")
        # Every request still answers (Sender asserts it); the writer notices the file gone
        # at its next flush, then fails to open a new one and counts the drops.
        def dropped():
            sender.send(4)
            return metric(server, "tensorport_payload_log_records_total",
                          model="ranker", outcome="write_error") > 0
        wait_for(dropped, server.log_path)
        sender.close()
        assert "payload log dropped a record" in read_log(server.log_path)
    finally:
        server.stop()


@pytest.mark.parametrize("table, message", [
    ('format = "csv"', "format 'csv'"),
    ("sample = 2", "sample must be between 0 and 1"),
])
def test_bad_settings_are_a_load_error(tmp_path, table, message):
    models = ranker_models(tmp_path, f'[logging]\npath = "{tmp_path / "logs"}"\n{table}\n')
    server = start_server(models, tmp_path / "server.log")
    try:
        ready = requests.get(f"{server.rest_url}/v2/models/ranker/ready", timeout=TIMEOUT)
        assert ready.status_code != 200
        assert message in read_log(server.log_path)
    finally:
        server.stop()
