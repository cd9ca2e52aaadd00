"""The response cache against the real binary with tritonclient: `--cache-config local,size=N`
(Triton's flag) and a model that opts in with `[response_cache] enable = true` answer an
identical request from the cache (counted in `cache_hit`, as Triton's statistics count it), any
difference in the inputs or the requested outputs misses, a model that did not opt in is never
cached, and a client rewriting its shared-memory input while a request runs cannot make the
cache answer anyone else with that run's result."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
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
