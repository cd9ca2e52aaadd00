"""model_status, model_metadata and the health calls, typed, over REST and gRPC."""

from __future__ import annotations

import numpy as np

from tensorport_client import ModelMetadata, TensorSpec, TensorportError, VersionStatus


def test_model_status(client):
    assert client.model_status("ranker") == [VersionStatus(version=2, state="AVAILABLE", error_code="OK",
                                                           error_message="")]
    assert client.model_status("ranker", version=2)[0].available


def test_a_model_that_failed_to_load_reports_why(client):
    [row] = client.model_status("broken")
    assert not row.available
    assert row.state == "END" and row.error_message


def test_model_metadata(client):
    metadata = client.model_metadata("ranker")
    assert metadata == ModelMetadata(name="ranker", versions=("2",), platform="onnxruntime_onnx",
                                     inputs=(TensorSpec("features", "FP32", (-1, 16)),),
                                     outputs=(TensorSpec("score", "FP32", (-1, 1)),))
    assert metadata.inputs[0].dtype == np.float32
    assert client.model_metadata("multi_dtype").output("tag").datatype == "BYTES"


def test_metadata_of_an_unknown_version_raises(client):
    try:
        client.model_metadata("ranker", version=7)
    except TensorportError as err:
        assert err.kind == "not_found"
    else:
        raise AssertionError("expected not_found")


def test_health(client):
    assert client.server_live()
    assert client.server_ready()
    assert client.model_ready("ranker")
    assert not client.model_ready("no_such_model")
