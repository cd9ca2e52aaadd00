"""gzip on both ports, with real clients: `Content-Encoding: gzip` request bodies and
`Accept-Encoding: gzip` responses on the HTTP port, gzip messages both ways on gRPC (a reply
gzipped only when its request was). The inflated size counts against --max-request-bytes, so a
gzip bomb is refused and the server keeps serving."""

from __future__ import annotations

import gzip
import struct
import subprocess

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tensorport_server import ServerStartError, link_models, start_server
from tfs import make_ndarray, make_tensor_proto

from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

LIMIT = 1 << 20
TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = link_models(tmp_path_factory.mktemp("models"))
    log = tmp_path_factory.mktemp("server") / "tensorport.log"
    try:
        srv = start_server(model_dir, log, ["--max-request-bytes", str(LIMIT)])
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield srv
    finally:
        srv.stop()


def kserve_body(values: np.ndarray) -> bytes:
    import json
    return json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(values.shape),
                                   "data": values.ravel().tolist()}]}).encode()


X = (np.arange(2 * 300, dtype=np.float32).reshape(2, 300) - 7.0) / 9.0


def test_gzip_request_bodies_are_inflated(server):
    url = server.rest_url + "/v2/models/echo_float32/infer"
    resp = requests.post(url, data=gzip.compress(kserve_body(X)),
                         headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
                         timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    out = resp.json()["outputs"][0]
    np.testing.assert_array_equal(np.array(out["data"], dtype=np.float32).reshape(out["shape"]), X)

    import json
    tfs = gzip.compress(json.dumps({"instances": X.tolist()}).encode())
    resp = requests.post(server.rest_url + "/v1/models/echo_float32:predict", data=tfs,
                         headers={"Content-Encoding": "gzip"}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    np.testing.assert_array_equal(np.array(resp.json()["predictions"], dtype=np.float32), X)


def test_responses_are_gzipped_for_clients_that_accept_it(server):
    url = server.rest_url + "/v2/models/echo_float32/infer"
    raw = requests.post(url, data=kserve_body(X), headers={"Accept-Encoding": "gzip"},
                        timeout=TIMEOUT, stream=True)
    assert raw.status_code == 200
    assert raw.headers.get("Content-Encoding") == "gzip", raw.headers
    compressed = raw.raw.read(decode_content=False)
    import json
    body = json.loads(gzip.decompress(compressed))
    np.testing.assert_array_equal(np.array(body["outputs"][0]["data"], dtype=np.float32),
                                  X.ravel())
    plain = requests.post(url, data=kserve_body(X), headers={"Accept-Encoding": "identity"},
                          timeout=TIMEOUT)
    assert plain.status_code == 200
    assert "Content-Encoding" not in plain.headers


def test_a_gzip_bomb_is_refused_and_the_server_keeps_serving(server):
    # 64 MiB of spaces inside a JSON body compresses to about 64 KiB, under the 1 MiB limit.
    bomb = gzip.compress(b'{"instances": [1]' + b" " * (64 << 20) + b"}")
    assert len(bomb) < LIMIT
    resp = requests.post(server.rest_url + "/v1/models/echo_float32:predict", data=bomb,
                         headers={"Content-Encoding": "gzip"}, timeout=TIMEOUT)
    assert resp.status_code == 413, resp.text
    assert "limit" in resp.json()["error"]
    test_gzip_request_bodies_are_inflated(server)


@pytest.mark.parametrize("body,encoding,status,word", [
    (b"\x1f\x8b\x08\x00garbage", "gzip", 400, "gzip"),
    (b"{}", "br", 415, "br"),
])
def test_bad_encodings_are_refused(server, body, encoding, status, word):
    resp = requests.post(server.rest_url + "/v1/models/echo_float32:predict", data=body,
                         headers={"Content-Encoding": encoding}, timeout=TIMEOUT)
    assert resp.status_code == status, resp.text
    assert word in resp.json()["error"]


def test_grpc_gzip_with_tritonclient(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        x = grpcclient.InferInput("x", list(X.shape), "FP32")
        x.set_data_from_numpy(X)
        result = client.infer("echo_float32", [x], compression_algorithm="gzip")
        np.testing.assert_array_equal(result.as_numpy("y"), X)
    finally:
        client.close()


def test_grpc_gzip_with_tf_serving_stubs_and_a_bomb(server):
    channel = grpc.insecure_channel(server.grpc_target, compression=grpc.Compression.Gzip)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "echo_float32"
        request.inputs["x"].CopyFrom(make_tensor_proto(X))
        reply = stub.Predict(request, timeout=TIMEOUT)
        np.testing.assert_array_equal(make_ndarray(reply.outputs["y"]), X)

        # 4 MiB of zeros inflates past the 1 MiB limit but compresses to a few KiB.
        bomb = predict_pb2.PredictRequest()
        bomb.model_spec.name = "echo_float32"
        bomb.inputs["x"].CopyFrom(make_tensor_proto(np.zeros((1024, 1024), dtype=np.float32)))
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(bomb, timeout=TIMEOUT)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value
        reply = stub.Predict(request, timeout=TIMEOUT)
        np.testing.assert_array_equal(make_ndarray(reply.outputs["y"]), X)
    finally:
        channel.close()


def _grpc_frame(message: bytes, compressed: bool) -> bytes:
    return bytes([1 if compressed else 0]) + struct.pack(">I", len(message)) + message


def _curl_predict(server, tmp_path, frame: bytes, headers: list[str]) -> tuple[str, bytes]:
    """One Predict over curl's HTTP/2: the response headers, and the reply's gRPC frame."""
    sent, received = tmp_path / "request.bin", tmp_path / "reply.bin"
    sent.write_bytes(frame)
    args = ["curl", "-sS", "--max-time", "30", "--http2-prior-knowledge", "-D", "-",
            "-o", str(received), "-H", "content-type: application/grpc", "-H", "te: trailers",
            "--data-binary", f"@{sent}"]
    for header in headers:
        args += ["-H", header]
    url = f"http://{server.grpc_target}/tensorflow.serving.PredictionService/Predict"
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.lower(), received.read_bytes()


def test_grpc_replies_are_gzipped_only_when_the_request_was(server, tmp_path):
    # Every gRPC C-core client offers gzip on every call; TF Serving and Triton still answer
    # uncompressed unless the client compresses, and so does this server.
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "echo_float32"
    request.inputs["x"].CopyFrom(make_tensor_proto(X))
    message = request.SerializeToString()
    offers = "grpc-accept-encoding: identity,deflate,gzip"

    headers, reply = _curl_predict(server, tmp_path, _grpc_frame(message, False), [offers])
    assert "grpc-status: 0" in headers, headers
    assert "grpc-encoding" not in headers, headers
    assert reply[0] == 0, reply[:16]
    answer = predict_pb2.PredictResponse.FromString(reply[5:])
    np.testing.assert_array_equal(make_ndarray(answer.outputs["y"]), X)

    gzipped = _grpc_frame(gzip.compress(message), True)
    headers, reply = _curl_predict(server, tmp_path, gzipped, ["grpc-encoding: gzip", offers])
    assert "grpc-status: 0" in headers, headers
    assert "grpc-encoding: gzip" in headers, headers
    assert reply[0] == 1, reply[:16]
    answer = predict_pb2.PredictResponse.FromString(gzip.decompress(reply[5:]))
    np.testing.assert_array_equal(make_ndarray(answer.outputs["y"]), X)
