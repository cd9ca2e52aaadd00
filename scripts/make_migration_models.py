#!/usr/bin/env python3
"""Writes, into a copy of a Triton model repository, a small ONNX model for every
`config.pbtxt` whose version folder has no model file: the model the configuration describes,
so that a repository kept without its binaries (tests/migration/) can be served as it is.

For each model folder under ROOT with a `config.pbtxt`:
  - the signature is the config's `input` / `output` (`name`, `data_type`, `dims`); with
    `max_batch_size > 0` each tensor gets a leading batch dimension; a `reshape` is the shape
    the model file has (behind the batch dimension, as in Triton);
  - the file goes to `<model>/1/<default_model_filename or model.onnx>`, unless a version
    folder already holds a model file (a real one, kept from the source repository);
  - only ONNX configurations get a model (`platform: "onnxruntime_onnx"`, `backend:
    "onnxruntime"`, or neither); a `python` backend gets an empty `1/model.py`, so that the
    server finds the folder as its peer would and says what it does with it; other platforms
    (TensorRT, TensorFlow GraphDef, HugeCTR, ensembles) get an empty `1/`, as their version
    folder is laid out, and no model: their files are not ONNX.

What the model computes: each output is filled from the first input's size where the output
has a free (-1) dimension (its values all 1), and where every dimension is fixed it is an
increasing ramp (0, 1/n, 2/n, ... for floats; 0, 1, 2, ... modulo 100 for integers), so a
classification over it has one answer: the last class. The inputs
are all graph inputs, so the server checks every declared name and type.

Never writes into tests/migration itself: the tests call it on their temporary copy.

Usage: .venv/bin/python scripts/make_migration_models.py ROOT
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import model_config_pb2

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17

ONNX_TYPES = {
    "TYPE_BOOL": TensorProto.BOOL,
    "TYPE_UINT8": TensorProto.UINT8,
    "TYPE_UINT16": TensorProto.UINT16,
    "TYPE_UINT32": TensorProto.UINT32,
    "TYPE_UINT64": TensorProto.UINT64,
    "TYPE_INT8": TensorProto.INT8,
    "TYPE_INT16": TensorProto.INT16,
    "TYPE_INT32": TensorProto.INT32,
    "TYPE_INT64": TensorProto.INT64,
    "TYPE_FP16": TensorProto.FLOAT16,
    "TYPE_FP32": TensorProto.FLOAT,
    "TYPE_FP64": TensorProto.DOUBLE,
    "TYPE_STRING": TensorProto.STRING,
}
MODEL_FILES = ("model.onnx", "model.pt", "model.savedmodel", "model.graphdef", "model.plan", "model.py")


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def kind(config: model_config_pb2.ModelConfig) -> str:
    named = config.platform or config.backend
    if named in ("", "onnxruntime", "onnxruntime_onnx"):
        return "onnx"
    return "python" if named == "python" else "other"


def model_shape(tensor, batched: bool) -> list:
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    return (["batch"] if batched else []) + [d if d >= 0 else f"{tensor.name}_{i}" for i, d in enumerate(dims)]


def fixed(shape: list) -> bool:
    return all(isinstance(d, int) for d in shape)


def output_nodes(out, index: int, shape: list, first_input: str | None, initializers: list) -> list:
    """The nodes that produce output `out` with `shape` (see the module's docstring)."""
    elem = ONNX_TYPES[model_config_pb2.DataType.Name(out.data_type)]
    if elem == TensorProto.STRING:
        raise ValueError(f"output {out.name}: string outputs are not generated")
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    if fixed(shape) or first_input is None:
        sizes = [d if isinstance(d, int) else 1 for d in shape]
        count = int(np.prod(sizes))
        ramp = np.arange(count) / count if np.issubdtype(np_type, np.floating) else np.arange(count) % 100
        values = ramp.astype(np_type).reshape(sizes)
        initializers.append(numpy_helper.from_array(values, f"value_{index}"))
        return [helper.make_node("Identity", [f"value_{index}"], [out.name])]
    # A free dimension takes the first input's size at that position (1 past its rank).
    parts, nodes = [], [helper.make_node("Shape", [first_input], [f"in_shape_{index}"])]
    for position, dim in enumerate(shape):
        name = f"dim_{index}_{position}"
        if isinstance(dim, int):
            initializers.append(numpy_helper.from_array(np.array([dim], dtype=np.int64), name))
        else:
            start = numpy_helper.from_array(np.array([position], dtype=np.int64), f"{name}_start")
            end = numpy_helper.from_array(np.array([position + 1], dtype=np.int64), f"{name}_end")
            initializers += [start, end]
            nodes.append(helper.make_node("Slice", [f"in_shape_{index}", start.name, end.name], [f"{name}_sliced"]))
            one = numpy_helper.from_array(np.array([1], dtype=np.int64), f"{name}_one")
            initializers.append(one)
            # Past the input's rank the slice is empty: [size, 1] or [1], and the first is taken.
            nodes.append(helper.make_node("Concat", [f"{name}_sliced", one.name], [f"{name}_pair"], axis=0))
            zero = numpy_helper.from_array(np.array([0], dtype=np.int64), f"{name}_zero")
            initializers.append(zero)
            nodes.append(helper.make_node("Slice", [f"{name}_pair", zero.name, one.name], [name]))
        parts.append(name)
    nodes.append(helper.make_node("Concat", parts, [f"out_shape_{index}"], axis=0))
    fill = helper.make_tensor(f"fill_{index}", elem, [1], np.ones(1, dtype=np_type).tolist()
                              if elem != TensorProto.FLOAT16 else [np.float16(1)])
    nodes.append(helper.make_node("ConstantOfShape", [f"out_shape_{index}"], [out.name], value=fill))
    return nodes


def onnx_model(config: model_config_pb2.ModelConfig, name: str) -> onnx.ModelProto:
    batched = config.max_batch_size > 0
    inputs = [helper.make_tensor_value_info(t.name, ONNX_TYPES[model_config_pb2.DataType.Name(t.data_type)],
                                            model_shape(t, batched)) for t in config.input]
    first = config.input[0].name if config.input else None
    nodes, initializers, outputs = [], [], []
    for index, out in enumerate(config.output):
        shape = model_shape(out, batched)
        nodes += output_nodes(out, index, shape, first, initializers)
        outputs.append(helper.make_tensor_value_info(out.name, ONNX_TYPES[model_config_pb2.DataType.Name(out.data_type)], shape))
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorport-make_migration_models", producer_version="1",
                              doc_string=f"the signature of {name}/config.pbtxt")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def has_model_file(folder: Path, filename: str) -> bool:
    versions = [v for v in folder.iterdir() if v.is_dir() and v.name.isdigit()]
    return any((v / f).exists() for v in versions for f in {filename, *MODEL_FILES})


def fill(root: Path) -> list[Path]:
    """Writes the missing model files under `root`; returns the paths written."""
    written = []
    for config_path in sorted(root.rglob("config.pbtxt")):
        folder = config_path.parent
        config = read_config(config_path)
        filename = config.default_model_filename or "model.onnx"
        if has_model_file(folder, filename):
            continue
        target = folder / "1"
        if kind(config) == "onnx":
            target.mkdir(exist_ok=True)
            onnx.save(onnx_model(config, folder.name), target / filename)
            written.append(target / filename)
        elif kind(config) == "python":
            target.mkdir(exist_ok=True)
            (target / "model.py").write_text("")
            written.append(target / "model.py")
        else:
            target.mkdir(exist_ok=True)
            written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a copy of a model repository (never tests/migration)")
    args = parser.parse_args()
    corpus = (Path(__file__).resolve().parent.parent / "tests" / "migration").resolve()
    if args.root.resolve() == corpus or corpus in args.root.resolve().parents:
        print("refusing to write into tests/migration: run on a copy", file=sys.stderr)
        return 2
    for path in fill(args.root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
