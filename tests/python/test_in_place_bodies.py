"""Request bodies read in place: a body that arrives in many frames or chunks is joined into
one buffer placed so that its first tensor is aligned (src/transport/placement.rs), and a
KServe gRPC `ModelInfer` or TF Serving `Predict` message is decoded from that buffer rather
than from tonic's copy of it (src/api/in_place.rs). These tests send the bytes themselves (python-h2 on a
plain socket for gRPC, chunked HTTP/1.1 for the binary extension), so that they choose the
frame sizes and the offset of the tensor bytes in the body, and check every answer against
onnxruntime.

gRPC bodies that the in-place path must not take (compressed, cut short, two messages, not
protobuf) get the answers tonic gives them, and the connection goes on serving."""

from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tensorflow_serving.apis import predict_pb2

from h2_client import GRPC_HEADERS, Answer, H2Client, grpc_message, grpc_messages
from kserve_util import copied_bytes, metrics_text
from tfs import assert_close, make_ndarray, make_tensor_proto, reference

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def infer_request(rows: int, request_id: str) -> tuple[service_pb2.ModelInferRequest, np.ndarray]:
    features = (np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) % 97 - 48.0) / 31.0
    request = service_pb2.ModelInferRequest(model_name="ranker", id=request_id)
    request.inputs.add(name="features", datatype="FP32", shape=[rows, 16])
    request.raw_input_contents.append(features.tobytes())
    request.outputs.add(name="score")
    return request, features


def send_in_frames(client: H2Client, body: bytes, frame: int, headers=GRPC_HEADERS, path=MODEL_INFER) -> int:
    """Sends `body` as DATA frames of `frame` bytes, so that the server joins them."""
    stream = client.conn.get_next_available_stream_id()
    client.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"),
                                      (":authority", client.authority), (":path", path),
                                      *headers])
    for start in range(0, len(body), frame):
        client.conn.send_data(stream, body[start:start + frame], end_stream=start + frame >= len(body))
    client.answers[stream] = Answer()
    client.sock.sendall(client.conn.data_to_send())
    return stream


@pytest.fixture()
def client(server):
    connection = H2Client(server.grpc_target)
    yield connection
    connection.close()


def decoded_answer(answer) -> service_pb2.ModelInferResponse:
    status = answer.trailers.get("grpc-status", answer.headers.get("grpc-status"))
    assert status == "0", (status, answer.trailers.get("grpc-message", answer.headers.get("grpc-message")))
    assert answer.headers["content-type"] == "application/grpc"
    [message] = grpc_messages(answer.body)
    return service_pb2.ModelInferResponse.FromString(message)


@pytest.mark.parametrize("frame", [1000, 4099, 16384])
def test_a_body_in_many_frames_is_answered_right_at_every_offset_of_its_tensor(client, frame):
    # Ids of 0 to 16 characters move the tensor's bytes through every offset mod 16.
    for length in range(17):
        request, features = infer_request(300, "i" * length)
        stream = send_in_frames(client, grpc_message(request.SerializeToString()), frame)
        response = decoded_answer(client.answer(stream))
        assert response.id == "i" * length and response.model_name == "ranker"
        [output] = response.outputs
        assert output.name == "score" and list(output.shape) == [300, 1]
        score = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(300, 1)
        assert_close(score, reference("ranker", 2, {"features": features})["score"])


def test_a_body_in_one_frame_and_the_typed_contents_are_answered_too(client):
    request, features = infer_request(2, "one")
    stream = client.send(MODEL_INFER, grpc_message(request.SerializeToString()), GRPC_HEADERS)
    score = decoded_answer(client.answer(stream)).raw_output_contents[0]
    assert_close(np.frombuffer(score, dtype=np.float32).reshape(2, 1),
                 reference("ranker", 2, {"features": features})["score"])
    typed = service_pb2.ModelInferRequest(model_name="ranker", id="typed")
    tensor = typed.inputs.add(name="features", datatype="FP32", shape=[2, 16])
    tensor.contents.fp32_contents.extend(features.reshape(-1).tolist())
    stream = send_in_frames(client, grpc_message(typed.SerializeToString()), 40)
    response = decoded_answer(client.answer(stream))
    assert response.outputs[0].shape == [2, 1] and response.id == "typed"


def grpc_status(answer) -> str:
    return answer.trailers.get("grpc-status", answer.headers.get("grpc-status"))


def test_bodies_the_in_place_path_does_not_take_get_tonics_answers_and_nothing_breaks(client):
    request, features = infer_request(64, "bad")
    message = request.SerializeToString()
    cases = {
        # Not protobuf: tonic's decode error, INTERNAL.
        "not protobuf": (grpc_message(b"\xff\xff\xff\xff"), GRPC_HEADERS, "13"),
        # The prefix announces more than the body holds: the message never completes.
        "cut short": (struct.pack(">BI", 0, len(message) + 10) + message, GRPC_HEADERS, "13"),
        # A compressed flag with no grpc-encoding: tonic refuses it.
        "flag without encoding": (struct.pack(">BI", 1, len(message)) + message, GRPC_HEADERS, "13"),
        # Unknown model: the service's own NOT_FOUND, from either path.
        "unknown model": (grpc_message(service_pb2.ModelInferRequest(
            model_name="no_such_model").SerializeToString()), GRPC_HEADERS, "5"),
    }
    for name, (body, headers, expected) in cases.items():
        stream = send_in_frames(client, body, 1000, headers)
        answer = client.answer(stream)
        assert grpc_status(answer) == expected, (name, answer)
    # gzip, as grpcio sends it: tonic inflates it and answers in kind.
    compressed = gzip.compress(message)
    stream = send_in_frames(client, struct.pack(">BI", 1, len(compressed)) + compressed, 1000,
                            GRPC_HEADERS + [("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")])
    answer = client.answer(stream)
    assert grpc_status(answer) == "0", answer
    assert answer.headers.get("grpc-encoding") == "gzip"
    # Two messages in a unary call: tonic answers the first and reads past the second.
    stream = send_in_frames(client, grpc_message(message) * 2, 1000)
    answer = decoded_answer(client.answer(stream))
    assert answer.id == "bad" and list(answer.outputs[0].shape) == [64, 1]
    # The connection still serves a good request after all of them.
    request, features = infer_request(64, "after")
    stream = send_in_frames(client, grpc_message(request.SerializeToString()), 1000)
    score = decoded_answer(client.answer(stream)).raw_output_contents[0]
    assert_close(np.frombuffer(score, dtype=np.float32).reshape(64, 1),
                 reference("ranker", 2, {"features": features})["score"])
    assert not client.gone_away


def test_http_binary_bodies_in_chunks_are_answered_right_at_every_offset_of_their_tensor(rest_url, http):
    features = (np.arange(300 * 16, dtype=np.float32).reshape(300, 16) % 89 - 44.0) / 29.0
    expected = reference("ranker", 2, {"features": features})["score"]
    for pad in range(17):
        header = json.dumps({"inputs": [{"name": "features", "datatype": "FP32", "shape": [300, 16],
                                         "parameters": {"binary_data_size": features.nbytes}}],
                             "outputs": [{"name": "score", "parameters": {"binary_data": False}}]})
        header = (header + " " * pad).encode()
        body = header + features.tobytes()
        chunks = (body[start:start + 1000] for start in range(0, len(body), 1000))
        reply = http.post(f"{rest_url}/v2/models/ranker/infer", data=chunks,
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"}, timeout=30)
        assert reply.status_code == 200, (pad, reply.text)
        [output] = reply.json()["outputs"]
        assert output["shape"] == [300, 1]
        assert_close(np.array(output["data"], dtype=np.float32).reshape(300, 1), expected)


def predict_body(rows: int, pad: int) -> tuple[bytes, np.ndarray]:
    """A TF Serving PredictRequest for the ranker with its features in `tensor_content`, and an
    unknown field of `pad` bytes before the inputs (parsers skip unknown fields; protobuf
    messages concatenate), which moves the tensor's bytes to every offset mod 16."""
    features = (np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) % 83 - 41.0) / 27.0
    spec = predict_pb2.PredictRequest()
    spec.model_spec.name = "ranker"
    inputs = predict_pb2.PredictRequest()
    inputs.inputs["features"].CopyFrom(make_tensor_proto(features, "float32"))
    unknown = bytes([15 << 3 | 2, pad]) + b"p" * pad
    return spec.SerializeToString() + unknown + inputs.SerializeToString(), features


def predicted_score(answer) -> np.ndarray:
    status = grpc_status(answer)
    assert status == "0", (status, answer.trailers.get("grpc-message", answer.headers.get("grpc-message")))
    assert answer.headers["content-type"] == "application/grpc"
    [message] = grpc_messages(answer.body)
    response = predict_pb2.PredictResponse.FromString(message)
    assert response.model_spec.name == "ranker"
    return make_ndarray(response.outputs["score"])


@pytest.mark.parametrize("frame", [1000, 4099, 16384])
def test_a_predict_body_in_many_frames_is_answered_right_and_its_tensor_never_copied_to_align(
        client, server, frame):
    before = copied_bytes(metrics_text(server.rest_url), "input_alignment")
    for pad in range(17):
        body, features = predict_body(300, pad)
        stream = send_in_frames(client, grpc_message(body), frame, path=PREDICT)
        score = predicted_score(client.answer(stream))
        assert score.shape == (300, 1), pad
        assert_close(score, reference("ranker", 2, {"features": features})["score"])
    # Each body started in its buffer where its tensor_content landed aligned.
    assert copied_bytes(metrics_text(server.rest_url), "input_alignment") == before


def test_predict_bodies_the_in_place_path_does_not_take_get_tonics_answers_and_nothing_breaks(client):
    body, features = predict_body(64, 3)
    cases = {
        "not protobuf": (grpc_message(b"\xff\xff\xff\xff"), GRPC_HEADERS, "13"),
        "cut short": (struct.pack(">BI", 0, len(body) + 10) + body, GRPC_HEADERS, "13"),
        "flag without encoding": (struct.pack(">BI", 1, len(body)) + body, GRPC_HEADERS, "13"),
        # A model name that is a path: the service's own NOT_FOUND.
        "unknown model": (grpc_message(body.replace(b"ranker", b"../abc", 1)), GRPC_HEADERS, "5"),
    }
    for name, (framed, headers, expected) in cases.items():
        answer = client.answer(send_in_frames(client, framed, 1000, headers, path=PREDICT))
        assert grpc_status(answer) == expected, (name, answer)
    # A tensor_content shorter than its shape says: INVALID_ARGUMENT with what was wrong.
    short = predict_pb2.PredictRequest()
    short.model_spec.name = "ranker"
    tensor = make_tensor_proto(features, "float32")
    tensor.tensor_content = tensor.tensor_content[:-4]
    short.inputs["features"].CopyFrom(tensor)
    answer = client.answer(send_in_frames(client, grpc_message(short.SerializeToString()), 1000, path=PREDICT))
    assert grpc_status(answer) == "3", answer
    assert "features" in answer.trailers.get("grpc-message", answer.headers.get("grpc-message", ""))
    # gzip, as grpcio sends it: tonic inflates it and answers in kind.
    compressed = gzip.compress(body)
    answer = client.answer(send_in_frames(
        client, struct.pack(">BI", 1, len(compressed)) + compressed, 1000,
        GRPC_HEADERS + [("grpc-encoding", "gzip"), ("grpc-accept-encoding", "gzip")], path=PREDICT))
    assert grpc_status(answer) == "0", answer
    assert answer.headers.get("grpc-encoding") == "gzip"
    # Two messages in a unary call: the first is answered.
    score = predicted_score(client.answer(send_in_frames(client, grpc_message(body) * 2, 1000, path=PREDICT)))
    assert_close(score, reference("ranker", 2, {"features": features})["score"])
    assert not client.gone_away
