"""Payload logging under attack, against the real binary and the TF Serving gRPC stubs:

- a reload-config `logging_config` that names where the server writes (anywhere, through
  `..`, through a symlink, into folders that do not exist) is refused, and nothing is made;
- a log file system that fills up: every record is counted once, as written only when it is
  whole in the file, else as a write error; no torn record is left; the log and the readiness
  detail say so, and every request still succeeds.

The file system fills up by the server's own file-size limit (RLIMIT_FSIZE, with SIGXFSZ
ignored so that a write past it fails with EFBIG, as a full disk fails with ENOSPC): the
same partial write, then a failed one, without root or a mount.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
import requests
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2

from tensorport_server import read_log, start_server
from test_payload_log import (
    Sender,
    log_files,
    metric,
    prediction_logs,
    ranker_models,
    read_tfrecords,
    wait_for,
)

TIMEOUT = 30
FIELD = "logging_config.log_collector_config.filename_prefix"


def reload_with_prefix(models: Path, prefix: str):
    config = model_server_config_pb2.ModelServerConfig()
    entry = config.model_config_list.config.add()
    entry.name = "ranker"
    entry.base_path = str(models / "ranker")
    entry.model_platform = "onnx"
    entry.logging_config.log_collector_config.filename_prefix = prefix
    entry.logging_config.sampling_config.sampling_rate = 1.0
    return model_management_pb2.ReloadConfigRequest(config=config)


def refused(stub, request) -> str:
    with pytest.raises(grpc.RpcError) as err:
        stub.HandleReloadConfigRequest(request, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    return err.value.details()


def test_a_reload_config_cannot_choose_where_payload_logs_are_written(tmp_path):
    models = ranker_models(tmp_path, "")
    pwned = tmp_path / "x" / "deep" / "er" / "pwned"
    server = start_server(models, tmp_path / "server.log")
    channel = grpc.insecure_channel(server.grpc_target)
    try:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        message = refused(stub, reload_with_prefix(models, str(pwned)))
        assert FIELD in message and str(tmp_path) not in message, message
        # The model still serves, unlogged, and nothing was made outside.
        sender = Sender(server)
        sender.send(4)
        sender.close()
        assert not (tmp_path / "x").exists()
        assert metric(server, "tensorport_payload_log_records_total", model="ranker",
                      outcome="written") == 0
    finally:
        channel.close()
        server.stop()


def test_a_reload_config_prefix_stays_under_the_allowed_log_folders(tmp_path):
    allowed = tmp_path / "logs"
    allowed.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (allowed / "link").symlink_to(outside, target_is_directory=True)
    models = ranker_models(tmp_path, "")
    server = start_server(models, tmp_path / "server.log", ["--allow-log-paths", str(allowed)])
    channel = grpc.insecure_channel(server.grpc_target)
    try:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        for prefix in (str(tmp_path / "x" / "pwned"), f"{allowed}/../outside/pwned",
                       f"{allowed}/link/pwned", f"{allowed}/new/folder/pwned", "/proc/self/pwned",
                       f"{allowed}/", f"{allowed}/..", "relative/../../pwned"):
            message = refused(stub, reload_with_prefix(models, prefix))
            assert FIELD in message and str(tmp_path) not in message, (prefix, message)
        assert not (tmp_path / "x").exists() and not (allowed / "new").exists()
        assert list(outside.iterdir()) == []

        # Inside the allowed folder, absolute or relative to it, the list is taken.
        for prefix in (str(allowed / "ranker"), "relative"):
            reply = stub.HandleReloadConfigRequest(reload_with_prefix(models, prefix), timeout=TIMEOUT)
            assert reply.status.error_code == 0
        sender = Sender(server)
        sender.send(4)
        sender.close()
        entries = prediction_logs(allowed, 4, server.log_path)
        assert len(entries) == 4
        assert all(p.name.startswith("relative.") for p in log_files(allowed, ".tfrecord"))
        assert list(outside.iterdir()) == []
    finally:
        channel.close()
        server.stop()


def test_the_operators_models_config_prefix_may_be_sent_back(tmp_path):
    """TF Serving users reload the list they started with: its prefix's folder is allowed,
    as a start-up base_path is; a sibling folder is not."""
    models = ranker_models(tmp_path, "")
    prefix = tmp_path / "tfs-logs" / "ranker_log"
    prefix.parent.mkdir()
    (tmp_path / "sibling").mkdir()
    config = models / "models.config"
    config.write_text(
        "model_config_list { config { "
        f'name: "ranker" base_path: "{models / "ranker"}" model_platform: "onnx" '
        f'logging_config {{ log_collector_config {{ filename_prefix: "{prefix}" }} '
        "sampling_config { sampling_rate: 1.0 } } } }\n")
    server = start_server(models, tmp_path / "server.log", ["--model-config-file", str(config)])
    channel = grpc.insecure_channel(server.grpc_target)
    try:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        reply = stub.HandleReloadConfigRequest(reload_with_prefix(models, str(prefix)), timeout=TIMEOUT)
        assert reply.status.error_code == 0
        refused(stub, reload_with_prefix(models, str(tmp_path / "sibling" / "ranker_log")))
        sender = Sender(server)
        sender.send(4)
        sender.close()
        assert len(prediction_logs(prefix.parent, 4, server.log_path)) == 4
    finally:
        channel.close()
        server.stop()


# Bytes any one file of the server may hold: its own log (a few KiB) fits well, the payload
# log of the requests below (about a KiB a line) does not.
FILE_LIMIT = 16 << 10


# The limit is set by prlimit, which execs the server, after a shell that ignores SIGXFSZ (an
# ignored signal stays ignored across exec): a write past the limit then fails with EFBIG, as on
# a full disk, instead of killing the process. A prefix, not a `preexec_fn` (see start_server).
LIMIT_FILE_SIZE = ["sh", "-c", f'trap "" XFSZ; exec prlimit --fsize={FILE_LIMIT} -- "$@"', "sh"]


@pytest.mark.parametrize("log_format", ["jsonl", "prediction_log"])
def test_a_full_log_file_system_counts_every_record_once_and_tears_none(tmp_path, log_format):
    logs = tmp_path / "logs"
    models = ranker_models(tmp_path, f'[logging]\npath = "{logs}"\nformat = "{log_format}"\n')
    server = start_server(models, tmp_path / "server.log", prefix=LIMIT_FILE_SIZE)
    sent = 120
    try:
        sender = Sender(server)
        sender.send(sent)  # every request answers (Sender asserts it)
        sender.close()

        def counts():
            written, lost = (metric(server, "tensorport_payload_log_records_total", model="ranker",
                                    outcome=outcome) for outcome in ("written", "write_error"))
            return (int(written), int(lost)) if written + lost == sent else None

        written, lost = wait_for(counts, server.log_path)
        assert lost > 0 and written > 0, (written, lost)
        assert metric(server, "tensorport_payload_log_records_total", model="ranker",
                      outcome="queue_full") == 0
        # What is on disk is exactly what was counted as written, every record whole.
        files = log_files(logs, ".jsonl" if log_format == "jsonl" else ".tfrecord")
        if log_format == "jsonl":
            texts = [f.read_text() for f in files]
            assert all(text.endswith("\n") for text in texts if text), "a torn line"
            on_disk = [json.loads(line) for text in texts for line in text.splitlines()]
        else:
            on_disk = [record for f in files for record in read_tfrecords(f)]
        assert len(on_disk) == written

        ready = requests.get(f"{server.rest_url}/readyz", timeout=TIMEOUT)
        assert ready.status_code == 200, ready.text
        detail = ready.json()["payload_log"]["ranker"]
        assert detail["records_lost"] == lost and "File too large" in detail["error"], detail
        assert str(tmp_path) not in ready.text
        log = read_log(server.log_path)
        assert "payload log lost" in log and "records" in log, log[-3000:]
    finally:
        server.stop()
