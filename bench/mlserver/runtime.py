"""An MLServer runtime that runs an ONNX file on onnxruntime: the peer `make bench` measures
tensorport against. Same model file, same runtime library version and the same thread
settings as tensorport's defaults (one intra-op thread, one inter-op thread).

model-settings.json (written by scripts/bench.py):
  {"name": ..., "implementation": "runtime.OnnxModel", "parameters": {"uri": "/path/model.onnx"},
   "max_batch_size": N, "max_batch_time": S}
"""

from __future__ import annotations

import onnxruntime
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            self.settings.parameters.uri, options, providers=["CPUExecutionProvider"]
        )
        self._outputs = [output.name for output in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {request_input.name: NumpyCodec.decode_input(request_input) for request_input in payload.inputs}
        results = self._session.run(self._outputs, feeds)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[NumpyCodec.encode_output(name, value) for name, value in zip(self._outputs, results)],
        )
