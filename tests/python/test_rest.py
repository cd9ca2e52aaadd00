"""REST API, checked against TensorFlow Serving's documented behaviour
(https://www.tensorflow.org/tfx/serving/api_rest)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tfs import assert_close, echo_values, reference

RNG = np.random.default_rng(1234)
RANKER_X = RNG.standard_normal((4, 16)).astype(np.float32)

AVAILABLE_V2 = {
    "model_version_status": [
        {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
}


def ok_json(resp):
    assert resp.status_code == 200, f"HTTP {resp.status_code}: {resp.text[:500]}"
    assert "json" in resp.headers.get("content-type", ""), resp.headers.get("content-type")
    return resp.json()


def ranker_ref(x=RANKER_X, version=2):
    return reference("ranker", version, {"features": x})["score"]


# --- model status -----------------------------------------------------------------

def test_model_status_latest_only(http, rest_url):
    assert ok_json(http.get(f"{rest_url}/v1/models/ranker")) == AVAILABLE_V2


def test_model_status_specific_version(http, rest_url):
    assert ok_json(http.get(f"{rest_url}/v1/models/ranker/versions/2")) == AVAILABLE_V2


def test_model_status_single_version_model(http, rest_url):
    body = ok_json(http.get(f"{rest_url}/v1/models/two_tower"))
    assert body == {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}


# --- metadata ---------------------------------------------------------------------

def _dims(tensor_info):
    shape = tensor_info["tensor_shape"]
    assert shape.get("unknown_rank", False) is False
    for d in shape["dim"]:
        assert d.get("name", "") == ""
    return [d["size"] for d in shape["dim"]]


def _check_ranker_metadata(body):
    assert body["model_spec"]["name"] == "ranker"
    assert body["model_spec"]["version"] == "2"
    assert body["model_spec"].get("signature_name", "") == ""
    sigs = body["metadata"]["signature_def"]["signature_def"]
    assert "serving_default" in sigs
    sig = sigs["serving_default"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert set(sig["inputs"]) == {"features"}
    assert set(sig["outputs"]) == {"score"}
    features = sig["inputs"]["features"]
    assert features["dtype"] == "DT_FLOAT"
    assert features["name"] == "features"
    assert _dims(features) == ["-1", "16"]
    score = sig["outputs"]["score"]
    assert score["dtype"] == "DT_FLOAT"
    assert score["name"] == "score"
    assert _dims(score) == ["-1", "1"]


def test_metadata_latest(http, rest_url):
    _check_ranker_metadata(ok_json(http.get(f"{rest_url}/v1/models/ranker/metadata")))


def test_metadata_specific_version(http, rest_url):
    _check_ranker_metadata(ok_json(http.get(f"{rest_url}/v1/models/ranker/versions/2/metadata")))


def test_metadata_multi_dtype(http, rest_url):
    body = ok_json(http.get(f"{rest_url}/v1/models/multi_dtype/metadata"))
    assert body["model_spec"]["version"] == "1"
    sig = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    ins = {k: (v["dtype"], _dims(v)) for k, v in sig["inputs"].items()}
    outs = {k: (v["dtype"], _dims(v)) for k, v in sig["outputs"].items()}
    assert ins == {
        "x_double": ("DT_DOUBLE", ["-1", "3"]),
        "x_int32": ("DT_INT32", ["-1", "3"]),
        "flag": ("DT_BOOL", ["-1", "3"]),
        "label": ("DT_STRING", ["-1"]),
    }
    assert outs == {
        "weighted": ("DT_DOUBLE", ["-1", "3"]),
        "count": ("DT_INT64", ["-1"]),
        "tag": ("DT_STRING", ["-1"]),
    }


# --- predict: ranker (single input, single output) ---------------------------------

def test_ranker_predict_row_format(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"instances": RANKER_X.tolist()}))
    assert set(body) == {"predictions"}
    assert_close(np.array(body["predictions"], dtype=np.float32), ranker_ref())


def test_ranker_predict_with_signature_name(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"signature_name": "serving_default", "instances": RANKER_X.tolist()}))
    assert_close(np.array(body["predictions"], dtype=np.float32), ranker_ref())


def test_ranker_predict_specific_version(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker/versions/2:predict",
                             json={"instances": RANKER_X.tolist()}))
    assert_close(np.array(body["predictions"], dtype=np.float32), ranker_ref())


def test_ranker_versions_differ():
    # Sanity check on the fixtures: v1 and v2 really are different models, so the
    # tests above would notice if the server served version 1.
    assert not np.allclose(ranker_ref(version=1), ranker_ref(version=2), rtol=1e-3, atol=1e-3)


def test_ranker_predict_columnar_named(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"inputs": {"features": RANKER_X.tolist()}}))
    assert set(body) == {"outputs"}
    # A single output: the value itself, not an object keyed by name.
    assert isinstance(body["outputs"], list)
    assert_close(np.array(body["outputs"], dtype=np.float32), ranker_ref())


def test_ranker_predict_columnar_single_input_shorthand(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"inputs": RANKER_X.tolist()}))
    assert isinstance(body["outputs"], list)
    assert_close(np.array(body["outputs"], dtype=np.float32), ranker_ref())


def test_ranker_predict_single_instance(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"instances": RANKER_X[:1].tolist()}))
    assert len(body["predictions"]) == 1
    assert_close(np.array(body["predictions"], dtype=np.float32), ranker_ref(RANKER_X[:1]))


def test_ranker_predict_accepts_integers_for_float(http, rest_url):
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = ok_json(http.post(f"{rest_url}/v1/models/ranker:predict",
                             json={"instances": [list(range(16))]}))
    assert_close(np.array(body["predictions"], dtype=np.float32), ranker_ref(x))


# --- predict: two_tower (two int64 inputs) -----------------------------------------

USERS = np.array([3, 0, 99, 42], dtype=np.int64)
ITEMS = np.array([17, 999, 0, 500], dtype=np.int64)


def two_tower_ref():
    return reference("two_tower", 1, {"user_id": USERS, "item_id": ITEMS})["score"]


def test_two_tower_row_format(http, rest_url):
    instances = [{"user_id": int(u), "item_id": int(i)} for u, i in zip(USERS, ITEMS)]
    body = ok_json(http.post(f"{rest_url}/v1/models/two_tower:predict", json={"instances": instances}))
    preds = body["predictions"]
    assert isinstance(preds, list) and len(preds) == 4
    assert all(isinstance(p, (int, float)) for p in preds), preds
    assert_close(np.array(preds, dtype=np.float32), two_tower_ref())


def test_two_tower_columnar(http, rest_url):
    body = ok_json(http.post(f"{rest_url}/v1/models/two_tower:predict",
                             json={"inputs": {"user_id": USERS.tolist(), "item_id": ITEMS.tolist()}}))
    assert isinstance(body["outputs"], list)
    assert_close(np.array(body["outputs"], dtype=np.float32), two_tower_ref())


# --- predict: multi_dtype (several inputs and outputs) -----------------------------

MD = {
    "x_double": np.array([[1.5, -2.0, 0.25], [3.0, 4.5, -1.0]], dtype=np.float64),
    "x_int32": np.array([[2, 3, -4], [0, 7, 100000]], dtype=np.int32),
    "flag": np.array([[True, False, True], [True, True, False]]),
    "label": np.array(["a", "caf\u00e9"], dtype=object),
}


def md_ref(feeds=MD):
    return reference("multi_dtype", 1, feeds)


def _check_md_row(pred, ref, i):
    assert set(pred) == {"weighted", "count", "tag"}, pred
    assert_close(np.array(pred["weighted"], dtype=np.float64), ref["weighted"][i])
    assert isinstance(pred["count"], int) and not isinstance(pred["count"], bool)
    assert pred["count"] == int(ref["count"][i])
    assert pred["tag"] == ref["tag"][i]


def test_multi_dtype_row_format(http, rest_url):
    instances = [{k: (v[i].tolist() if k != "label" else v[i]) for k, v in MD.items()} for i in range(2)]
    body = ok_json(http.post(f"{rest_url}/v1/models/multi_dtype:predict", json={"instances": instances}))
    preds = body["predictions"]
    assert isinstance(preds, list) and len(preds) == 2
    ref = md_ref()
    for i, pred in enumerate(preds):
        _check_md_row(pred, ref, i)


def test_multi_dtype_columnar(http, rest_url):
    inputs = {k: v.tolist() for k, v in MD.items()}
    body = ok_json(http.post(f"{rest_url}/v1/models/multi_dtype:predict", json={"inputs": inputs}))
    outs = body["outputs"]
    assert set(outs) == {"weighted", "count", "tag"}
    ref = md_ref()
    assert_close(np.array(outs["weighted"], dtype=np.float64), ref["weighted"])
    assert outs["count"] == ref["count"].tolist()
    assert outs["tag"] == ref["tag"].tolist()


def test_multi_dtype_b64_strings(http, rest_url):
    text = "h\u00e9llo w\u00f6rld"
    b64 = base64.b64encode(text.encode("utf-8")).decode("ascii")
    rows = [
        {"x_double": [1.0, 2.0, 3.0], "x_int32": [1, 1, 1], "flag": [True, True, True],
         "label": {"b64": b64}},
        {"x_double": [1.0, 2.0, 3.0], "x_int32": [2, 2, 2], "flag": [False, True, False],
         "label": "plain"},
    ]
    body = ok_json(http.post(f"{rest_url}/v1/models/multi_dtype:predict", json={"instances": rows}))
    # "tag" does not end in _bytes, so it comes back as a plain JSON string.
    assert [p["tag"] for p in body["predictions"]] == [text, "plain"]
    assert [p["count"] for p in body["predictions"]] == [3, 1]

    columnar = {"inputs": {
        "x_double": [[1.0, 2.0, 3.0]], "x_int32": [[1, 2, 3]], "flag": [[True, False, True]],
        "label": [{"b64": b64}]}}
    body = ok_json(http.post(f"{rest_url}/v1/models/multi_dtype:predict", json=columnar))
    assert body["outputs"]["tag"] == [text]
    assert body["outputs"]["weighted"] == [[1.0, 0.0, 9.0]]


# --- echo models over REST: JSON encoding of every TF dtype -------------------------

REST_ECHO_TYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
                   "uint8", "uint16", "uint32", "uint64", "bool", "string"]


def _json_values(arr):
    return arr.tolist()


def _check_echo(dtype, got, sent):
    if dtype == "string":
        assert got == sent.tolist()
    elif dtype == "bool":
        assert got == sent.tolist()
        assert all(isinstance(v, bool) for row in got for v in row)
    elif dtype in ("float16", "float32", "float64"):
        # Identity must round-trip exactly in the declared precision.
        np.testing.assert_array_equal(np.array(got, dtype=np.float64).astype(dtype), sent)
    else:
        assert all(isinstance(v, int) and not isinstance(v, bool) for row in got for v in row), got
        assert got == sent.tolist()


@pytest.mark.parametrize("dtype", REST_ECHO_TYPES)
def test_echo_rest_row(http, rest_url, dtype):
    sent = echo_values(dtype, for_json=True)
    body = ok_json(http.post(f"{rest_url}/v1/models/echo_{dtype}:predict",
                             json={"instances": _json_values(sent)}))
    _check_echo(dtype, body["predictions"], sent)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "string"])
def test_echo_rest_columnar(http, rest_url, dtype):
    sent = echo_values(dtype, for_json=True)
    body = ok_json(http.post(f"{rest_url}/v1/models/echo_{dtype}:predict",
                             json={"inputs": {"x": _json_values(sent)}}))
    _check_echo(dtype, body["outputs"], sent)


def test_echo_rest_string_b64_input(http, rest_url):
    words = [["alpha", "\u00df"], ["", "z"]]
    inst = [[{"b64": base64.b64encode(w.encode()).decode()} for w in row] for row in words]
    body = ok_json(http.post(f"{rest_url}/v1/models/echo_string:predict", json={"instances": inst}))
    assert body["predictions"] == words


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_echo_rest_non_finite_floats(http, rest_url, dtype):
    # TF Serving's "JSON conformance" section: requests and responses may carry the
    # NaN, Infinity and -Infinity tokens (which Python's json module reads).
    body = '{"instances": [[NaN, Infinity, -Infinity, 1.5]]}'
    resp = http.post(f"{rest_url}/v1/models/echo_{dtype}:predict", data=body,
                     headers={"Content-Type": "application/json"})
    got = np.array(ok_json(resp)["predictions"], dtype=np.float64)
    np.testing.assert_array_equal(got, [[np.nan, np.inf, -np.inf, 1.5]])


def test_long_columnar_tensor_reads_exactly(http, rest_url):
    # About 3 MB of float32s printed as float64s in TF Serving's columnar format: long enough
    # to be read in pieces on helper threads; every value must come back bit for bit.
    x = np.random.default_rng(29).standard_normal((4, 40_000)).astype(np.float32)
    resp = http.post(f"{rest_url}/v1/models/echo_float32:predict",
                     json={"inputs": {"x": x.tolist()}}, timeout=60)
    outputs = ok_json(resp)["outputs"]
    got = np.array(outputs, dtype=np.float32)
    assert got.shape == x.shape
    assert np.array_equal(got.view(np.uint32), x.view(np.uint32))
    # A ragged last row is refused as the one-thread reading refuses it.
    ragged = x.tolist()
    ragged[-1] = ragged[-1][:-1]
    resp = http.post(f"{rest_url}/v1/models/echo_float32:predict",
                     json={"inputs": {"x": ragged}}, timeout=60)
    assert resp.status_code == 400, resp.text[:300]


def test_long_tensor_lists_are_refused_as_short_ones_are(http, rest_url):
    # Large lists of numbers are lifted out of the body before its envelope is parsed; a
    # body that route cannot take to the end is read the general way, so a broken number or
    # a wrong name inside or beside a long list gets the general route's exact error.
    row = ", ".join(f"{i % 97}.5" for i in range(3000))
    url = f"{rest_url}/v1/models/echo_float32:predict"
    for layout in ('{"inputs": {"x": [[ROW]]}}', '{"inputs": [[ROW]]}',
                   '{"instances": [[ROW], [ROW]]}', '{"instances": [{"x": [ROW]}, {"x": [ROW]}]}'):
        good = layout.replace("ROW", row)
        resp = http.post(url, data=good, headers={"Content-Type": "application/json"}, timeout=60)
        assert resp.status_code == 200, resp.text[:300]
        # "1.2.3" where serde stops at the second dot: the message names that column.
        bad = layout.replace("ROW", row + ", 1.2.3", 1).replace("ROW", row)
        column = bad.index("1.2.3") + len("1.2") + 1
        resp = http.post(url, data=bad, headers={"Content-Type": "application/json"}, timeout=60)
        assert resp.status_code == 400, resp.text[:300]
        assert f"column {column}" in resp.json()["error"], resp.text[:300]
    # A valid long list under a name the signature lacks: the name is what is wrong.
    resp = http.post(url, data='{"inputs": {"nope": [[ROW]]}}'.replace("ROW", row),
                     headers={"Content-Type": "application/json"}, timeout=60)
    assert resp.status_code == 400, resp.text[:300]
    assert "nope" in resp.json()["error"], resp.text[:300]


def test_many_short_instances_read_exactly(http, rest_url):
    # Rows of numbers only, long enough together, are read as one tensor (the rows stacked);
    # every value must come back bit for bit, and a ragged row is still refused.
    x = np.random.default_rng(31).standard_normal((500, 16)).astype(np.float32)
    url = f"{rest_url}/v1/models/echo_float32:predict"
    resp = http.post(url, json={"instances": x.tolist()}, timeout=60)
    got = np.array(ok_json(resp)["predictions"], dtype=np.float32)
    assert got.shape == x.shape
    assert np.array_equal(got.view(np.uint32), x.view(np.uint32))
    ragged = x.tolist()
    ragged[250] = ragged[250][:-1]
    resp = http.post(url, json={"instances": ragged}, timeout=60)
    assert resp.status_code == 400, resp.text[:300]
    assert resp.json()["error"] == ("input 'x': the JSON arrays are ragged or nested unevenly: every list "
                                    "must have the same length at each depth (expected shape [_, 16])")
