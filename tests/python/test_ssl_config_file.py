"""TF Serving's `--ssl_config_file` (an SSLConfig text proto holding PEM text) onto tensorport's
TLS, with a real project's file format and command line
(tests/migration/tfserving-ssl/SOURCES.md): mutual TLS with the TF Serving stubs on the gRPC
port, and TLS on the REST port, which TF Serving leaves plain."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from tensorport_server import EXAMPLE_MODELS, REPO, server_binary, start_server
from test_tls import curl, make_ca, make_leaf

SCRIPT = REPO / "tests" / "migration" / "tfserving-ssl" / "generate_twoway_ssl_config.sh"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_line_pem(path: Path) -> str:
    """A PEM file as the script writes it into ssl.cfg: its lines joined, `\\n` after BEGIN
    and before END, in single quotes."""
    joined = "".join(path.read_text().splitlines())
    for marker in ("CERTIFICATE", "PRIVATE KEY"):
        joined = joined.replace(f"-----BEGIN {marker}-----", f"-----BEGIN {marker}-----\\n")
        joined = joined.replace(f"-----END {marker}-----", f"\\n-----END {marker}-----")
    return f"'{joined}'"


def the_projects_line(ssl_config: Path) -> tuple[list[str], int, int]:
    """The project's entrypoint line, its ports free ones and its variables filled in."""
    grpc_port, rest_port = free_port(), free_port()
    return ([f"--model_name=ranker", "--model_base_path=" + str(EXAMPLE_MODELS / "ranker"),
             f"--port={grpc_port}", f"--rest_api_port={rest_port}",
             "--enable_model_warmup=true", "--flush_filesystem_caches=false",
             "--enable_batching=false", f"--ssl_config_file={ssl_config}",
             "--rest_api_num_threads=8", "--tensorflow_session_parallelism=0",
             "--tensorflow_intra_op_parallelism=2", "--tensorflow_inter_op_parallelism=2",
             "--file_system_poll_wait_seconds=5"], grpc_port, rest_port)


@pytest.fixture(scope="module")
def v3_ssl_config(tmp_path_factory) -> Path:
    dir = tmp_path_factory.mktemp("ssl")
    make_ca(dir, "ca")
    make_leaf(dir, "server", "ca",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    make_leaf(dir, "client", "ca", "extendedKeyUsage=clientAuth\n")
    (dir / "ssl.cfg").write_text(
        f"server_key: {one_line_pem(dir / 'server.key')}\n"
        f"server_cert: {one_line_pem(dir / 'server.pem')}\n"
        f"custom_ca: {one_line_pem(dir / 'ca.pem')}\n"
        "client_verify: true\n")
    return dir


def status(channel) -> int:
    reply = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "ranker"}), timeout=30)
    return reply.model_version_status[0].state


def test_an_ssl_config_file_gives_mutual_tls_on_both_ports(tmp_path, v3_ssl_config):
    certs = v3_ssl_config
    line, grpc_port, rest_port = the_projects_line(certs / "ssl.cfg")
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tensorflow_model_server"])
    try:
        log = server.log()
        # Applied, so not among the flags the start-up warning names as not applied.
        assert "--ssl_config_file (" not in log
        assert "TLS covers the HTTP port too" in log
        trusted = grpc.ssl_channel_credentials(
            root_certificates=(certs / "ca.pem").read_bytes(),
            private_key=(certs / "client.key").read_bytes(),
            certificate_chain=(certs / "client.pem").read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", trusted) as channel:
            assert status(channel) == get_model_status_pb2.ModelVersionStatus.AVAILABLE
        # client_verify: a client without a certificate gets no answer.
        anonymous = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.pem").read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", anonymous) as channel:
            with pytest.raises(grpc.RpcError):
                status(channel)
        done = curl("--cacert", str(certs / "ca.pem"), "--cert", str(certs / "client.pem"),
                    "--key", str(certs / "client.key"),
                    f"https://127.0.0.1:{rest_port}/v1/models/ranker")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["model_version_status"][0]["state"] == "AVAILABLE"
    finally:
        server.stop()


def test_the_projects_own_v1_certificates_stop_the_start_naming_the_field(tmp_path):
    subprocess.run(["bash", str(SCRIPT), "grpc.tf-serving.service.com",
                    "client.tf-serving.service.com"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    ssl_config = tmp_path / "ssl_configure" / "ssl.cfg"
    line, _, _ = the_projects_line(ssl_config)
    done = subprocess.run([str(server_binary()), "tensorflow_model_server", *line],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"{ssl_config} (server_cert)" in done.stderr, done.stderr
    assert "UnsupportedCertVersion" in done.stderr, done.stderr


def test_a_malformed_ssl_config_file_stops_the_start_naming_it(tmp_path):
    ssl_config = tmp_path / "ssl.cfg"
    ssl_config.write_text("server_key: 'K'\nserver_certificate: 'C'\n")
    line, _, _ = the_projects_line(ssl_config)
    done = subprocess.run([str(server_binary()), "tensorflow_model_server", *line],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert str(ssl_config) in done.stderr and "server_certificate" in done.stderr, done.stderr
