"""TorchScript fixture models and their reference outputs, computed by PyTorch itself.

  tests/models/ranker_torch/1/model.pt     the ranking MLP of examples/models/ranker/1/model.onnx,
                                           rebuilt from that file's weights (w1, b1, w2, b2)
  tests/models/torch_pair/1/model.pt       two inputs, a tuple of two outputs
  tests/models/torch_dict/1/model.pt       int64 + float64 inputs, a dict of two outputs
  tests/models/torch_raises/1/model.pt     raises for negative inputs (a runtime failure)
  tests/models/<name>/config.toml          the signature each declares
  tests/models/<name>/reference.json       fixed inputs and the outputs PyTorch computes for them

The files are committed; the tests never need PyTorch. To regenerate (needs torch==2.13.0,
onnx and numpy, and onnxruntime for the check against the ONNX ranker, e.g. `make torch-fixtures`, which installs them in .cache/torch-venv):

    .cache/torch-venv/bin/python scripts/make_torch_fixtures.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import onnx
import torch
from onnx import numpy_helper

REPO = Path(__file__).resolve().parent.parent
TEST_MODELS = REPO / "tests" / "models"
RANKER_ONNX = REPO / "examples" / "models" / "ranker" / "1" / "model.onnx"


def ranker_inputs() -> np.ndarray:
    """Eight rows of features, the same in every format's conformance check."""
    grid = np.arange(8 * 16, dtype=np.int64).reshape(8, 16)
    return (((grid * 37) % 101 - 50) / 25.0).astype(np.float32)


class Ranker(torch.nn.Module):
    """Gemm -> Relu -> Gemm -> Sigmoid, as in the ONNX file (Gemm without transposes: x @ w + b)."""

    def __init__(self, w1, b1, w2, b2):
        super().__init__()
        for name, value in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)):
            self.register_buffer(name, torch.from_numpy(value.copy()))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(features @ self.w1 + self.b1)
        return torch.sigmoid(hidden @ self.w2 + self.b2)


class Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + y, x * y


class Dict_(torch.nn.Module):
    # Returned in the opposite order of the declared outputs: names, not positions, match them.
    def forward(self, ids: torch.Tensor, weights: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {
            "count": (ids > 0).sum(dim=1),
            "weighted": (ids.to(torch.float64) * weights).sum(dim=1, keepdim=True),
        }


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x * 2.0


def ranker_weights() -> list[np.ndarray]:
    model = onnx.load(str(RANKER_ONNX))
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return [weights[name] for name in ("w1", "b1", "w2", "b2")]


def config_toml(inputs, outputs) -> str:
    def table(kind, name, dtype, shape):
        dims = ", ".join(f'"{d}"' if isinstance(d, str) else str(d) for d in shape)
        return f'[[{kind}]]\nname = "{name}"\ndtype = "{dtype}"\nshape = [{dims}]\n'

    body = [table("input", *spec) for spec in inputs] + [table("output", *spec) for spec in outputs]
    return "# The signature of model.pt (TorchScript files carry none), in forward()'s order.\n\n" + \
        "\n".join(body)


def as_json(arrays: dict) -> dict:
    return {name: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}
            for name, a in arrays.items()}


def write(name: str, module: torch.nn.Module, inputs, outputs, feeds: dict) -> dict:
    folder = TEST_MODELS / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    scripted = torch.jit.script(module.eval())
    scripted.save(str(folder / "1" / "model.pt"))
    (folder / "config.toml").write_text(config_toml(inputs, outputs))

    # The reference comes from the saved file, loaded back as the server will load it.
    loaded = torch.jit.load(str(folder / "1" / "model.pt"))
    with torch.no_grad():
        result = loaded(*[torch.from_numpy(feeds[spec[0]]) for spec in inputs])
    if isinstance(result, torch.Tensor):
        result = (result,)
    if isinstance(result, dict):
        named = {spec[0]: result[spec[0]].numpy() for spec in outputs}
    else:
        named = {spec[0]: value.numpy() for spec, value in zip(outputs, result)}
    reference = {"torch_version": torch.__version__, "inputs": as_json(feeds), "outputs": as_json(named)}
    (folder / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(f"wrote {folder.relative_to(REPO)}")
    return named


def check_same_as_onnx(scores: np.ndarray) -> None:
    """The rebuilt MLP must be the ONNX one: same outputs (to float rounding) on the same rows."""
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime not installed: skipped the comparison with the ONNX ranker")
        return
    session = onnxruntime.InferenceSession(str(RANKER_ONNX), providers=["CPUExecutionProvider"])
    (expected,) = session.run(["score"], {"features": ranker_inputs()})
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-6)
    print(f"ranker_torch matches {RANKER_ONNX.relative_to(REPO)} "
          f"(largest difference {np.abs(scores - expected).max():.2e})")


def main() -> None:
    torch.manual_seed(0)
    scores = write("ranker_torch", Ranker(*ranker_weights()),
                   [("features", "FP32", ["batch", 16])], [("score", "FP32", ["batch", 1])],
                   {"features": ranker_inputs()})["score"]
    check_same_as_onnx(scores)
    write("torch_pair", Pair(),
          [("x", "FP32", ["batch", 3]), ("y", "FP32", ["batch", 3])],
          [("sum", "FP32", ["batch", 3]), ("product", "FP32", ["batch", 3])],
          {"x": np.array([[1.5, -2.0, 0.25], [3.0, 4.0, -5.5]], dtype=np.float32),
           "y": np.array([[2.0, 0.5, -4.0], [-1.0, 0.125, 2.0]], dtype=np.float32)})
    write("torch_dict", Dict_(),
          [("ids", "INT64", ["batch", 4]), ("weights", "FP64", ["batch", 4])],
          [("weighted", "FP64", ["batch", 1]), ("count", "INT64", ["batch"])],
          {"ids": np.array([[1, 0, 3, 9007199254740993], [0, 0, 2, -1]], dtype=np.int64),
           "weights": np.array([[0.5, 2.0, -1.0, 1e-16], [1.0, 1.0, 0.25, 3.0]], dtype=np.float64)})
    write("torch_raises", Raises(),
          [("x", "FP32", ["batch", 2])], [("y", "FP32", ["batch", 2])],
          {"x": np.array([[1.0, 2.5]], dtype=np.float32)})


if __name__ == "__main__":
    main()
