#!/usr/bin/env python3
"""Regenerate the ONNX fixtures of the tf.Example operations (Classify, Regress,
MultiInference).

Deterministic: no random weights, fixed graph construction order.

Writes:
  tests/models/example_regressor/1/model.onnx
      x float32 [-1, 2], n int64 [-1] -> outputs float32 [-1] = x[:,0] + 2*x[:,1] + n
  tests/models/example_classifier/1/model.onnx
      x float32 [-1, 2] -> scores float32 [-1, 2] = softmax(x),
                           classes string [-1, 2] = ["neg", "pos"] on every row,
                           outputs float32 [-1] = softmax(x)[:, 1] (so it regresses too)

Usage: .venv/bin/python scripts/make_example_input_models.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
OPSET = 17
IR_VERSION = 8


def save(model: onnx.ModelProto, name: str) -> None:
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path = REPO / "tests" / "models" / name / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    print(f"wrote {path.relative_to(REPO)}")


def regressor() -> onnx.ModelProto:
    weights = numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "weights")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("Mul", ["x", "weights"], ["weighted"]),
        helper.make_node("ReduceSum", ["weighted", "axes"], ["row_sum"], keepdims=0),
        helper.make_node("Cast", ["n"], ["n_float"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["row_sum", "n_float"], ["outputs"]),
    ]
    graph = helper.make_graph(
        nodes,
        "example_regressor",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 2]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [-1]),
        ],
        [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [-1])],
        initializer=[weights, axes],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def classifier() -> onnx.ModelProto:
    labels = helper.make_tensor("labels", TensorProto.STRING, [1, 2], [b"neg", b"pos"])
    positive = numpy_helper.from_array(np.array([1], dtype=np.int64), "positive")
    nodes = [
        helper.make_node("Softmax", ["x"], ["scores"], axis=1),
        helper.make_node("Gather", ["scores", "positive"], ["positive_column"], axis=1),
        helper.make_node("Squeeze", ["positive_column", "positive"], ["outputs"]),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Expand", ["labels", "x_shape"], ["classes"]),
    ]
    graph = helper.make_graph(
        nodes,
        "example_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 2])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [-1, 2]),
            helper.make_tensor_value_info("classes", TensorProto.STRING, [-1, 2]),
            helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [-1]),
        ],
        initializer=[labels, positive],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def main() -> None:
    save(regressor(), "example_regressor")
    save(classifier(), "example_classifier")


if __name__ == "__main__":
    main()
