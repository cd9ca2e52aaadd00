#!/usr/bin/env python3
"""Write the ranking pipeline of examples/pipeline/: three ONNX step models and the
ensemble that chains them, each with its Triton config.pbtxt.

    feature_transform  raw [B, C, 8]      -> features [B, C, 8]   log(1 + |raw|) * scale
    ranker_mlp         features [B, C, 8] -> scores [B, C]        relu(x W1 + b1) W2 + b2
    top_k              scores [B, C]      -> values [B, 3], indices [B, 3] (ONNX TopK, k = 3)
    ranking_pipeline   the ensemble: RAW_FEATURES -> TOP_SCORES, TOP_ITEMS

B is the batch (up to 8 per request), C the candidates of one request (any number; TopK
refuses fewer than 3, so top_k's config.pbtxt warms it up with 8 candidates through
Triton's model_warmup rather than the default one-element warmup). Deterministic: fixed seeds, so re-running writes the same bytes.

Usage: .venv/bin/python scripts/make_pipeline_models.py [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
OPSET = 17
IR_VERSION = 8
FEATURES = 8
HIDDEN = 16
TOP_K = 3


def save(graph: onnx.GraphProto, path: Path, doc: str) -> None:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tensorport-make_pipeline_models",
        doc_string=doc,
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())


def feature_transform() -> onnx.GraphProto:
    scale = (np.arange(1, FEATURES + 1, dtype=np.float32) / FEATURES).astype(np.float32)
    return helper.make_graph(
        [
            helper.make_node("Abs", ["raw"], ["magnitude"]),
            helper.make_node("Add", ["magnitude", "one"], ["shifted"]),
            helper.make_node("Log", ["shifted"], ["logged"]),
            helper.make_node("Mul", ["logged", "scale"], ["features"]),
        ],
        "feature_transform",
        [helper.make_tensor_value_info("raw", TensorProto.FLOAT, ["batch", "candidates", FEATURES])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "candidates", FEATURES])],
        initializer=[
            numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
            numpy_helper.from_array(scale, "scale"),
        ],
    )


def ranker_mlp() -> onnx.GraphProto:
    rng = np.random.default_rng(20261202)
    w1 = rng.normal(0, 0.5, (FEATURES, HIDDEN)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (HIDDEN,)).astype(np.float32)
    w2 = rng.normal(0, 0.5, (HIDDEN, 1)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (1,)).astype(np.float32)
    return helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "w1"], ["h0"]),
            helper.make_node("Add", ["h0", "b1"], ["h1"]),
            helper.make_node("Relu", ["h1"], ["h2"]),
            helper.make_node("MatMul", ["h2", "w2"], ["s0"]),
            helper.make_node("Add", ["s0", "b2"], ["s1"]),
            helper.make_node("Squeeze", ["s1", "last_axis"], ["scores"]),
        ],
        "ranker_mlp",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "candidates", FEATURES])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "candidates"])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
        ],
    )


def top_k() -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node("TopK", ["scores", "k"], ["values", "indices"], axis=-1)],
        "top_k",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "candidates"])],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, ["batch", TOP_K]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["batch", TOP_K]),
        ],
        initializer=[numpy_helper.from_array(np.array([TOP_K], dtype=np.int64), "k")],
    )


# TopK needs at least k candidates; the default warmup's one element per dynamic dimension
# would fail (and warn at every start), so the step warms up as a request of 8 candidates.
TOP_K_WARMUP = """model_warmup [
  {
    name: "eight_candidates"
    batch_size: 1
    inputs {
      key: "scores"
      value: { data_type: TYPE_FP32 dims: [ 8 ] zero_data: true }
    }
  }
]
"""


def step_config(name: str, inputs, outputs, extra: str = "") -> str:
    def tensors(kind, specs):
        rows = ",\n".join(
            f'  {{ name: "{n}" data_type: {t} dims: [ {", ".join(map(str, d))} ] }}'
            for n, t, d in specs
        )
        return f"{kind} [\n{rows}\n]\n"

    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        + tensors("input", inputs)
        + tensors("output", outputs)
        + "dynamic_batching { max_queue_delay_microseconds: 200 }\n"
        + extra
    )


ENSEMBLE_CONFIG = """name: "ranking_pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "RAW_FEATURES" data_type: TYPE_FP32 dims: [ -1, 8 ] }
]
output [
  { name: "TOP_SCORES" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "TOP_ITEMS" data_type: TYPE_INT64 dims: [ 3 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "feature_transform"
      model_version: -1
      input_map { key: "raw" value: "RAW_FEATURES" }
      output_map { key: "features" value: "FEATURES" }
    },
    {
      model_name: "ranker_mlp"
      model_version: -1
      input_map { key: "features" value: "FEATURES" }
      output_map { key: "scores" value: "SCORES" }
    },
    {
      model_name: "top_k"
      model_version: -1
      input_map { key: "scores" value: "SCORES" }
      output_map { key: "values" value: "TOP_SCORES" }
      output_map { key: "indices" value: "TOP_ITEMS" }
    }
  ]
}
"""


def write(out: Path) -> None:
    fp32, i64 = "TYPE_FP32", "TYPE_INT64"
    models = {
        "feature_transform": (
            feature_transform(),
            [("raw", fp32, [-1, FEATURES])],
            [("features", fp32, [-1, FEATURES])],
        ),
        "ranker_mlp": (
            ranker_mlp(),
            [("features", fp32, [-1, FEATURES])],
            [("scores", fp32, [-1])],
        ),
        "top_k": (top_k(), [("scores", fp32, [-1])], [("values", fp32, [TOP_K]), ("indices", i64, [TOP_K])]),
    }
    for name, (graph, inputs, outputs) in models.items():
        save(graph, out / name / "1" / "model.onnx", f"{name} step of the ranking pipeline")
        extra = TOP_K_WARMUP if name == "top_k" else ""
        (out / name / "config.pbtxt").write_text(step_config(name, inputs, outputs, extra))
    ensemble = out / "ranking_pipeline"
    (ensemble / "1").mkdir(parents=True, exist_ok=True)
    # An empty version folder, as Triton lays an ensemble out; git keeps it by this file.
    (ensemble / "1" / ".gitkeep").write_text("")
    (ensemble / "config.pbtxt").write_text(ENSEMBLE_CONFIG)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "examples" / "pipeline")
    write(parser.parse_args().out)


if __name__ == "__main__":
    main()
