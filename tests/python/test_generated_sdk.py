"""A client generated from openapi/tensorport.yaml by openapi-python-client works against the
real server: the document is complete enough for a code generator, and what the generated
code sends and parses is what the server speaks."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from openapi_spec import SPEC_PATH
from tfs import assert_close, reference

PACKAGE = "tensorport_generated_sdk"


@pytest.fixture(scope="module")
def sdk(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdk")
    generator = Path(sys.executable).parent / "openapi-python-client"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    run = subprocess.run([str(generator), "generate", "--path", str(SPEC_PATH), "--output-path",
                          str(out / PACKAGE), "--meta", "none"],
                         capture_output=True, text=True, timeout=300, env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    # The generator drops what it cannot express and says so; the document must not need that.
    assert "Unable to" not in output and "Could not" not in output, output
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def client(sdk, rest_url):
    with sdk.Client(base_url=rest_url, raise_on_unexpected_status=True) as client:
        yield client


def _api(sdk, tag: str, operation: str):
    return importlib.import_module(f"{sdk.__name__}.api.{tag}.{operation}")


def _models(sdk):
    return importlib.import_module(f"{sdk.__name__}.models")


def _features(rows: int) -> np.ndarray:
    return (np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) * 0.37) % 3


def test_predict_in_row_format(sdk, client):
    models = _models(sdk)
    x = _features(3)
    result = _api(sdk, "tfserving", "tfserving_predict").sync(
        name="ranker", client=client, body=models.TfPredictRequest(instances=x.tolist()))
    assert isinstance(result, models.TfRowPredictResponse), result
    assert_close(np.array(result.predictions, dtype=np.float32), reference("ranker", 2, {"features": x})["score"])


def test_predict_in_columnar_format_with_a_version(sdk, client):
    models = _models(sdk)
    x = _features(2)
    inputs = models.NamedTensorValues.from_dict({"features": x.tolist()})
    result = _api(sdk, "tfserving", "tfserving_predict_version").sync(
        name="ranker", version=2, client=client, body=models.TfPredictRequest(inputs=inputs))
    assert isinstance(result, models.TfColumnarPredictResponse), result
    assert_close(np.array(result.outputs, dtype=np.float32), reference("ranker", 2, {"features": x})["score"])


def test_model_status(sdk, client):
    models = _models(sdk)
    status = _api(sdk, "tfserving", "tfserving_model_status").sync(name="ranker", client=client)
    assert isinstance(status, models.TfModelStatusResponse), status
    [row] = status.model_version_status
    assert row.version == "2"
    assert row.state == models.TfModelVersionStatusState.AVAILABLE
    assert row.status.error_code == "OK"


def test_an_unknown_model_parses_as_the_error_body(sdk, client):
    models = _models(sdk)
    response = _api(sdk, "tfserving", "tfserving_model_status").sync_detailed(name="no_such_model", client=client)
    assert response.status_code == 404
    assert isinstance(response.parsed, models.Error)
    assert "no_such_model" in response.parsed.error


def test_kserve_infer_and_metadata(sdk, client):
    models = _models(sdk)
    x = _features(2)
    request = models.InferRequest(inputs=[models.InferInput(
        name="features", shape=[2, 16], datatype=models.Datatype.FP32, data=x.ravel().tolist())], id="sdk-1")
    result = _api(sdk, "kserve", "kserve_infer").sync(name="ranker", client=client, body=request)
    assert isinstance(result, models.InferResponse), result
    assert (result.model_name, result.model_version, result.id) == ("ranker", "2", "sdk-1")
    [output] = result.outputs
    assert output.datatype == models.Datatype.FP32 and output.shape == [2, 1]
    assert_close(np.array(output.data, dtype=np.float32).reshape(2, 1),
                 reference("ranker", 2, {"features": x})["score"])

    metadata = _api(sdk, "kserve", "kserve_model_metadata").sync(name="ranker", client=client)
    assert isinstance(metadata, models.ModelMetadata), metadata
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [("features", models.Datatype.FP32, [-1, 16])]
