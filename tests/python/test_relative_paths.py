"""Paths on the operator's command line, against the real binary run from a folder of its own:
a relative --model_base_path and --model-dir start at the working directory, a models.config
kept in its own folder (the Kubernetes ConfigMap layout) may name an absolute base_path
elsewhere, and its re-read on the poll is the operator's too. A path sent over the network
(TF Serving's HandleReloadConfigRequest) is still confined to the roots, which include the
folders served at start-up.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import grpc
import pytest
import requests
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2

from tensorport_server import EXAMPLE_MODELS, read_log, start_server
from test_tfs_config import models_config, wait_for

TFS_PORTS = ["--port=0", "--rest_api_port=0"]


@contextlib.contextmanager
def running_in(cwd: Path, log: Path, args: list[str]):
    server = start_server(None, log, [*TFS_PORTS, *args], cwd=cwd)
    try:
        yield server
    finally:
        server.stop()


def ranker_at(folder: Path) -> Path:
    shutil.copytree(EXAMPLE_MODELS / "ranker", folder)
    return folder


def available(rest_url: str, model: str = "ranker") -> bool:
    reply = requests.get(f"{rest_url}/v1/models/{model}", timeout=5)
    states = [s["state"] for s in reply.json().get("model_version_status", [])] if reply.ok else []
    return "AVAILABLE" in states


def reload(server, *entries: tuple[str, str]):
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.SetInParent()
    for name, base_path in entries:
        entry = config.model_config_list.config.add()
        entry.name = name
        entry.base_path = base_path
    with grpc.insecure_channel(server.grpc_target) as channel:
        return model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest(
            model_management_pb2.ReloadConfigRequest(config=config), timeout=30)


@pytest.mark.parametrize("flags", [
    ["--model_name=ranker", "--model_base_path=models/ranker"],
    ["--model-base-path=models/ranker"],
    ["--model-dir=models/ranker"],
    ["--model-dir", "models"],
])
def test_relative_flags_start_at_the_working_directory(tmp_path, flags):
    ranker_at(tmp_path / "models" / "ranker")
    with running_in(tmp_path, tmp_path / "server.log", flags) as server:
        assert available(server.rest_url), read_log(server.log_path)


def test_a_config_in_its_own_folder_serves_absolute_paths_elsewhere(tmp_path):
    ranker = ranker_at(tmp_path / "models" / "ranker")
    moved = ranker_at(tmp_path / "volume" / "ranker")
    outside = ranker_at(tmp_path / "elsewhere" / "ranker")
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "models.config"
    config.write_text(models_config(f'name: "ranker" base_path: "{ranker}"'))
    args = ["--model_config_file=config/models.config", "--model_config_file_poll_wait_seconds=1"]
    with running_in(tmp_path, tmp_path / "server.log", args) as server:
        assert available(server.rest_url), read_log(server.log_path)

        # Over the network, a folder outside the roots is refused as before, and changes nothing.
        for base_path in (str(outside), "/proc", "../elsewhere/ranker"):
            with pytest.raises(grpc.RpcError) as refused:
                reload(server, ("ranker", base_path))
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value
            assert str(tmp_path) not in refused.value.details()
        assert available(server.rest_url)
        # The folder the operator's file served at start-up may be named again.
        assert reload(server, ("ranker", str(ranker))).status.error_code == 0
        assert available(server.rest_url)

        # The operator's file re-read on the poll is trusted as at start-up.
        config.write_text(models_config(f'name: "ranker" base_path: "{moved}"',
                                        'name: "copy" base_path: "../elsewhere/ranker"'))
        wait_for(lambda: available(server.rest_url, "copy"), server)
        assert available(server.rest_url)
        # A folder that does not exist leaves the models as they are.
        config.write_text(models_config('name: "ranker" base_path: "/no/such/folder"'))
        wait_for(lambda: "/no/such/folder is not an existing folder" in read_log(server.log_path),
                 server)
        assert available(server.rest_url) and available(server.rest_url, "copy")


def test_a_missing_start_up_folder_stops_the_start_naming_it(tmp_path):
    from tensorport_server import ServerStartError

    with pytest.raises(ServerStartError) as refused:
        start_server(None, tmp_path / "server.log", [*TFS_PORTS, "--model_base_path=models/ranker"],
                     cwd=tmp_path)
    message = str(refused.value)
    assert "exited with code" in message and "model directory models/ranker" in message, message
