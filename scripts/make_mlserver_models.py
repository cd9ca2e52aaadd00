#!/usr/bin/env python3
"""Lay out an MLServer model folder from the settings files kept in tests/migration/mlserver/,
with ONNX model files that have the inputs and outputs those settings describe.

Deterministic: the graphs are built from fixed weights, so a re-run writes the same bytes.

    FOLDER/settings.json                          MLServer's tests/testdata/settings-custom-md-repo.json
    FOLDER/models/mnist-svm/                      docs/examples/mms: model.onnx, input "predict"
                                                  FP32 [-1, 64] -> "label" INT64 [-1]: the class
                                                  c whose features i (i % 10 == c) sum highest
    FOLDER/models/mushroom-xgboost/               docs/examples/mms: an XGBoost JSON stand-in,
                                                  which this server refuses to serve
    FOLDER/testdata/sum-model/                    tests/testdata: model.onnx, "input-0" FP32
                                                  [128] -> "output-0" FP32 [1], the sum
    FOLDER/benchmarking/models/iris/              benchmarking/testserver: model.onnx,
                                                  "input-0" FP32 [-1, 4] -> "predict" INT64 [-1],
                                                  the index of the largest feature
    FOLDER/users/mlserver-example/                ashrafgt/seldon-mlserver-example: model.json
    FOLDER/users/sentiment-analysis/              dudeperf3ct/15-mlserver-deploy: model-store/

Usage: .venv/bin/python scripts/make_mlserver_models.py FOLDER
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "migration" / "mlserver"
OPSET = 17
IR_VERSION = 8

MNIST_FEATURES = 64
MNIST_CLASSES = 10
SUM_WIDTH = 128
IRIS_FEATURES = 4


def save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorport-make_mlserver_models")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())


def mnist_svm() -> onnx.GraphProto:
    """A linear classifier over 8x8 digits: class c scores the features i with i % 10 == c."""
    weights = np.zeros((MNIST_FEATURES, MNIST_CLASSES), dtype=np.float32)
    for i in range(MNIST_FEATURES):
        weights[i, i % MNIST_CLASSES] = 1.0
    return helper.make_graph(
        [helper.make_node("MatMul", ["predict", "weights"], ["scores"]),
         helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0)],
        "mnist_svm",
        [helper.make_tensor_value_info("predict", TensorProto.FLOAT, ["batch", MNIST_FEATURES])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])],
        [numpy_helper.from_array(weights, "weights")],
    )


def sum_model() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("ReduceSum", ["input-0"], ["output-0"], keepdims=1)],
        "sum_model",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, [SUM_WIDTH])],
        [helper.make_tensor_value_info("output-0", TensorProto.FLOAT, [1])],
    )


def iris() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("ArgMax", ["input-0"], ["predict"], axis=1, keepdims=0)],
        "iris",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, ["batch", IRIS_FEATURES])],
        [helper.make_tensor_value_info("predict", TensorProto.INT64, ["batch"])],
    )


# Each model folder: where it goes under FOLDER, the settings file it copies from the corpus,
# and the files beside it (ONNX graphs, or stand-ins for files this server refuses to run).
LAYOUT = [
    ("models/mnist-svm", "seldonio/docs/examples/mms/models/mnist-svm",
     {"model.onnx": mnist_svm}),
    ("models/mushroom-xgboost", "seldonio/docs/examples/mms/models/mushroom-xgboost",
     {"model.json": '{"learner": "an XGBoost model would be here"}\n'}),
    ("testdata/sum-model", "seldonio/tests/testdata", {"model.onnx": sum_model}),
    ("benchmarking/models/iris", "seldonio/benchmarking/testserver/models/iris",
     {"model.onnx": iris}),
    ("users/mlserver-example", "ashrafgt-seldon-mlserver-example",
     {"model.json": '{"weights": [1, 2, 3]}\n'}),
    ("users/sentiment-analysis", "dudeperf3ct-15-mlserver-deploy",
     {"model-store/config.json": '{"architectures": []}\n'}),
]


def build(folder: Path) -> Path:
    """Writes the whole layout into `folder` (created if need be) and returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CORPUS / "seldonio/tests/testdata/settings-custom-md-repo.json",
                    folder / "settings.json")
    for place, source, files in LAYOUT:
        model = folder / place
        model.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / source / "model-settings.json", model / "model-settings.json")
        for name, content in files.items():
            path = model / name
            if callable(content):
                save(content(), path)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    return folder


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(build(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
