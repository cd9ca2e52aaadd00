"""TF Serving's `--platform_config_file` read at start-up: a real project's file
(tests/migration/tfserving-platform/SOURCES.md) with TF Serving's Docker command line, and
one whose session threads and batching parameters tensorport applies."""

from __future__ import annotations

import socket
import subprocess

import requests

from tensorport_server import EXAMPLE_MODELS, REPO, server_binary, start_server

PLATFORM = REPO / "tests" / "migration" / "tfserving-platform"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tf_serving_line(platform_config) -> tuple[list[str], int]:
    rest_port = free_port()
    return ([f"--port={free_port()}", f"--rest_api_port={rest_port}", "--model_name=ranker",
             "--model_base_path=" + str(EXAMPLE_MODELS / "ranker"),
             f"--platform_config_file={platform_config}"], rest_port)


def test_a_real_platform_config_serves_and_names_the_gpu_fields(tmp_path):
    line, rest_port = tf_serving_line(PLATFORM / "warmup-example.platform.config")
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tensorflow_model_server"])
    try:
        predict = requests.post(f"http://127.0.0.1:{rest_port}/v1/models/ranker:predict",
                                json={"instances": [[0.5] * 16]}, timeout=10)
        assert predict.status_code == 200, predict.text
        log = server.log()
        assert "--platform-config-file sets fields this server does not apply" in log, log
        for field in ("session_config.gpu_options.per_process_gpu_memory_fraction",
                      "session_config.gpu_options.allow_growth", "enable_model_warmup"):
            assert field in log, field
    finally:
        server.stop()


def test_session_threads_and_batching_parameters_are_applied(tmp_path):
    config = tmp_path / "platform.config"
    config.write_text("""platform_configs {
  key: "tensorflow"
  value {
    source_adapter_config {
      [type.googleapis.com/tensorflow.serving.SavedModelBundleSourceAdapterConfig] {
        legacy_config {
          session_config { intra_op_parallelism_threads: 2 inter_op_parallelism_threads: 1 }
          batching_parameters { max_batch_size { value: 16 } batch_timeout_micros { value: 100 } }
        }
      }
    }
  }
}
""")
    line, rest_port = tf_serving_line(config)
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tensorflow_model_server"])
    try:
        predict = requests.post(f"http://127.0.0.1:{rest_port}/v1/models/ranker:predict",
                                json={"instances": [[0.5] * 16, [0.25] * 16]}, timeout=10)
        assert predict.status_code == 200, predict.text
        log = server.log()
        assert "batching on for models without batching settings of their own" in log, log
        assert "max_batch_size=16" in log and "max_queue_delay_us=100" in log, log
        assert "does not apply" not in log, log
    finally:
        server.stop()


def test_a_custom_source_adapter_stops_the_start_naming_the_file(tmp_path):
    config = PLATFORM / "hashmap.platform.config"
    line, _ = tf_serving_line(config)
    done = subprocess.run([str(server_binary()), "tensorflow_model_server", *line],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert str(config) in done.stderr and "HashmapSourceAdapterConfig" in done.stderr, done.stderr
