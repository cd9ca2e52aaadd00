#!/usr/bin/env python3
"""Writes the large model `scripts/instances_memory.py` measures, as a TorchScript file or a
TensorFlow SavedModel: 256 -> 5000 -> 5000 -> 1 with ReLU between, 105 MB of float32 weights
(most in one 5000 x 5000 matrix), the same weights as that script's ONNX file (seeded), with
the config.toml the server needs beside it.

    .cache/torch-venv/bin/python scripts/make_big_models.py torchscript DIR   # DIR/1/model.pt
    .cache/tf-python/bin/python scripts/make_big_models.py savedmodel DIR     # DIR/1/saved_model.pb

DIR is the model's folder in a model repository. The two virtual environments are the ones
`make torch-fixtures` and `make tf-fixtures` use; without regenerating the test fixtures:

    python3 -m venv .cache/torch-venv && .cache/torch-venv/bin/pip install torch==2.13.0 numpy
    python3 -m venv .cache/tf-python && .cache/tf-python/bin/pip install tensorflow-cpu==2.13.0

Nothing in CI needs them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

FEATURES, HIDDEN = 256, 5000

# TorchScript files carry no signature; the server reads it from config.toml.
TORCH_CONFIG = """[[input]]
name = "features"
dtype = "FP32"
shape = ["batch", 256]

[[output]]
name = "score"
dtype = "FP32"
shape = ["batch", 1]
"""


def weights() -> list[np.ndarray]:
    """The weights instances_memory.big_mlp() puts in its ONNX file, drawn in the same order."""
    rng = np.random.default_rng(34)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, HIDDEN)) * 0.01).astype(np.float32)
    w3 = (rng.standard_normal((HIDDEN, 1)) * 0.01).astype(np.float32)
    return [w1, w2, w3]


def torchscript(folder: Path) -> None:
    import torch

    class BigMlp(torch.nn.Module):
        def __init__(self, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> None:
            super().__init__()
            for name, value in (("w1", w1), ("w2", w2), ("w3", w3)):
                self.register_buffer(name, torch.from_numpy(value.copy()))

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            hidden = torch.relu(features @ self.w1)
            hidden = torch.relu(hidden @ self.w2)
            return hidden @ self.w3

    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.script(BigMlp(*weights()).eval()).save(str(folder / "1" / "model.pt"))
    (folder / "config.toml").write_text(TORCH_CONFIG)


def savedmodel(folder: Path) -> None:
    import tensorflow as tf

    class BigMlp(tf.Module):
        def __init__(self, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> None:
            super().__init__()
            self.w1, self.w2, self.w3 = (tf.Variable(w, trainable=False) for w in (w1, w2, w3))

        @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="features")])
        def serve(self, features):
            hidden = tf.nn.relu(tf.matmul(features, self.w1))
            hidden = tf.nn.relu(tf.matmul(hidden, self.w2))
            return {"score": tf.matmul(hidden, self.w3)}

    module = BigMlp(*weights())
    folder.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(module, str(folder / "1"), signatures={"serving_default": module.serve})


def main() -> int:
    makers = {"torchscript": torchscript, "savedmodel": savedmodel}
    if len(sys.argv) != 3 or sys.argv[1] not in makers:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(makers)}}} DIR")
    makers[sys.argv[1]](Path(sys.argv[2]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
