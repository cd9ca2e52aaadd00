"""Expected outputs: the same model file run by onnxruntime itself."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[3]


def model_file(name: str, version: int) -> Path:
    for base in (REPO / "examples" / "models", REPO / "tests" / "models"):
        path = base / name / str(version) / "model.onnx"
        if path.exists():
            return path
    raise FileNotFoundError(f"{name}/{version}")


@functools.cache
def _session(name: str, version: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_file(name, version)), providers=["CPUExecutionProvider"])


def run(name: str, version: int, feeds: dict) -> dict[str, np.ndarray]:
    session = _session(name, version)
    prepared = {}
    for spec in session.get_inputs():
        value = feeds[spec.name]
        if spec.type == "tensor(string)":
            value = np.array([v.decode() if isinstance(v, bytes) else v for v in np.ravel(value)],
                             dtype=object).reshape(np.shape(value))
        prepared[spec.name] = value
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, prepared)))
