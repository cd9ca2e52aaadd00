"""The response cache against the real binary with tritonclient: `--cache-config local,size=N`
(Triton's flag) and a model that opts in with `[response_cache] enable = true` answer an
identical request from the cache (counted in `cache_hit`, as Triton's statistics count it), any
difference in the inputs or the requested outputs misses, a model that did not opt in is never
cached, and a client rewriting its shared-memory input while a request runs cannot make the
cache answer anyone else with that run's result.

/metrics carries Triton's per-model cache families (`nv_cache_num_hits_per_model`,
`nv_cache_num_misses_per_model`, `nv_cache_hit_duration_per_model`,
`nv_cache_miss_duration_per_model`, labelled `model` and `version`) and the store's own
`tensorport_response_cache_*` figures."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tensorport_server import EXAMPLE_MODELS, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    models = root / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "cached")
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "uncached")
    for name in ("cached", "uncached"):
        (models / name / "config.toml").unlink(missing_ok=True)
    (models / "cached" / "config.toml").write_text("[response_cache]\nenable = true\n")
    server = start_server(models, root / "server.log", ["--cache-config", "local,size=1048576"])
    yield server
    server.stop()


def _cache_counts(client, model: str) -> tuple[int, int]:
    if isinstance(client, grpcclient.InferenceServerClient):
        answer = client.get_inference_statistics(model, as_json=True)
    else:
        answer = client.get_inference_statistics(model)
    [stats] = answer["model_stats"]
    inference = stats["inference_stats"]
    # protobuf's JSON leaves zero counts out.
    count = lambda name: int(inference.get(name, {}).get("count", 0))  # noqa: E731
    return count("cache_hit"), count("cache_miss")


SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def _scrape(server) -> str:
    answer = requests.get(f"{server.rest_url}/metrics", timeout=10)
    answer.raise_for_status()
    return answer.text


def _sample(text: str, name: str, labels: str = "") -> float:
    """The value of the sample `name{labels}` (labels as written, without braces)."""
    for line in text.splitlines():
        match = SAMPLE_RE.match(line)
        if match and match.group(1) == name and (match.group(2) or "{}")[1:-1] == labels:
            return float(match.group(3))
    raise AssertionError(f"no sample {name}{{{labels}}} in\n{text}")


def _features(module, value: float):
    features = module.InferInput("features", [1, 16], "FP32")
    features.set_data_from_numpy(np.full((1, 16), value, dtype=np.float32))
    return features


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_an_identical_request_is_answered_from_the_cache(server, module):
    target = server.rest_url.removeprefix("http://") if module is httpclient else server.grpc_target
    client = module.InferenceServerClient(target)
    value = 0.25 if module is httpclient else 0.75
    hits, misses = _cache_counts(client, "cached")
    first = client.infer("cached", [_features(module, value)]).as_numpy("score")
    assert _cache_counts(client, "cached") == (hits, misses + 1)
    second = client.infer("cached", [_features(module, value)]).as_numpy("score")
    assert _cache_counts(client, "cached") == (hits + 1, misses + 1)
    np.testing.assert_array_equal(first, second)
    # Different inputs miss, and are answered for what they are.
    other = client.infer("cached", [_features(module, value + 1.0)]).as_numpy("score")
    assert _cache_counts(client, "cached") == (hits + 1, misses + 2)
    uncached = client.infer("uncached", [_features(module, value + 1.0)]).as_numpy("score")
    np.testing.assert_allclose(other, uncached, rtol=1e-6)


def test_a_model_that_did_not_opt_in_is_never_cached(server):
    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    for _ in range(3):
        client.infer("uncached", [_features(httpclient, 0.5)])
    assert _cache_counts(client, "uncached") == (0, 0)


def test_many_distinct_requests_stay_within_the_cache_and_are_all_answered_right(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    # Far more distinct answers than a 1 MiB cache holds with their keys: old ones are evicted,
    # and every answer, hit or miss, is the model's own.
    for i in range(3000):
        value = 10.0 + i
        got = client.infer("cached", [_features(grpcclient, value)]).as_numpy("score")
        if i % 500 == 0:
            want = client.infer("uncached", [_features(grpcclient, value)]).as_numpy("score")
            np.testing.assert_allclose(got, want, rtol=1e-6)
    again = client.infer("cached", [_features(grpcclient, 10.0 + 2999)]).as_numpy("score")
    want = client.infer("uncached", [_features(grpcclient, 10.0 + 2999)]).as_numpy("score")
    np.testing.assert_allclose(again, want, rtol=1e-6)


def test_tritons_cache_families_move_with_hits_and_misses(server):
    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    labels = 'model="cached",version="2"'
    before = _scrape(server)
    hits = _sample(before, "nv_cache_num_hits_per_model", labels)
    misses = _sample(before, "nv_cache_num_misses_per_model", labels)
    client.infer("cached", [_features(httpclient, -7.5)])
    client.infer("cached", [_features(httpclient, -7.5)])
    client.infer("cached", [_features(httpclient, -7.5)])
    text = _scrape(server)
    assert _sample(text, "nv_cache_num_hits_per_model", labels) == hits + 2
    assert _sample(text, "nv_cache_num_misses_per_model", labels) == misses + 1
    assert "# TYPE nv_cache_hit_duration_per_model counter" in text
    assert _sample(text, "nv_cache_miss_duration_per_model", labels) >= 0
    assert _sample(text, "nv_cache_hit_duration_per_model", labels) >= 0
    # As Triton, only models that enable the cache are reported.
    assert 'nv_cache_num_hits_per_model{model="uncached"' not in text
    assert _sample(text, "tensorport_response_cache_capacity_bytes") == 1048576
    assert _sample(text, "tensorport_response_cache_entries") >= 1


def test_the_store_metrics_stay_within_capacity_under_many_distinct_keys(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    capacity = _sample(_scrape(server), "tensorport_response_cache_capacity_bytes")
    for i in range(4000):
        client.infer("cached", [_features(grpcclient, 50_000.0 + i)])
        if i % 400 == 0:
            text = _scrape(server)
            assert 0 < _sample(text, "tensorport_response_cache_bytes") <= capacity
    text = _scrape(server)
    assert 0 < _sample(text, "tensorport_response_cache_bytes") <= capacity
    assert _sample(text, "tensorport_response_cache_evictions_total") > 0
    assert _sample(text, "tensorport_response_cache_insert_refused_total") == 0


def test_an_answer_larger_than_the_cache_is_refused_and_counted(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "cached")
    (models / "cached" / "config.toml").unlink(missing_ok=True)
    (models / "cached" / "config.toml").write_text("[response_cache]\nenable = true\n")
    # 64 bytes hold no entry: every answer is refused, and answered right all the same.
    small = start_server(models, tmp_path / "server.log", ["--cache-config", "local,size=64"])
    try:
        client = httpclient.InferenceServerClient(small.rest_url.removeprefix("http://"))
        first = client.infer("cached", [_features(httpclient, 1.0)]).as_numpy("score")
        second = client.infer("cached", [_features(httpclient, 1.0)]).as_numpy("score")
        np.testing.assert_array_equal(first, second)
        text = _scrape(small)
        assert _sample(text, "tensorport_response_cache_insert_refused_total") == 2
        assert _sample(text, "tensorport_response_cache_entries") == 0
        assert _sample(text, "tensorport_response_cache_bytes") == 0
        assert _sample(text, "nv_cache_num_misses_per_model", 'model="cached",version="2"') == 2
    finally:
        small.stop()


def test_a_scrape_with_the_cache_passes_promtool(server):
    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    client.infer("cached", [_features(httpclient, 3.25)])
    checked = subprocess.run(["promtool", "check", "metrics"], input=_scrape(server),
                             capture_output=True, text=True, timeout=60)
    # 0: clean; 3: style problems only (a parse error is 1), and only in Triton's own names.
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr
    problems = [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]
    assert all(p.startswith(("nv_", ":tensorflow:")) for p in problems), problems


def test_a_rewritten_shared_memory_input_is_keyed_by_its_new_bytes(server):
    import threading

    import tritonclient.utils.shared_memory as shm

    from kserve_util import ShmRegions

    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    regions = ShmRegions()
    try:
        name, key, handle = regions.create(16 * 4, "cache_in")
        regions.register(client, name, key, 16 * 4)

        def from_region():
            features = httpclient.InferInput("features", [1, 16], "FP32")
            features.set_shared_memory(name, 16 * 4)
            return client.infer("cached", [features]).as_numpy("score")

        def uncached(value: np.ndarray):
            features = httpclient.InferInput("features", [1, 16], "FP32")
            features.set_data_from_numpy(value)
            return client.infer("uncached", [features]).as_numpy("score")

        first = np.full((1, 16), 123.0, dtype=np.float32)
        shm.set_shared_memory_region(handle, [first])
        from_region()
        hits, misses = _cache_counts(client, "cached")
        np.testing.assert_allclose(from_region(), uncached(first), rtol=1e-6)
        assert _cache_counts(client, "cached") == (hits + 1, misses)
        # The client rewrites the region: the next request is keyed by the new bytes.
        second = np.full((1, 16), -321.0, dtype=np.float32)
        shm.set_shared_memory_region(handle, [second])
        np.testing.assert_allclose(from_region(), uncached(second), rtol=1e-6)
        assert _cache_counts(client, "cached") == (hits + 1, misses + 1)

        # Rewrites racing the runs: whatever was read, what is cached answers its own key.
        values = [np.full((1, 16), 1000.0 + i, dtype=np.float32) for i in range(2)]
        stop = threading.Event()

        def rewrite() -> None:
            turn = 0
            while not stop.is_set():
                shm.set_shared_memory_region(handle, [values[turn % 2]])
                turn += 1

        writer = threading.Thread(target=rewrite)
        writer.start()
        try:
            for _ in range(200):
                from_region()
        finally:
            stop.set()
            writer.join()
        for value in values:
            cached = client.infer("cached", [_features(httpclient, float(value[0, 0]))]).as_numpy("score")
            np.testing.assert_allclose(cached, uncached(value), rtol=1e-6)
    finally:
        assert not regions.close()


# Triton's own response cache test model, its config.pbtxt served as-is (its backend is Triton's
# identity backend; here an ONNX Identity graph of the same tensors stands in for it):
# triton-inference-server/server@d4ca3c6eff967b77f6b9aa4f382d1d500695a154:qa/L0_response_cache/models/identity_cache/config.pbtxt
IDENTITY_CACHE_PBTXT = """\
backend: "identity"
max_batch_size: 0
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]

response_cache {
  enable: True
}
"""


def _identity_onnx(path):
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity_cache",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))


@pytest.fixture(scope="module")
def identity_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity_cache")
    model = root / "models" / "identity_cache"
    _identity_onnx(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(IDENTITY_CACHE_PBTXT)
    # Triton's identity backend is not served here; a config.toml beside the untouched pbtxt
    # names the ONNX Runtime platform for the stand-in (config.toml wins where both speak).
    onnx_platform = 'platform = "onnxruntime_onnx"\n'
    (model / "config.toml").write_text(onnx_platform)
    # The same pbtxt, with a config.toml that also turns the cache off.
    off = root / "models" / "identity_cache_off"
    shutil.copytree(model, off)
    (off / "config.toml").write_text(onnx_platform + "[response_cache]\nenable = false\n")
    # Triton's L0_response_cache starts its server with --cache-config local,size=...
    server = start_server(root / "models", root / "server.log", ["--cache-config", "local,size=1048576"])
    yield server
    server.stop()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_tritons_identity_cache_model_counts_hits_and_misses_as_triton(identity_cache, module):
    target = (identity_cache.rest_url.removeprefix("http://") if module is httpclient
              else identity_cache.grpc_target)
    client = module.InferenceServerClient(target)
    value = np.arange(8, dtype=np.float32) + (0.5 if module is httpclient else 100.5)

    def infer():
        given = module.InferInput("INPUT0", list(value.shape), "FP32")
        given.set_data_from_numpy(value)
        return client.infer("identity_cache", [given]).as_numpy("OUTPUT0")

    hits, misses = _cache_counts(client, "identity_cache")
    np.testing.assert_array_equal(infer(), value)
    assert _cache_counts(client, "identity_cache") == (hits, misses + 1)
    for _ in range(3):
        np.testing.assert_array_equal(infer(), value)
    assert _cache_counts(client, "identity_cache") == (hits + 3, misses + 1)
    labels = 'model="identity_cache",version="1"'
    text = _scrape(identity_cache)
    assert _sample(text, "nv_cache_num_hits_per_model", labels) == hits + 3
    assert _sample(text, "nv_cache_num_misses_per_model", labels) == misses + 1


def test_config_toml_turns_off_a_cache_the_pbtxt_enables(identity_cache):
    client = httpclient.InferenceServerClient(identity_cache.rest_url.removeprefix("http://"))
    value = np.arange(4, dtype=np.float32)
    for _ in range(3):
        given = httpclient.InferInput("INPUT0", [4], "FP32")
        given.set_data_from_numpy(value)
        np.testing.assert_array_equal(
            client.infer("identity_cache_off", [given]).as_numpy("OUTPUT0"), value)
    assert _cache_counts(client, "identity_cache_off") == (0, 0)
    assert 'nv_cache_num_hits_per_model{model="identity_cache_off"' not in _scrape(identity_cache)
