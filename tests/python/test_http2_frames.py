"""HTTP/2 frames of up to 1 MiB (src/transport/connection.rs): the server advertises the size
on both ports, a large gRPC request sent as a single frame is answered right, a frame over the
size ends the connection with FRAME_SIZE_ERROR and nothing else, and a frame announced large
whose bytes stop coming is cut off by the body-read timeout like any trickled body, with the
other clients served meanwhile.

The tests speak python-h2 on a plain socket, and write the frame headers themselves where a
well-behaved client could not (a frame over the size, a frame cut short)."""

from __future__ import annotations

import contextlib
import socket
import struct
import time

import h2.errors
import h2.events
import h2.settings
import numpy as np
import pytest
import requests
from tritonclient.grpc import service_pb2

from h2_client import GRPC_HEADERS, Answer, H2Client, grpc_message, grpc_messages
from tensorport_server import EXAMPLE_MODELS, ServerStartError, link_models, start_server
from tfs import assert_close, reference

MAX_FRAME = 1 << 20
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
DATA = 0x0


def frame_header(length: int, kind: int, flags: int, stream: int) -> bytes:
    return length.to_bytes(3, "big") + bytes([kind, flags]) + struct.pack(">I", stream)


def settled(client: H2Client) -> dict:
    """Reads until the server's SETTINGS and its connection window's first update have
    arrived; returns the settings."""
    settings = None
    while settings is None or client.conn.outbound_flow_control_window <= MAX_FRAME:
        data = client.sock.recv(1 << 16)
        assert data, "the server closed the connection before its SETTINGS"
        for event in client.conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                settings = {key: changed.new_value for key, changed in event.changed_settings.items()}
            else:
                client._handle(event)
        client.sock.sendall(client.conn.data_to_send())
    return settings


@contextlib.contextmanager
def connected(target: str):
    """A connection whose SETTINGS exchange is done: (client, the server's settings)."""
    client = H2Client(target)
    try:
        yield client, settled(client)
    finally:
        client.close()


def open_stream(client: H2Client, path: str = MODEL_INFER) -> int:
    """Sends a gRPC request's headers only; the body is the caller's to send."""
    stream = client.conn.get_next_available_stream_id()
    client.conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"),
                                      (":authority", client.authority), (":path", path), *GRPC_HEADERS])
    client.answers[stream] = Answer()
    client.sock.sendall(client.conn.data_to_send())
    return stream


def ranker_request(rows: int) -> tuple[bytes, np.ndarray]:
    features = (np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) % 89 - 44.0) / 29.0
    request = service_pb2.ModelInferRequest(model_name="ranker", id="one-frame")
    request.inputs.add(name="features", datatype="FP32", shape=[rows, 16])
    request.raw_input_contents.append(features.tobytes())
    return grpc_message(request.SerializeToString()), features


@pytest.mark.parametrize("port", ["grpc", "rest"])
def test_both_ports_advertise_one_mebibyte_frames(server, port):
    target = server.grpc_target if port == "grpc" else server.rest_url.removeprefix("http://")
    with connected(target) as (_, settings):
        assert settings[h2.settings.SettingCodes.MAX_FRAME_SIZE] == MAX_FRAME


def test_a_large_request_in_one_frame_is_answered_right(server):
    with connected(server.grpc_target) as (client, _):
        # 15,000 rows of 16 floats: 960 kB, one DATA frame.
        body, features = ranker_request(15_000)
        assert 16_384 < len(body) <= MAX_FRAME
        stream = open_stream(client)
        client.conn.send_data(stream, body, end_stream=True)
        sent = client.conn.data_to_send()
        # One frame: its header, then the body, then nothing.
        assert int.from_bytes(sent[:3], "big") == len(body) and len(sent) == 9 + len(body)
        client.sock.sendall(sent)
        answer = client.answer(stream)
        assert answer.trailers.get("grpc-status") == "0", answer
        [message] = grpc_messages(answer.body)
        response = service_pb2.ModelInferResponse.FromString(message)
        [output] = response.outputs
        score = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(output.shape)
        assert_close(score, reference("ranker", 2, {"features": features})[output.name])


def test_a_frame_over_the_size_ends_that_connection_alone(server):
    with connected(server.grpc_target) as (client, _):
        stream = open_stream(client)
        client.sock.sendall(frame_header(MAX_FRAME + 1, DATA, 0, stream) + bytes(4096))
        terminated = None
        deadline = time.monotonic() + 60
        while terminated is None and time.monotonic() < deadline:
            data = client.sock.recv(1 << 16)
            if not data:
                break
            for event in client.conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    terminated = event
        assert terminated is not None, "no GOAWAY for a frame over the size"
        assert terminated.error_code == h2.errors.ErrorCodes.FRAME_SIZE_ERROR
    assert requests.get(f"{server.rest_url}/v2/models/ranker/ready", timeout=30).status_code == 200


def test_a_large_frame_whose_bytes_stop_is_cut_off_and_others_are_served(tmp_path):
    (tmp_path / "models").mkdir()
    model_dir = link_models(tmp_path / "models", bases=(EXAMPLE_MODELS,))
    try:
        srv = start_server(model_dir, tmp_path / "tensorport.log", ["--body-read-timeout-secs", "1"])
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    stalled = []
    try:
        for _ in range(4):
            client = H2Client(srv.grpc_target)
            settled(client)
            stream = open_stream(client)
            # A frame announced at the full size, of which 64 kB arrive.
            client.sock.sendall(frame_header(MAX_FRAME, DATA, 0, stream) + bytes(65_536))
            stalled.append((client, stream))
        # Served while the frames hang.
        other = H2Client(srv.grpc_target)
        body, features = ranker_request(4)
        answer = other.answer(other.send(MODEL_INFER, body, GRPC_HEADERS))
        assert answer.trailers.get("grpc-status") == "0", answer
        other.close()
        for client, stream in stalled:
            client.sock.settimeout(60)
            answer = client.answer(stream)
            status = answer.trailers.get("grpc-status", answer.headers.get("grpc-status"))
            # DEADLINE_EXCEEDED: the body did not arrive within the body-read timeout; or the
            # stream reset once answered, since its frame can never complete.
            assert status == "4" or answer.reset, answer
        assert srv.process.poll() is None
        assert requests.get(f"{srv.rest_url}/v2/health/live", timeout=30).status_code == 200
    finally:
        for client, _ in stalled:
            try:
                client.close()
            except OSError:
                pass
        srv.stop()


def test_a_frame_stopped_short_does_not_hold_the_socket_open_past_the_timeout(tmp_path):
    """The connection of a frame that never completes is not kept forever: after the answer
    the server closes it (the frame's remaining bytes would be read as a new frame)."""
    (tmp_path / "models").mkdir()
    model_dir = link_models(tmp_path / "models", bases=(EXAMPLE_MODELS,))
    try:
        srv = start_server(model_dir, tmp_path / "tensorport.log",
                           ["--body-read-timeout-secs", "1", "--idle-timeout-secs", "2"])
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        client = H2Client(srv.grpc_target)
        settled(client)
        stream = open_stream(client)
        client.sock.sendall(frame_header(MAX_FRAME, DATA, 0, stream) + bytes(1000))
        client.sock.settimeout(120)
        closed = False
        while not closed:
            try:
                closed = client.sock.recv(1 << 16) == b""
            except ConnectionResetError:
                closed = True
        assert closed
    finally:
        srv.stop()
