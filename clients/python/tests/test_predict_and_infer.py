"""predict (TF Serving) and infer (KServe v2) over REST and gRPC give numpy arrays equal to
onnxruntime's own outputs, with the model's dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import reference
from tensorport_client import TensorportError

RNG = np.random.default_rng(7)


def features(rows: int) -> np.ndarray:
    return RNG.standard_normal((rows, 16)).astype(np.float32)


def multi_dtype_inputs(rows: int = 2) -> dict[str, np.ndarray]:
    return {
        "x_double": RNG.standard_normal((rows, 3)),
        "x_int32": RNG.integers(-5, 5, (rows, 3), dtype=np.int32),
        "flag": RNG.integers(0, 2, (rows, 3)).astype(bool),
        "label": np.array([f"row-{i}".encode() for i in range(rows)], dtype=object),
    }


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, expected in want.items():
        actual = got[name]
        assert actual.shape == expected.shape, name
        if expected.dtype == object:
            assert [bytes(a) if isinstance(a, bytes) else a.encode() for a in actual.ravel()] == \
                   [e.encode() if isinstance(e, str) else e for e in expected.ravel()], name
        else:
            assert actual.dtype == expected.dtype, name
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("rows", [1, 5])
def test_predict_ranker(client, rows):
    x = features(rows)
    assert_matches(client.predict("ranker", {"features": x}), reference.run("ranker", 2, {"features": x}))


def test_predict_int64_inputs_and_a_version(client):
    inputs = {"user_id": np.array([3, 17, 99], dtype=np.int64), "item_id": np.array([0, 500, 999], dtype=np.int64)}
    assert_matches(client.predict("two_tower", inputs, version=1), reference.run("two_tower", 1, inputs))


def test_predict_every_dtype_of_multi_dtype(client):
    inputs = multi_dtype_inputs()
    assert_matches(client.predict("multi_dtype", inputs), reference.run("multi_dtype", 1, inputs))


def test_infer_ranker(client):
    x = features(4)
    assert_matches(client.infer("ranker", {"features": x}), reference.run("ranker", 2, {"features": x}))


def test_infer_every_dtype_and_selected_outputs(client):
    inputs = multi_dtype_inputs(3)
    expected = reference.run("multi_dtype", 1, inputs)
    assert_matches(client.infer("multi_dtype", inputs), expected)
    only = client.infer("multi_dtype", inputs, outputs=["count"])
    assert_matches(only, {"count": expected["count"]})


def test_lists_and_str_take_the_declared_dtypes(client):
    inputs = multi_dtype_inputs(2)
    as_lists = {name: value.tolist() for name, value in inputs.items()}
    as_lists["label"] = [b.decode() for b in as_lists["label"]]
    expected = reference.run("multi_dtype", 1, inputs)
    assert_matches(client.infer("multi_dtype", as_lists), expected)
    assert_matches(client.predict("multi_dtype", as_lists), expected)


def test_unknown_model_raises_not_found(client):
    with pytest.raises(TensorportError) as raised:
        client.predict("no_such_model", {"x": np.zeros(1, np.float32)})
    assert raised.value.kind == "not_found"
    assert "no_such_model" in raised.value.message
    with pytest.raises(TensorportError) as raised:
        client.infer("no_such_model", {"x": np.zeros(1, np.float32)})
    assert raised.value.kind == "not_found"


def test_a_wrong_shape_raises_invalid_argument(client):
    with pytest.raises(TensorportError) as raised:
        client.infer("ranker", {"features": np.zeros((2, 3), np.float32)})
    assert raised.value.kind == "invalid_argument"


def test_inputs_must_be_a_mapping(client):
    with pytest.raises(TypeError):
        client.infer("ranker", np.zeros((1, 16), np.float32))


def test_the_example_runs(server):
    import os
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "ranker.py"
    env = dict(os.environ, TENSORPORT_REST=server.rest_url, TENSORPORT_GRPC=server.grpc_target)
    run = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "shared memory" in run.stdout
