#!/usr/bin/env python3
"""Writes the TensorFlow SavedModel test fixture: the ranking MLP of
examples/models/ranker/1/model.onnx (Gemm -> Relu -> Gemm -> Sigmoid, `features` float32
[batch, 16] -> `score` float32 [batch, 1]) with the ONNX file's own weights, so every backend
serves the same function.

  tests/models/ranker_tf/1/                         SavedModel (tag "serve"), two signatures:
      serving_default: features -> score            (the ONNX model's output)
      logits:          features -> logit            (the same, before the sigmoid)
  tests/models/ranker_tf/1/assets.extra/tf_serving_warmup_requests
                                                    TF Serving warmup log: 3 PredictRequests
  tests/models/ranker_tf/reference.json             TensorFlow's own outputs of both signatures
                                                    for ranker_inputs(), the rows every format's
                                                    conformance check uses

  tests/models/tf_echo/1/                           SavedModel whose signatures check types and
      echo_<dtype>: x -> y, y = x, [-1, -1]         errors: one echo per dtype the server carries
      lookup: ids int64[-1] -> values f32[-1]       a gather from a 10-entry table, so an id out
                                                    of range fails inside TensorFlow at run time

It needs TensorFlow, which CI never installs; the outputs are committed. To regenerate, run
`make tf-fixtures` (TensorFlow goes into .cache/tf-python).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

REPO = Path(__file__).resolve().parent.parent
ONNX_RANKER = REPO / "examples" / "models" / "ranker" / "1" / "model.onnx"
OUT = REPO / "tests" / "models" / "ranker_tf"
VERSION_DIR = OUT / "1"
ECHO_DIR = REPO / "tests" / "models" / "tf_echo" / "1"
ECHO_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "string"]
LOOKUP_TABLE = np.arange(10, dtype=np.float32) * 1.5
WARMUP_FILE = VERSION_DIR / "assets.extra" / "tf_serving_warmup_requests"
FEATURES = 16


class Ranker(tf.Module):
    """The ranking MLP with the weights given, as TF variables (saved under variables/)."""

    def __init__(self, w1, b1, w2, b2):
        super().__init__()
        self.w1 = tf.Variable(w1, name="w1")
        self.b1 = tf.Variable(b1, name="b1")
        self.w2 = tf.Variable(w2, name="w2")
        self.b2 = tf.Variable(b2, name="b2")

    def _logit(self, features):
        hidden = tf.nn.relu(tf.matmul(features, self.w1) + self.b1)
        return tf.matmul(hidden, self.w2) + self.b2

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="features")])
    def score(self, features):
        return {"score": tf.sigmoid(self._logit(features))}

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="features")])
    def logits(self, features):
        return {"logit": self._logit(features)}


class Echo(tf.Module):
    """One identity signature per dtype, and a table lookup that can fail at run time."""

    def __init__(self):
        super().__init__()
        self.table = tf.Variable(LOOKUP_TABLE, name="table")

    def signatures(self) -> dict:
        out = {}
        for name in ECHO_DTYPES:
            spec = tf.TensorSpec([None, None], tf.as_dtype(name), name="x")
            out[f"echo_{name}"] = tf.function(lambda x: {"y": tf.identity(x)}, input_signature=[spec])
        out["lookup"] = tf.function(
            lambda ids: {"values": tf.gather(self.table, ids)},
            input_signature=[tf.TensorSpec([None], tf.int64, name="ids")],
        )
        out["serving_default"] = out["echo_float32"]
        return out


def onnx_weights() -> dict[str, np.ndarray]:
    model = onnx.load(str(ONNX_RANKER))
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    ops = [node.op_type for node in model.graph.node]
    assert ops == ["Gemm", "Relu", "Gemm", "Sigmoid"], ops
    for node in model.graph.node:
        if node.op_type == "Gemm":
            # The TF graph computes x @ w + b: the Gemms must not transpose or scale.
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert attrs.get("transA", 0) == 0 and attrs.get("transB", 0) == 0, attrs
            assert attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0, attrs
    return {name: weights[name] for name in ("w1", "b1", "w2", "b2")}


def ranker_inputs() -> np.ndarray:
    """Eight rows of features, the same in every format's conformance check."""
    grid = np.arange(8 * FEATURES, dtype=np.int64).reshape(8, FEATURES)
    return (((grid * 37) % 101 - 50) / 25.0).astype(np.float32)


def tensor_entry(array: np.ndarray) -> dict:
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.reshape(-1).tolist()}


def predict_log(signature: str, rows: np.ndarray) -> bytes:
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name="ranker_tf", signature_name=signature)
    )
    request.inputs["features"].CopyFrom(tf.make_tensor_proto(rows))
    log = prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )
    return log.SerializeToString()


def write_warmup() -> int:
    records = [
        predict_log("serving_default", np.zeros((1, FEATURES), np.float32)),
        predict_log("serving_default", ranker_inputs()),
        predict_log("logits", np.ones((2, FEATURES), np.float32)),
    ]
    WARMUP_FILE.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(WARMUP_FILE)) as writer:
        for record in records:
            writer.write(record)
    return len(records)


def main() -> None:
    weights = onnx_weights()
    ranker = Ranker(**weights)
    if VERSION_DIR.exists():
        shutil.rmtree(VERSION_DIR)
    tf.saved_model.save(
        ranker,
        str(VERSION_DIR),
        signatures={"serving_default": ranker.score, "logits": ranker.logits},
    )
    warmup_count = write_warmup()
    echo = Echo()
    if ECHO_DIR.exists():
        shutil.rmtree(ECHO_DIR)
    tf.saved_model.save(echo, str(ECHO_DIR), signatures=echo.signatures())

    # The reference comes from the saved files, loaded back the way a server loads them.
    loaded = tf.saved_model.load(str(VERSION_DIR), tags=["serve"])
    inputs = ranker_inputs()
    score = loaded.signatures["serving_default"](features=tf.constant(inputs))["score"].numpy()
    logit = loaded.signatures["logits"](features=tf.constant(inputs))["logit"].numpy()

    # Same function as the ONNX model it was built from.
    (onnx_score,) = ReferenceEvaluator(str(ONNX_RANKER)).run(None, {"features": inputs})
    np.testing.assert_allclose(score, onnx_score, atol=1e-6)

    reference = {
        "tensorflow_version": tf.__version__,
        "warmup_requests": warmup_count,
        "signatures": {"serving_default": ["score"], "logits": ["logit"]},
        "inputs": {"features": tensor_entry(inputs)},
        "outputs": {"score": tensor_entry(score), "logit": tensor_entry(logit)},
    }
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(f"wrote {VERSION_DIR} and {OUT / 'reference.json'}")


if __name__ == "__main__":
    main()
