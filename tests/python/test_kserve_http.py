"""KServe v2 / Triton protocol over HTTP (under /v2 on the REST port), with the real
`tritonclient.http` client (sync and asyncio) and raw requests where the wire format matters.
Outputs are compared to onnxruntime's own results on the same .onnx file."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from kserve_util import (KSERVE_DTYPES, TIMEOUT, assert_bytes_equal, bytes_values, hostport,
                         serialize_bytes)
from tfs import ECHO_TYPES, assert_close, echo_values, reference

X2 = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
X5 = (np.arange(5 * 16, dtype=np.float32).reshape(5, 16) - 40.0) / 17.0


def md_feeds():
    label = np.empty(2, dtype=object)
    label[:] = [b"alpha", "caf\u00e9".encode()]
    return {
        "x_double": np.array([[1.5, -2.0, 3.25], [0.1, 0.2, 0.3]], dtype=np.float64),
        "x_int32": np.array([[1, 2, -3], [7, 0, 5]], dtype=np.int32),
        "flag": np.array([[True, False, True], [True, True, False]]),
        "label": label,
    }


def http_inputs(feeds: dict, binary: bool):
    inputs = []
    for name, arr in feeds.items():
        dt = KSERVE_DTYPES["string" if arr.dtype == object else arr.dtype.name]
        i = httpclient.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    return inputs


# ---------------------------------------------------------------- health and metadata

def test_health_bodies_are_json(http, rest_url):
    for path, key in (("/v2/health/live", "live"), ("/v2/health/ready", "ready")):
        resp = http.get(rest_url + path, timeout=TIMEOUT)
        assert resp.status_code == 200, resp.text
        assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
        assert resp.json() == {key: True}


def test_server_live_ready_metadata(triton_http):
    assert triton_http.is_server_live()
    assert triton_http.is_server_ready()
    meta = triton_http.get_server_metadata()
    assert meta["name"]
    assert meta["version"]
    assert {"system_shared_memory", "binary_tensor_data"} <= set(meta["extensions"]), meta


def test_model_metadata(triton_http):
    meta = triton_http.get_model_metadata("ranker")
    assert meta["name"] == "ranker"
    assert meta["versions"] == ["2"]
    assert meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 16]}]
    assert meta["outputs"] == [{"name": "score", "datatype": "FP32", "shape": [-1, 1]}]

    md = triton_http.get_model_metadata("multi_dtype")
    assert {i["name"]: i["datatype"] for i in md["inputs"]} == {
        "x_double": "FP64", "x_int32": "INT32", "flag": "BOOL", "label": "BYTES"}
    assert {o["name"]: o["datatype"] for o in md["outputs"]} == {
        "weighted": "FP64", "count": "INT64", "tag": "BYTES"}

    v2 = triton_http.get_model_metadata("ranker", model_version="2")
    assert v2["name"] == "ranker"
    with pytest.raises(InferenceServerException) as err:
        triton_http.get_model_metadata("ranker", model_version="1")
    assert err.value.status() == "404", err.value
    with pytest.raises(InferenceServerException) as err:
        triton_http.get_model_metadata("nosuchmodel")
    assert err.value.status() == "404"
    assert "nosuchmodel" in err.value.message()


def test_model_ready(triton_http):
    assert triton_http.is_model_ready("ranker")
    assert triton_http.is_model_ready("ranker", model_version="2")
    assert not triton_http.is_model_ready("ranker", model_version="1")
    assert not triton_http.is_model_ready("broken")
    assert not triton_http.is_model_ready("nosuchmodel")


def test_model_config_json(triton_http, http, rest_url):
    cfg = triton_http.get_model_config("ranker")
    assert cfg["name"] == "ranker"
    assert cfg["max_batch_size"] > 0
    assert [(i["name"], i["data_type"], list(i["dims"])) for i in cfg["input"]] == [
        ("features", "TYPE_FP32", [16])]
    assert [(o["name"], o["data_type"], list(o["dims"])) for o in cfg["output"]] == [
        ("score", "TYPE_FP32", [1])]
    resp = http.get(f"{rest_url}/v2/models/ranker/versions/2/config", timeout=TIMEOUT)
    assert resp.status_code == 200 and resp.json() == cfg
    md = triton_http.get_model_config("multi_dtype")
    assert {i["name"]: i["data_type"] for i in md["input"]}["label"] == "TYPE_STRING"


def test_model_statistics_count_up(triton_http):
    def snapshot():
        stats = triton_http.get_inference_statistics("two_tower")["model_stats"]
        assert len(stats) == 1 and stats[0]["name"] == "two_tower" and stats[0]["version"] == "1"
        return stats[0]

    before = snapshot()
    feeds = {"user_id": np.array([3, 4, 5], dtype=np.int64), "item_id": np.array([17, 18, 19], dtype=np.int64)}
    triton_http.infer("two_tower", http_inputs(feeds, binary=True))
    after = snapshot()
    assert after["inference_count"] == before["inference_count"] + 3
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_stats"]["success"]["ns"] > before["inference_stats"]["success"]["ns"]
    assert after["last_inference"] >= before["last_inference"] and after["last_inference"] > 0
    all_stats = triton_http.get_inference_statistics()["model_stats"]
    assert {"ranker", "two_tower", "multi_dtype"} <= {s["name"] for s in all_stats}


def test_repository_index(triton_http, http, rest_url):
    index = triton_http.get_model_repository_index()
    by_name = {}
    for row in index:
        by_name.setdefault(row["name"], []).append(row)
    assert {"ranker", "two_tower", "multi_dtype", "echo_float16", "broken"} <= set(by_name)
    assert [(r["version"], r["state"]) for r in by_name["ranker"] if r["state"] == "READY"] == [("2", "READY")]
    broken = by_name["broken"]
    assert all(r["state"] == "UNAVAILABLE" for r in broken), broken
    assert all(r.get("reason") for r in broken), f"no reason given for broken: {broken}"

    # Raw POST, with and without a body; {"ready": true} leaves the broken model out.
    for kwargs in ({}, {"json": {}}):
        resp = http.post(f"{rest_url}/v2/repository/index", timeout=TIMEOUT, **kwargs)
        assert resp.status_code == 200, resp.text
        assert "broken" in {r["name"] for r in resp.json()}
    resp = http.post(f"{rest_url}/v2/repository/index", json={"ready": True}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    rows = resp.json()
    assert "broken" not in {r["name"] for r in rows}
    assert "ranker" in {r["name"] for r in rows}
    assert all(r["state"] == "READY" for r in rows)


# ---------------------------------------------------------------- inference, raw JSON

@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_infer_json_flat_and_nested(http, rest_url, nested):
    data = X2.tolist() if nested else X2.reshape(-1).tolist()
    body = {"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32", "data": data}]}
    resp = http.post(f"{rest_url}/v2/models/ranker/infer", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["model_name"] == "ranker" and out["model_version"] == "2"
    (score,) = out["outputs"]
    assert score["name"] == "score" and score["datatype"] == "FP32" and score["shape"] == [2, 1]
    got = np.array(score["data"], dtype=np.float32).reshape(score["shape"])
    assert_close(got, reference("ranker", 2, {"features": X2})["score"])


@pytest.mark.parametrize("path", [
    "/v2/models/{m}/infer", "/v2/models/{m}/versions/2/infer", "/v1/models/{m}:predict",
    "/v1/models/{m}/versions/2:predict",
])
def test_inference_answers_alike_whichever_way_it_is_routed(http, rest_url, path):
    """Inference paths are matched ahead of the router; a percent-escaped name, which only
    the router decodes, must get the same answer, and so must every bad request."""
    if path.startswith("/v1/"):
        good = {"instances": X2.tolist()}
        bad = {"instances": [[1.0, 2.0]]}
    else:
        good = {"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                            "data": X2.reshape(-1).tolist()}]}
        bad = {"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32", "data": [1]}]}
    answers = []
    for model in ("ranker", "rank%65r"):
        url = rest_url + path.format(m=model)
        ok = http.post(url, json=good, timeout=TIMEOUT)
        assert ok.status_code == 200, (url, ok.text)
        refused = http.post(url, json=bad, timeout=TIMEOUT)
        unknown = http.post(url.replace(model, "no_such_model"), json=good, timeout=TIMEOUT)
        wrong_method = http.get(url, timeout=TIMEOUT)
        answers.append([(r.status_code, r.headers.get("allow"), r.json())
                        for r in (ok, refused, unknown, wrong_method)])
    assert answers[0] == answers[1]
    statuses = [(status, allow) for status, allow, _ in answers[0]]
    assert statuses == [(200, None), (400, None), (404, None), (405, "POST")], answers[0]


@pytest.mark.parametrize("content_type", [None, "application/json", "application/octet-stream",
                                          "application/x-www-form-urlencoded"])
def test_content_types_accepted(http, rest_url, content_type):
    want = reference("ranker", 2, {"features": X2})["score"]
    headers = {} if content_type is None else {"Content-Type": content_type}
    body = json.dumps({"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                                   "data": X2.reshape(-1).tolist()}]}).encode()
    resp = http.post(f"{rest_url}/v2/models/ranker/infer", data=body, headers=headers, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    assert_close(np.array(resp.json()["outputs"][0]["data"], dtype=np.float32).reshape(2, 1), want)

    # The binary extension under the same Content-Type.
    raw = X2.tobytes()
    header = json.dumps({"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    resp = http.post(f"{rest_url}/v2/models/ranker/infer", data=header + raw,
                     headers={**headers, "Inference-Header-Content-Length": str(len(header))},
                     timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    assert_close(np.array(resp.json()["outputs"][0]["data"], dtype=np.float32).reshape(2, 1), want)


def test_request_id_echoed_and_output_subset_raw(http, rest_url):
    feeds = md_feeds()
    body = {
        "id": "req-\u00e9-42",
        "inputs": [
            {"name": "x_double", "shape": [2, 3], "datatype": "FP64", "data": feeds["x_double"].reshape(-1).tolist()},
            {"name": "x_int32", "shape": [2, 3], "datatype": "INT32", "data": feeds["x_int32"].reshape(-1).tolist()},
            {"name": "flag", "shape": [2, 3], "datatype": "BOOL", "data": feeds["flag"].reshape(-1).tolist()},
            {"name": "label", "shape": [2], "datatype": "BYTES", "data": [b.decode() for b in feeds["label"]]},
        ],
        "outputs": [{"name": "count"}],
    }
    resp = http.post(f"{rest_url}/v2/models/multi_dtype/infer", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["id"] == "req-\u00e9-42"
    assert [o["name"] for o in out["outputs"]] == ["count"]
    (count,) = out["outputs"]
    assert count["datatype"] == "INT64" and count["shape"] == [2]
    assert_close(np.array(count["data"], dtype=np.int64), reference("multi_dtype", 1, feeds)["count"])


def test_binary_data_output_request_parameter(http, rest_url):
    """Request-level binary_data_output: every output comes back in the binary extension."""
    raw = X5.tobytes()
    header = json.dumps({
        "inputs": [{"name": "features", "shape": [5, 16], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)}}],
        "parameters": {"binary_data_output": True},
    }).encode()
    resp = http.post(f"{rest_url}/v2/models/ranker/infer", data=header + raw,
                     headers={"Inference-Header-Content-Length": str(len(header))}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    n = int(resp.headers["Inference-Header-Content-Length"])
    meta = json.loads(resp.content[:n])
    (score,) = meta["outputs"]
    assert "data" not in score
    size = score["parameters"]["binary_data_size"]
    assert size == 5 * 4 and len(resp.content) == n + size
    got = np.frombuffer(resp.content[n:], dtype="<f4").reshape(score["shape"])
    assert_close(got, reference("ranker", 2, {"features": X5})["score"])


# ---------------------------------------------------------------- inference, tritonclient

@pytest.mark.parametrize("binary_in,binary_out", [(False, False), (True, False), (False, True), (True, True)])
def test_multi_dtype_tritonclient(triton_http, binary_in, binary_out):
    feeds = md_feeds()
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary_out) for n in ("weighted", "count", "tag")]
    result = triton_http.infer("multi_dtype", http_inputs(feeds, binary_in), outputs=outputs,
                               request_id="md-1")
    resp = result.get_response()
    assert resp["id"] == "md-1"
    want = reference("multi_dtype", 1, feeds)
    for o in resp["outputs"]:
        assert ("parameters" in o and "binary_data_size" in o["parameters"]) == binary_out, o
    assert_close(result.as_numpy("weighted"), want["weighted"])
    assert_close(result.as_numpy("count"), want["count"])
    tag = result.as_numpy("tag")
    assert tag.shape == (2,)
    assert [t if isinstance(t, bytes) else str(t).encode() for t in tag] == list(feeds["label"])


def test_requested_output_subset_tritonclient(triton_http):
    feeds = md_feeds()
    result = triton_http.infer("multi_dtype", http_inputs(feeds, True),
                               outputs=[httpclient.InferRequestedOutput("count", binary_data=True)])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["count"]
    assert result.as_numpy("weighted") is None
    assert_close(result.as_numpy("count"), reference("multi_dtype", 1, feeds)["count"])


@pytest.mark.parametrize("dtype", ECHO_TYPES)
def test_echo_every_dtype_binary(triton_http, dtype):
    x = bytes_values() if dtype == "string" else echo_values(dtype)
    kd = KSERVE_DTYPES[dtype]
    i = httpclient.InferInput("x", list(x.shape), kd)
    i.set_data_from_numpy(x, binary_data=True)
    result = triton_http.infer(f"echo_{dtype}", [i], outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
    (out,) = result.get_response()["outputs"]
    assert out["datatype"] == kd and out["shape"] == [2, 3]
    got = result.as_numpy("y")
    if dtype == "string":
        # Identity: exactly the bytes sent (non-UTF-8, NUL bytes included).
        assert_bytes_equal(got, x)
        assert result.get_output("y")["parameters"]["binary_data_size"] == len(serialize_bytes(x))
    else:
        assert got.dtype == x.dtype
        assert_close(got, reference(f"echo_{dtype}", 1, {"x": x})["y"])
        np.testing.assert_array_equal(got, x)


def test_echo_bytes_json(triton_http):
    x = echo_values("string", for_json=True)
    i = httpclient.InferInput("x", [2, 3], "BYTES")
    i.set_data_from_numpy(x, binary_data=False)
    result = triton_http.infer("echo_string", [i], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
    assert "data" in result.get_output("y")
    assert_close(result.as_numpy("y"), reference("echo_string", 1, {"x": x})["y"])


def test_versions(triton_http):
    i = http_inputs({"features": X2}, binary=True)
    v2 = triton_http.infer("ranker", i, model_version="2")
    assert v2.get_response()["model_version"] == "2"
    assert_close(v2.as_numpy("score"), reference("ranker", 2, {"features": X2})["score"])
    latest = triton_http.infer("ranker", i)
    assert latest.get_response()["model_version"] == "2"
    # Version 1 exists on disk but is not served (only the newest is).
    with pytest.raises(InferenceServerException) as err:
        triton_http.infer("ranker", i, model_version="1")
    assert err.value.status() == "404", err.value
    assert "1" in err.value.message() and "version" in err.value.message().lower()


def test_asyncio_http_client(server):
    feeds = md_feeds()
    want_md = reference("multi_dtype", 1, feeds)
    want_r = reference("ranker", 2, {"features": X5})["score"]

    async def main():
        client = aiohttpclient.InferenceServerClient(hostport(server.rest_url))
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("ranker")
            meta = await client.get_server_metadata()
            assert "system_shared_memory" in meta["extensions"]
            i = aiohttpclient.InferInput("features", [5, 16], "FP32")
            i.set_data_from_numpy(X5, binary_data=True)
            ranker, md = await asyncio.gather(
                client.infer("ranker", [i], request_id="aio-r"),
                client.infer("multi_dtype", http_inputs(feeds, True),
                             outputs=[aiohttpclient.InferRequestedOutput("weighted", binary_data=True),
                                      aiohttpclient.InferRequestedOutput("count", binary_data=False)]),
            )
            return ranker, md
        finally:
            await client.close()

    ranker, md = asyncio.run(main())
    assert ranker.get_response()["id"] == "aio-r"
    assert_close(ranker.as_numpy("score"), want_r)
    assert_close(md.as_numpy("weighted"), want_md["weighted"])
    assert_close(md.as_numpy("count"), want_md["count"])
    assert md.as_numpy("tag") is None


# ---------------------------------------------------------------- long JSON tensors

LONG = np.random.default_rng(17).standard_normal((4, 40_000)).astype(np.float32)


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_long_json_tensor_reads_exactly(http, rest_url, nested):
    # 160,000 float32s printed as float64s (about 3 MB of text): long enough to be read in
    # pieces on helper threads where the server has a core to spare; every value must come
    # back bit for bit, in order.
    data = LONG.tolist() if nested else LONG.reshape(-1).tolist()
    body = {"inputs": [{"name": "x", "shape": list(LONG.shape), "datatype": "FP32", "data": data}]}
    resp = http.post(f"{rest_url}/v2/models/echo_float32/infer", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text[:300]
    (y,) = resp.json()["outputs"]
    assert y["shape"] == list(LONG.shape)
    got = np.array(y["data"], dtype=np.float32).reshape(LONG.shape)
    assert np.array_equal(got.view(np.uint32), LONG.view(np.uint32))


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
def test_long_json_tensor_with_a_bad_element_is_refused_by_position(http, rest_url, where):
    # One element that is not a number, early, in the middle (where a cut between pieces
    # may fall) or late: refused as the one-thread reading refuses it, naming the input.
    data = LONG.reshape(-1).tolist()
    data[int(len(data) * where)] = "not a number"
    body = {"inputs": [{"name": "x", "shape": list(LONG.shape), "datatype": "FP32", "data": data}]}
    resp = http.post(f"{rest_url}/v2/models/echo_float32/infer", json=body, timeout=TIMEOUT)
    assert resp.status_code == 400, resp.text[:300]
    error = resp.json()["error"]
    assert "'x'" in error and "not a number" in error, error


def test_long_json_tensor_with_too_few_elements_is_refused(http, rest_url):
    data = LONG.reshape(-1).tolist()[:-1]
    body = {"inputs": [{"name": "x", "shape": list(LONG.shape), "datatype": "FP32", "data": data}]}
    resp = http.post(f"{rest_url}/v2/models/echo_float32/infer", json=body, timeout=TIMEOUT)
    assert resp.status_code == 400, resp.text[:300]
    error = resp.json()["error"]
    assert "'x'" in error and "159999" in error and "160000" in error, error
