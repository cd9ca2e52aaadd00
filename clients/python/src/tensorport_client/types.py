"""The typed answers of the status and metadata calls."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._dtypes import numpy_dtype


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of a model: KServe datatype and shape (-1 for a dynamic dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.datatype)


@dataclass(frozen=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def output(self, name: str) -> TensorSpec:
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise KeyError(f"model {self.name!r} has no output {name!r}; it has {[o.name for o in self.outputs]}")


@dataclass(frozen=True)
class VersionStatus:
    """One version's state as TF Serving reports it (AVAILABLE, LOADING, END, ...)."""

    version: int
    state: str
    error_code: str
    error_message: str

    @property
    def available(self) -> bool:
        return self.state == "AVAILABLE"
