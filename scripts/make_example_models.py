#!/usr/bin/env python3
"""Regenerate the small ONNX models used by the examples and the integration tests.

Deterministic: fixed seeds, fixed graph construction order, so re-running this
script produces byte-identical files.

Writes:
  examples/models/ranker/{1,2}/model.onnx     feed-ranking MLP
  examples/models/two_tower/1/model.onnx      int64 id embeddings, dot product
  examples/models/multi_dtype/1/model.onnx    float64/int32/bool/string inputs
  tests/models/echo_<dtype>/1/model.onnx      y = Identity(x) for 13 dtypes
  tests/models/sum_rows/1/model.onnx          y = ReduceSum(x, axis 1): large input, small output
  tests/models/spin/1/model.onnx              y = x after `rounds` loop iterations: a slow model
  tests/models/broken/1/model.onnx            garbage bytes (must fail to load)

Usage: .venv/bin/python scripts/make_example_models.py [--check-only]
       .venv/bin/python scripts/make_example_models.py [--wide-ranker DIR] [--large-ranker DIR]
       [--compute-mlp DIR]
       (the benchmark's larger models, written on demand)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
OPSET = 17
# IR version 8 is the one that goes with opset 17; every onnxruntime since 1.13 reads it.
IR_VERSION = 8

ECHO_TYPES = {
    "float16": TensorProto.FLOAT16,
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
    "string": TensorProto.STRING,
}

BROKEN_BYTES = b"this is not an ONNX model\x00\xff\xfe garbage\n"


def make_model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tensorport-make_example_models",
        producer_version="1",
        doc_string=doc,
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def ranker(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((16, 32)) * 0.25).astype(np.float32)
    b1 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 1)) * 0.25).astype(np.float32)
    b2 = (rng.standard_normal(1) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["features", "w1", "b1"], ["h1"], name="dense1"),
        helper.make_node("Relu", ["h1"], ["h1_relu"], name="relu1"),
        helper.make_node("Gemm", ["h1_relu", "w2", "b2"], ["logit"], name="dense2"),
        helper.make_node("Sigmoid", ["logit"], ["score"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "ranker",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 16])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    return make_model(graph, f"feed-ranking MLP 16->32->1, seed {seed}")


def wide_ranker(features: int = 256, hidden: int = 1024) -> onnx.ModelProto:
    """A ranking MLP large enough (about 5 MB of weights) that running it, not moving the
    request, dominates: the model the batching benchmark uses. Not committed; written on
    demand with --wide-ranker."""
    rng = np.random.default_rng(303)
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    w3 = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    zeros = lambda n: np.zeros(n, dtype=np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Gemm", ["features", "w1", "b1"], ["h1"], name="dense1"),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], name="dense2"),
        helper.make_node("Relu", ["h2"], ["a2"], name="relu2"),
        helper.make_node("Gemm", ["a2", "w3", "b3"], ["logit"], name="dense3"),
        helper.make_node("Sigmoid", ["logit"], ["score"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "ranker_wide",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", features])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(zeros(hidden), "b1"),
                     numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(zeros(hidden), "b2"),
                     numpy_helper.from_array(w3, "w3"), numpy_helper.from_array(zeros(1), "b3")],
    )
    return make_model(graph, f"wide ranking MLP {features}->{hidden}->{hidden}->1")


def large_ranker(features: int = 262_144, hidden: int = 4) -> onnx.ModelProto:
    """A model whose request is large: 1 MiB of float features per row into a 4 MiB first
    layer, so moving the input costs about as much as running the model. The benchmark's
    large-input model; not committed, written on demand with --large-ranker."""
    rng = np.random.default_rng(404)
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    zeros = lambda n: np.zeros(n, dtype=np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Gemm", ["features", "w1", "b1"], ["h1"], name="dense1"),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["logit"], name="dense2"),
        helper.make_node("Sigmoid", ["logit"], ["score"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "ranker_large",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", features])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(zeros(hidden), "b1"),
                     numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(zeros(1), "b2")],
    )
    return make_model(graph, f"large-input ranking MLP {features}->{hidden}->1")


def two_tower() -> onnx.ModelProto:
    rng = np.random.default_rng(2002)
    users = (rng.standard_normal((100, 8)) * 0.5).astype(np.float32)
    items = (rng.standard_normal((1000, 8)) * 0.5).astype(np.float32)
    axes = np.array([1], dtype=np.int64)
    nodes = [
        helper.make_node("Gather", ["user_table", "user_id"], ["u"], axis=0, name="user_lookup"),
        helper.make_node("Gather", ["item_table", "item_id"], ["i"], axis=0, name="item_lookup"),
        helper.make_node("Mul", ["u", "i"], ["ui"], name="mul"),
        helper.make_node("ReduceSum", ["ui", "axes"], ["dot"], keepdims=0, name="dot"),
        helper.make_node("Sigmoid", ["dot"], ["score"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_tower",
        inputs=[
            helper.make_tensor_value_info("user_id", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("item_id", TensorProto.INT64, ["batch"]),
        ],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch"])],
        initializer=[
            numpy_helper.from_array(users, "user_table"),
            numpy_helper.from_array(items, "item_table"),
            numpy_helper.from_array(axes, "axes"),
        ],
    )
    return make_model(graph, "two-tower retrieval: sigmoid(<user_emb, item_emb>)")


def multi_dtype() -> onnx.ModelProto:
    axes = np.array([1], dtype=np.int64)
    nodes = [
        helper.make_node("Cast", ["x_int32"], ["x_int32_d"], to=TensorProto.DOUBLE, name="cast_int"),
        helper.make_node("Cast", ["flag"], ["flag_d"], to=TensorProto.DOUBLE, name="cast_flag_d"),
        helper.make_node("Mul", ["x_double", "x_int32_d"], ["prod"], name="mul1"),
        helper.make_node("Mul", ["prod", "flag_d"], ["weighted"], name="mul2"),
        helper.make_node("Cast", ["flag"], ["flag_i"], to=TensorProto.INT64, name="cast_flag_i"),
        helper.make_node("ReduceSum", ["flag_i", "axes"], ["count"], keepdims=0, name="count"),
        helper.make_node("Identity", ["label"], ["tag"], name="tag"),
    ]
    graph = helper.make_graph(
        nodes,
        "multi_dtype",
        inputs=[
            helper.make_tensor_value_info("x_double", TensorProto.DOUBLE, ["batch", 3]),
            helper.make_tensor_value_info("x_int32", TensorProto.INT32, ["batch", 3]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, ["batch", 3]),
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch"]),
        ],
        outputs=[
            helper.make_tensor_value_info("weighted", TensorProto.DOUBLE, ["batch", 3]),
            helper.make_tensor_value_info("count", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("tag", TensorProto.STRING, ["batch"]),
        ],
        initializer=[numpy_helper.from_array(axes, "axes")],
    )
    return make_model(graph, "several dtypes in, several dtypes out")


def echo(type_name: str, elem_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="identity")],
        f"echo_{type_name}",
        inputs=[helper.make_tensor_value_info("x", elem_type, ["d0", "d1"])],
        outputs=[helper.make_tensor_value_info("y", elem_type, ["d0", "d1"])],
    )
    return make_model(graph, f"y = Identity(x), x: {type_name}[-1, -1]")


def sum_rows() -> onnx.ModelProto:
    axes = np.array([1], dtype=np.int64)
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=0)],
        "sum_rows",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
        initializer=[numpy_helper.from_array(axes, "axes")],
    )
    return make_model(graph, "y = sum of each row of x: a large input with a small output")


def spin() -> onnx.ModelProto:
    """A model whose run time the client chooses: a Loop of `rounds` small matrix products
    (data-dependent, so the runtime cannot fold it away), then y = x. For tests that need a
    request to stay in flight (deadlines, queueing, graceful shutdown)."""
    rng = np.random.default_rng(3003)
    w = (rng.standard_normal((32, 32)) * 0.2).astype(np.float32)
    s0 = (rng.standard_normal((32, 32)) * 0.2).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("MatMul", ["state_in", "w"], ["product"], name="product"),
            helper.make_node("Tanh", ["product"], ["state_out"], name="squash"),
        ],
        "spin_body",
        inputs=[
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_in", TensorProto.FLOAT, [32, 32]),
        ],
        outputs=[
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [32, 32]),
        ],
    )
    nodes = [
        helper.make_node("Squeeze", ["rounds", "axis0"], ["trip_count"], name="trip_count"),
        helper.make_node("Loop", ["trip_count", "", "s0"], ["state"], body=body, name="spin"),
        helper.make_node("ReduceSum", ["state"], ["total"], keepdims=0, name="total"),
        helper.make_node("Mul", ["total", "zero"], ["nothing"], name="nothing"),
        helper.make_node("Add", ["x", "nothing"], ["y"], name="y"),
    ]
    graph = helper.make_graph(
        nodes,
        "spin",
        inputs=[
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"]),
            helper.make_tensor_value_info("rounds", TensorProto.INT64, [1]),
        ],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
        initializer=[
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(s0, "s0"),
            numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        ],
    )
    return make_model(graph, "y = x after `rounds` iterations of a 32x32 matrix product")


def all_models() -> dict[Path, onnx.ModelProto]:
    ex = REPO / "examples" / "models"
    tm = REPO / "tests" / "models"
    models = {
        ex / "ranker" / "1" / "model.onnx": ranker(seed=101),
        ex / "ranker" / "2" / "model.onnx": ranker(seed=202),
        ex / "two_tower" / "1" / "model.onnx": two_tower(),
        ex / "multi_dtype" / "1" / "model.onnx": multi_dtype(),
    }
    for name, et in ECHO_TYPES.items():
        models[tm / f"echo_{name}" / "1" / "model.onnx"] = echo(name, et)
    models[tm / "sum_rows" / "1" / "model.onnx"] = sum_rows()
    models[tm / "spin" / "1" / "model.onnx"] = spin()
    return models


# --- verification with onnxruntime -------------------------------------------------

def _sample_inputs(sess) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {}
    for inp in sess.get_inputs():
        t = inp.type  # e.g. "tensor(float)"
        shape = [2 if not isinstance(d, int) else d for d in inp.shape]
        if inp.name == "rounds":
            feeds[inp.name] = np.array([1000], dtype=np.int64)
        elif inp.name in ("user_id",):
            feeds[inp.name] = np.array([0, 99], dtype=np.int64)
        elif inp.name in ("item_id",):
            feeds[inp.name] = np.array([5, 999], dtype=np.int64)
        elif t == "tensor(string)":
            feeds[inp.name] = np.array(["a", "b"] * (int(np.prod(shape)) // 2), dtype=object).reshape(shape)
        elif t == "tensor(bool)":
            feeds[inp.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            np_type = {
                "tensor(float16)": np.float16, "tensor(float)": np.float32,
                "tensor(double)": np.float64, "tensor(int8)": np.int8,
                "tensor(int16)": np.int16, "tensor(int32)": np.int32,
                "tensor(int64)": np.int64, "tensor(uint8)": np.uint8,
                "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
                "tensor(uint64)": np.uint64,
            }[t]
            feeds[inp.name] = (rng.standard_normal(shape) * 3).astype(np_type)
    return feeds


def verify(path: Path) -> None:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = _sample_inputs(sess)
    outs = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    if path.parent.parent.name.startswith("echo_"):
        np.testing.assert_array_equal(outs[0], feeds["x"])
        assert outs[0].dtype == feeds["x"].dtype, (outs[0].dtype, feeds["x"].dtype)
    elif path.parent.parent.name == "ranker":
        assert outs[0].shape == (2, 1) and outs[0].dtype == np.float32
        assert np.all((outs[0] > 0) & (outs[0] < 1))
    elif path.parent.parent.name == "sum_rows":
        np.testing.assert_allclose(outs[0], feeds["x"].sum(axis=1), rtol=1e-5, atol=1e-5)
    elif path.parent.parent.name == "spin":
        np.testing.assert_array_equal(outs[0], feeds["x"])
    elif path.parent.parent.name == "two_tower":
        assert outs[0].shape == (2,) and outs[0].dtype == np.float32
    elif path.parent.parent.name == "multi_dtype":
        got = dict(zip(names, outs))
        want_w = feeds["x_double"] * feeds["x_int32"].astype(np.float64) * feeds["flag"].astype(np.float64)
        np.testing.assert_allclose(got["weighted"], want_w)
        np.testing.assert_array_equal(got["count"], feeds["flag"].sum(axis=1).astype(np.int64))
        np.testing.assert_array_equal(got["tag"], feeds["label"])


def verify_broken(path: Path) -> None:
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:
        return
    raise AssertionError(f"{path} unexpectedly loads")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check-only", action="store_true", help="only verify the existing files")
    ap.add_argument("--wide-ranker", metavar="MODEL_DIR",
                    help="only write the benchmark's wide ranker as MODEL_DIR/ranker_wide/1/model.onnx")
    ap.add_argument("--compute-mlp", metavar="MODEL_DIR",
                    help="only write the instances benchmark's compute-bound MLP (256 -> 2048 -> 2048 -> 1) "
                         "as MODEL_DIR/mlp_compute/1/model.onnx")
    ap.add_argument("--large-ranker", metavar="MODEL_DIR",
                    help="only write the benchmark's large-input ranker as MODEL_DIR/ranker_large/1/model.onnx")
    args = ap.parse_args()
    on_demand = [(args.wide_ranker, "ranker_wide", wide_ranker), (args.large_ranker, "ranker_large", large_ranker),
                 (args.compute_mlp, "mlp_compute", lambda: wide_ranker(256, 2048))]
    if args.wide_ranker or args.large_ranker or args.compute_mlp:
        for model_dir, name, build in on_demand:
            if model_dir:
                path = Path(model_dir) / name / "1" / "model.onnx"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(build().SerializeToString(deterministic=True))
                print(f"wrote {path}")
        return 0

    models = all_models()
    broken = REPO / "tests" / "models" / "broken" / "1" / "model.onnx"
    if not args.check_only:
        for path, model in models.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(model.SerializeToString(deterministic=True))
        broken.parent.mkdir(parents=True, exist_ok=True)
        broken.write_bytes(BROKEN_BYTES)

    for path in models:
        size = path.stat().st_size
        assert size < 200_000, f"{path} is {size} bytes"
        verify(path)
        print(f"ok  {path.relative_to(REPO)}  ({size} bytes)")
    verify_broken(broken)
    print(f"ok  {broken.relative_to(REPO)}  (fails to load, as intended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
