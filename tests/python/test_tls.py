"""TLS and mutual TLS on both ports, with the real clients: curl, tritonclient (HTTP and gRPC)
and the TF Serving stubs over grpc.ssl_channel_credentials. The certificates are made here,
with the openssl command-line tool, for 127.0.0.1 and localhost."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc, predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tensorport_server import EXAMPLE_MODELS, ServerStartError, link_models, start_server
from tfs import make_tensor_proto

FEATURES = np.arange(16, dtype=np.float32).reshape(1, 16)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(dir: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
            "-subj", f"/CN={name}", cwd=dir)


def make_leaf(dir: Path, name: str, ca: str, ext: str) -> None:
    """A key and a certificate signed by `ca`, with the X.509 extensions in `ext`."""
    (dir / f"{name}.ext").write_text(ext)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=dir)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=dir)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    dir = tmp_path_factory.mktemp("certs")
    make_ca(dir, "ca")
    make_ca(dir, "other_ca")
    make_leaf(dir, "server", "ca",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    make_leaf(dir, "client", "ca", "extendedKeyUsage=clientAuth\n")
    make_leaf(dir, "stranger", "other_ca", "extendedKeyUsage=clientAuth\n")
    return dir


def serve(tmp_path_factory, extra: list[str]):
    model_dir = link_models(tmp_path_factory.mktemp("models"), bases=(EXAMPLE_MODELS,))
    log = tmp_path_factory.mktemp("server") / "tensorport.log"
    try:
        return start_server(model_dir, log, extra)
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory, certs):
    srv = serve(tmp_path_factory, ["--tls-cert", str(certs / "server.pem"),
                                   "--tls-key", str(certs / "server.key")])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory, certs):
    srv = serve(tmp_path_factory, ["--tls-cert", str(certs / "server.pem"),
                                   "--tls-key", str(certs / "server.key"),
                                   "--tls-client-ca", str(certs / "ca.pem")])
    yield srv
    srv.stop()


def https(srv) -> str:
    return srv.rest_url.replace("http://", "https://")


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "--max-time", "30", *args],
                          capture_output=True, text=True)


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def test_curl_trusts_the_server_through_its_ca(tls_server, certs):
    done = curl("--cacert", str(certs / "ca.pem"), "-w", "%{http_code} %{http_version}",
                "-o", "/dev/null", f"{https(tls_server)}/v2/health/ready")
    assert done.stdout.startswith("200"), done.stderr
    predict = curl("--cacert", str(certs / "ca.pem"), "-d",
                   '{"instances": [[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]]}',
                   f"{https(tls_server)}/v1/models/ranker:predict")
    assert '"predictions"' in predict.stdout, predict.stderr
    # HTTP/2 is offered in the handshake and works too.
    done = curl("--http2", "--cacert", str(certs / "ca.pem"), "-w", "%{http_version}",
                "-o", "/dev/null", f"{https(tls_server)}/v2/health/live")
    assert done.stdout == "2", done.stderr


def test_clients_that_do_not_trust_the_certificate_or_speak_plain_http_get_nothing(tls_server):
    untrusted = curl(f"{https(tls_server)}/v2/health/ready")
    assert untrusted.returncode == 60, untrusted  # peer certificate cannot be verified
    plain = curl(f"{tls_server.rest_url}/v2/health/ready")
    assert plain.returncode != 0 or not plain.stdout.startswith("{"), plain
    assert tls_server.process.poll() is None


def test_tritonclient_http_over_tls(tls_server, certs):
    client = triton_http.InferenceServerClient(
        tls_server.rest_url.removeprefix("http://"), ssl=True,
        ssl_options={"ca_certs": str(certs / "ca.pem")})
    assert client.is_server_ready()
    inp = triton_http.InferInput("features", list(FEATURES.shape), "FP32")
    inp.set_data_from_numpy(FEATURES)
    result = client.infer("ranker", [inp])
    assert result.as_numpy("score").shape == (1, 1)
    client.close()


def test_tritonclient_grpc_over_tls(tls_server, certs):
    client = triton_grpc.InferenceServerClient(
        tls_server.grpc_target, ssl=True, root_certificates=str(certs / "ca.pem"))
    assert client.is_server_live()
    inp = triton_grpc.InferInput("features", list(FEATURES.shape), "FP32")
    inp.set_data_from_numpy(FEATURES)
    result = client.infer("ranker", [inp])
    assert result.as_numpy("score").shape == (1, 1)
    client.close()


def test_tf_serving_stubs_over_ssl_channel_credentials(tls_server, certs):
    credentials = grpc.ssl_channel_credentials(root_certificates=read_bytes(certs / "ca.pem"))
    with grpc.secure_channel(tls_server.grpc_target, credentials) as channel:
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            get_model_status_pb2.GetModelStatusRequest(
                model_spec={"name": "ranker"}), timeout=30)
        assert status.model_version_status
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "ranker"
        request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
        answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=30)
        assert list(answer.outputs["score"].tensor_shape.dim)[0].size == 1


def test_grpc_without_tls_is_refused(tls_server):
    with grpc.insecure_channel(tls_server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as err:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "ranker"}),
                timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_serves_clients_with_a_certificate_from_the_ca(mtls_server, certs):
    done = curl("--cacert", str(certs / "ca.pem"), "--cert", str(certs / "client.pem"),
                "--key", str(certs / "client.key"), "-w", "%{http_code}", "-o", "/dev/null",
                f"{https(mtls_server)}/v2/health/ready")
    assert done.stdout == "200", done.stderr
    client = triton_grpc.InferenceServerClient(
        mtls_server.grpc_target, ssl=True, root_certificates=str(certs / "ca.pem"),
        private_key=str(certs / "client.key"), certificate_chain=str(certs / "client.pem"))
    assert client.is_server_live()
    client.close()
    http_client = triton_http.InferenceServerClient(
        mtls_server.rest_url.removeprefix("http://"), ssl=True,
        ssl_options={"ca_certs": str(certs / "ca.pem"), "certfile": str(certs / "client.pem"),
                     "keyfile": str(certs / "client.key")})
    assert http_client.is_server_live()
    http_client.close()


def test_mtls_refuses_clients_without_a_certificate_or_with_a_stranger_s(mtls_server, certs):
    anonymous = curl("--cacert", str(certs / "ca.pem"), f"{https(mtls_server)}/v2/health/ready")
    assert anonymous.returncode != 0, anonymous
    assert "{" not in anonymous.stdout
    stranger = curl("--cacert", str(certs / "ca.pem"), "--cert", str(certs / "stranger.pem"),
                    "--key", str(certs / "stranger.key"), f"{https(mtls_server)}/v2/health/ready")
    assert stranger.returncode != 0, stranger
    assert "{" not in stranger.stdout

    credentials = grpc.ssl_channel_credentials(root_certificates=read_bytes(certs / "ca.pem"))
    with grpc.secure_channel(mtls_server.grpc_target, credentials) as channel:
        with pytest.raises(grpc.RpcError) as err:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "ranker"}),
                timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE

    # The refusals disturbed nothing: a client with a certificate is still served.
    assert mtls_server.process.poll() is None
    done = curl("--cacert", str(certs / "ca.pem"), "--cert", str(certs / "client.pem"),
                "--key", str(certs / "client.key"), "-w", "%{http_code}", "-o", "/dev/null",
                f"{https(mtls_server)}/v2/health/ready")
    assert done.stdout == "200", done.stderr


def test_a_client_that_never_finishes_its_handshake_is_disconnected(tmp_path_factory, certs):
    srv = serve(tmp_path_factory, ["--tls-cert", str(certs / "server.pem"),
                                   "--tls-key", str(certs / "server.key"),
                                   "--header-read-timeout-secs", "1"])
    try:
        host, port = srv.rest_url.removeprefix("http://").rsplit(":", 1)
        silent = socket.create_connection((host, int(port)))
        # Half a ClientHello's record header, then nothing.
        stalled = socket.create_connection((host, int(port)))
        stalled.sendall(b"\x16\x03\x01")
        for conn in (silent, stalled):
            conn.settimeout(60)  # only a bound on a broken server; the server closes first
            try:
                assert conn.recv(1024) == b""
            except ConnectionResetError:
                pass  # closed with bytes unread: also closed
            conn.close()
        done = curl("--cacert", str(certs / "ca.pem"), "-w", "%{http_code}", "-o", "/dev/null",
                    f"{https(srv)}/v2/health/ready")
        assert done.stdout == "200", done.stderr
    finally:
        srv.stop()


def test_an_unreadable_certificate_stops_the_server_naming_the_flag(tmp_path_factory, certs):
    model_dir = link_models(tmp_path_factory.mktemp("models"), bases=(EXAMPLE_MODELS,))
    log = tmp_path_factory.mktemp("server") / "tensorport.log"
    with pytest.raises(ServerStartError) as err:
        start_server(model_dir, log, ["--tls-cert", str(certs / "missing.pem"),
                                      "--tls-key", str(certs / "server.key")])
    assert "--tls-cert" in str(err.value)
    # A key that is not the certificate's is refused too.
    with pytest.raises(ServerStartError) as err:
        start_server(model_dir, log, ["--tls-cert", str(certs / "server.pem"),
                                      "--tls-key", str(certs / "client.key")])
    assert f"--tls-key {certs / 'client.key'}:" in str(err.value)
