#!/usr/bin/env python3
"""Writes the SavedModel fixture for TF Serving's Classify and Regress: a model built the way
TensorFlow's estimators export one, whose classification and regression signatures take
serialized tf.Example protos and parse them in the graph.

  tests/models/classifier_tf/1/     SavedModel (tag "serve"), three signatures:
      classification   inputs: string [-1] (serialized tf.Example)
                       -> classes: string [-1, 3], scores: float32 [-1, 3]
                       method tensorflow/serving/classify
      regression       inputs: string [-1] -> outputs: float32 [-1, 1]
                       method tensorflow/serving/regress
      serving_default  x: float32 [-1, 2], n: int64 [-1] -> scores, value
                       method tensorflow/serving/predict (the same function, features as tensors)
  tests/models/classifier_tf/reference.json
                       the examples (as features) and TensorFlow's own outputs of every signature
                       for them

The parsed features: `x` float_list of 2 values and `n` int64_list of 1 value, both required
(a missing one or one of another type is TensorFlow's InvalidArgument). The function:
  logits = x @ W + n * [0, 0, 1] + b,  scores = softmax(logits),  classes = ["apple", "banana",
  "cherry"] on every row,  value = x[0] + 2 * x[1] + n.

It needs TensorFlow (1.x graph APIs through tf.compat.v1, since only they write a signature's
method name); `make tf-fixtures` installs it into .cache/tf-python and runs this script after
scripts/make_tf_fixtures.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "models" / "classifier_tf"
VERSION_DIR = OUT / "1"
LABELS = ["apple", "banana", "cherry"]
WEIGHTS = np.array([[1.0, -1.0, 0.5], [0.5, 2.0, -1.0]], dtype=np.float32)
BIAS = np.array([0.1, 0.0, -0.1], dtype=np.float32)
N_WEIGHT = np.array([0.0, 0.0, 1.0], dtype=np.float32)
EXAMPLES = [
    {"x": [1.0, 2.0], "n": [0]},
    {"x": [-1.5, 0.25], "n": [3]},
    {"x": [0.0, 0.0], "n": [-2]},
    {"x": [2.5, -1.0], "n": [1]},
]

v1 = tf.compat.v1


def serialize(features: dict) -> bytes:
    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=features["x"])),
        "n": tf.train.Feature(int64_list=tf.train.Int64List(value=features["n"])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def heads(x, n, weights, bias):
    """scores [batch, 3], classes [batch, 3], value [batch, 1] from features x [batch, 2] and
    n [batch] (int64)."""
    n_float = tf.cast(tf.reshape(n, [-1, 1]), tf.float32)
    logits = tf.matmul(x, weights) + n_float * N_WEIGHT + bias
    scores = tf.nn.softmax(logits)
    classes = tf.tile(tf.constant([LABELS]), [tf.shape(x)[0], 1])
    value = x[:, :1] + 2.0 * x[:, 1:] + n_float
    return scores, classes, value


def build() -> None:
    if VERSION_DIR.exists():
        shutil.rmtree(VERSION_DIR)
    with tf.Graph().as_default():
        weights = v1.get_variable("weights", initializer=WEIGHTS)
        bias = v1.get_variable("bias", initializer=BIAS)

        examples = v1.placeholder(tf.string, [None], name="input_example_tensor")
        parsed = tf.io.parse_example(
            examples,
            {
                "x": tf.io.FixedLenFeature([2], tf.float32),
                "n": tf.io.FixedLenFeature([1], tf.int64),
            },
        )
        scores, classes, value = heads(parsed["x"], tf.reshape(parsed["n"], [-1]), weights, bias)

        x = v1.placeholder(tf.float32, [None, 2], name="x")
        n = v1.placeholder(tf.int64, [None], name="n")
        predict_scores, _, predict_value = heads(x, n, weights, bias)

        signatures = {
            "classification": v1.saved_model.classification_signature_def(
                examples=examples, classes=classes, scores=scores
            ),
            "regression": v1.saved_model.regression_signature_def(
                examples=examples, predictions=value
            ),
            "serving_default": v1.saved_model.predict_signature_def(
                inputs={"x": x, "n": n},
                outputs={"scores": predict_scores, "value": predict_value},
            ),
        }
        builder = v1.saved_model.Builder(str(VERSION_DIR))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            builder.add_meta_graph_and_variables(
                session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures
            )
        builder.save()


def tensor_entry(array: np.ndarray) -> dict:
    if array.dtype == object:
        data = [v.decode() for v in array.reshape(-1)]
        return {"dtype": "string", "shape": list(array.shape), "data": data}
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.reshape(-1).tolist()}


def reference() -> dict:
    """Every signature run by TensorFlow on the saved files, loaded back as a server loads them."""
    loaded = tf.saved_model.load(str(VERSION_DIR), tags=["serve"])
    serialized = tf.constant([serialize(e) for e in EXAMPLES])
    classification = loaded.signatures["classification"](inputs=serialized)
    regression = loaded.signatures["regression"](inputs=serialized)
    predict = loaded.signatures["serving_default"](
        x=tf.constant([e["x"] for e in EXAMPLES], tf.float32),
        n=tf.constant([e["n"][0] for e in EXAMPLES], tf.int64),
    )
    return {
        "tensorflow_version": tf.__version__,
        "examples": EXAMPLES,
        "classification": {k: tensor_entry(v.numpy()) for k, v in classification.items()},
        "regression": {k: tensor_entry(v.numpy()) for k, v in regression.items()},
        "serving_default": {k: tensor_entry(v.numpy()) for k, v in predict.items()},
    }


def main() -> None:
    build()
    ref = reference()
    scores = np.array(ref["classification"]["scores"]["data"]).reshape(-1, 3)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-6)
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"wrote {VERSION_DIR} and {OUT / 'reference.json'}")


if __name__ == "__main__":
    main()
