"""The client over gRPC: `tensorflow.serving.PredictionService` / `ModelService` and
`inference.GRPCInferenceService` (KServe v2)."""

from __future__ import annotations

import grpc
import numpy as np

from . import _protos as pb
from ._base import ClientBase, Inputs, shm_params
from ._dtypes import KSERVE_TO_TF, TF_TO_KSERVE, as_array, from_raw, kserve_datatype, numpy_dtype, to_raw
from .errors import TensorportError
from .shm import Layout, SharedMemoryRegion
from .types import ModelMetadata, TensorSpec, VersionStatus

# No client-side cap: the server's --max-request-bytes is the limit that matters.
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]

# TF DataType name -> the TensorProto field that carries its values when tensor_content is empty.
_TYPED_FIELDS = {
    "DT_FLOAT": "float_val", "DT_DOUBLE": "double_val", "DT_INT32": "int_val", "DT_INT16": "int_val",
    "DT_INT8": "int_val", "DT_UINT8": "int_val", "DT_UINT16": "int_val", "DT_INT64": "int64_val",
    "DT_BOOL": "bool_val", "DT_STRING": "string_val", "DT_HALF": "half_val", "DT_BFLOAT16": "half_val",
    "DT_UINT32": "uint32_val", "DT_UINT64": "uint64_val",
}


def _tensor_proto(array: np.ndarray):
    datatype = kserve_datatype(array)
    proto = pb.message("tensorflow.TensorProto")(dtype=pb.enum_value("tensorflow.DataType", KSERVE_TO_TF[datatype]))
    for dim in array.shape:
        proto.tensor_shape.dim.add(size=int(dim))
    if datatype == "BYTES":
        proto.string_val.extend(bytes(b) if not isinstance(b, str) else b.encode() for b in array.reshape(-1))
    else:
        proto.tensor_content = to_raw(array)
    return proto


def _from_tensor_proto(proto) -> np.ndarray:
    tf_name = pb.enum_name("tensorflow.DataType", proto.dtype)
    datatype = TF_TO_KSERVE.get(tf_name)
    if datatype is None:
        raise TensorportError("internal", "UNKNOWN", f"the server sent an unsupported dtype {tf_name}")
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if proto.tensor_content:
        return from_raw(proto.tensor_content, datatype, shape)
    values = list(getattr(proto, _TYPED_FIELDS[tf_name]))
    if datatype in ("FP16", "BF16"):
        # half_val holds the 16-bit patterns in int32s.
        bits = np.array(values, dtype=np.uint16).tobytes()
        flat = from_raw(bits, datatype, (len(values),))
    elif datatype == "BYTES":
        flat = np.array(values, dtype=object)
    else:
        flat = np.array(values, dtype=numpy_dtype(datatype))
    count = int(np.prod(shape, dtype=np.int64))
    if flat.size == 1 and count != 1:
        # TF Serving's rule: a single value fills the whole shape.
        return np.full(shape, flat[0], dtype=flat.dtype)
    return flat.reshape(shape)


def _set_param(parameters, key: str, value) -> None:
    param = parameters[key]
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    else:
        param.string_param = str(value)


class GrpcClient(ClientBase):
    """tensorport over gRPC.

    >>> with GrpcClient("localhost:8500") as client:
    ...     outputs = client.infer("ranker", {"features": np.zeros((2, 16), np.float32)})
    """

    def __init__(self, target: str = "localhost:8500", *, timeout: float = 30.0):
        self.target = target
        self.timeout = timeout
        self._channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._stubs: dict[str, object] = {}

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, service: str, method: str, request, response_type: str):
        path = f"/{service}/{method}"
        stub = self._stubs.get(path)
        if stub is None:
            stub = self._channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                             response_deserializer=pb.message(response_type).FromString)
            self._stubs[path] = stub
        try:
            return stub(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise TensorportError.from_grpc(err.code().name, err.details() or "") from None

    def _kserve(self, method: str, request_type: str, response_type: str, **fields):
        request = pb.message(f"inference.{request_type}")(**fields)
        return self._call(pb.INFERENCE_SERVICE, method, request, f"inference.{response_type}")

    @staticmethod
    def _model_spec(spec, model: str, version: int | None, signature: str | None = None) -> None:
        spec.name = model
        if version is not None:
            spec.version.value = int(version)
        if signature:
            spec.signature_name = signature

    # ---- health
    def server_live(self) -> bool:
        return self._kserve("ServerLive", "ServerLiveRequest", "ServerLiveResponse").live

    def server_ready(self) -> bool:
        return self._kserve("ServerReady", "ServerReadyRequest", "ServerReadyResponse").ready

    def model_ready(self, model: str, version: int | None = None) -> bool:
        try:
            return self._kserve("ModelReady", "ModelReadyRequest", "ModelReadyResponse", name=model,
                                version="" if version is None else str(version)).ready
        except TensorportError as err:
            if err.kind in ("not_found", "unavailable"):
                return False
            raise

    # ---- status and metadata
    def model_status(self, model: str, version: int | None = None) -> list[VersionStatus]:
        """TF Serving's GetModelStatus: one row per version."""
        request = pb.message("tensorflow.serving.GetModelStatusRequest")()
        self._model_spec(request.model_spec, model, version)
        response = self._call(pb.MODEL_SERVICE, "GetModelStatus", request,
                              "tensorflow.serving.GetModelStatusResponse")
        return [VersionStatus(version=row.version,
                              state=pb.enum_name("tensorflow.serving.ModelVersionStatus.State", row.state),
                              error_code=pb.enum_name("tensorflow.error.Code", row.status.error_code),
                              error_message=row.status.error_message)
                for row in response.model_version_status]

    def model_metadata(self, model: str, version: int | None = None) -> ModelMetadata:
        """KServe ModelMetadata: inputs and outputs with datatypes and shapes."""
        response = self._kserve("ModelMetadata", "ModelMetadataRequest", "ModelMetadataResponse", name=model,
                                version="" if version is None else str(version))

        def specs(rows):
            return tuple(TensorSpec(r.name, r.datatype, tuple(r.shape)) for r in rows)

        return ModelMetadata(name=response.name, versions=tuple(response.versions), platform=response.platform,
                             inputs=specs(response.inputs), outputs=specs(response.outputs))

    # ---- TF Serving predict
    def predict(self, model: str, inputs: Inputs, *, version: int | None = None,
                signature: str | None = None) -> dict[str, np.ndarray]:
        """TF Serving Predict: {input: array} in, {output: array} out (tensor_content on the wire)."""
        request = pb.message("tensorflow.serving.PredictRequest")()
        self._model_spec(request.model_spec, model, version, signature)
        for name, array in self._arrays(model, version, inputs).items():
            request.inputs[name].CopyFrom(_tensor_proto(array))
        response = self._call(pb.PREDICTION_SERVICE, "Predict", request, "tensorflow.serving.PredictResponse")
        return {name: _from_tensor_proto(proto) for name, proto in response.outputs.items()}

    # ---- KServe infer
    def _request(self, model: str, version: int | None):
        return pb.message("inference.ModelInferRequest")(model_name=model,
                                                          model_version="" if version is None else str(version))

    def _infer(self, model, version, inputs, outputs):
        request = self._request(model, version)
        for name, array in inputs.items():
            request.inputs.add(name=name, datatype=kserve_datatype(array), shape=list(array.shape))
            request.raw_input_contents.append(to_raw(array))
        for name in outputs or ():
            request.outputs.add(name=name)
        response = self._call(pb.INFERENCE_SERVICE, "ModelInfer", request, "inference.ModelInferResponse")
        results = {}
        for i, output in enumerate(response.outputs):
            if i < len(response.raw_output_contents):
                results[output.name] = from_raw(response.raw_output_contents[i], output.datatype, output.shape)
            else:
                results[output.name] = self._typed_contents(output)
        return results

    @staticmethod
    def _typed_contents(output) -> np.ndarray:
        contents = output.contents
        field = {"BOOL": "bool_contents", "FP32": "fp32_contents", "FP64": "fp64_contents",
                 "BYTES": "bytes_contents", "INT64": "int64_contents", "UINT64": "uint64_contents"}.get(
            output.datatype, "int_contents" if output.datatype.startswith("INT") else "uint_contents")
        values = list(getattr(contents, field))
        dtype = numpy_dtype(output.datatype)
        return as_array(np.array(values, dtype=dtype)).reshape(tuple(output.shape))

    def _infer_in_region(self, model, version, inputs, region: SharedMemoryRegion, layout: Layout):
        request = self._request(model, version)
        for name, array in inputs.items():
            tensor = request.inputs.add(name=name, datatype=kserve_datatype(array), shape=list(array.shape))
            for key, value in shm_params(region.name, *layout.inputs[name]).items():
                _set_param(tensor.parameters, key, value)
        for name, place in layout.outputs.items():
            tensor = request.outputs.add(name=name)
            for key, value in shm_params(region.name, *place).items():
                _set_param(tensor.parameters, key, value)
        response = self._call(pb.INFERENCE_SERVICE, "ModelInfer", request, "inference.ModelInferResponse")
        return {o.name: (o.datatype, tuple(o.shape)) for o in response.outputs}

    # ---- shared memory
    def _register(self, region: SharedMemoryRegion) -> None:
        self._kserve("SystemSharedMemoryRegister", "SystemSharedMemoryRegisterRequest",
                     "SystemSharedMemoryRegisterResponse", name=region.name, key=region.key, offset=0,
                     byte_size=region.byte_size)

    def unregister_region(self, name: str) -> None:
        self._kserve("SystemSharedMemoryUnregister", "SystemSharedMemoryUnregisterRequest",
                     "SystemSharedMemoryUnregisterResponse", name=name)

    def shared_memory_status(self) -> list[dict]:
        """The regions registered with the server (every client's): name, key, offset, byte_size."""
        response = self._kserve("SystemSharedMemoryStatus", "SystemSharedMemoryStatusRequest",
                                "SystemSharedMemoryStatusResponse")
        return [{"name": s.name, "key": s.key, "offset": s.offset, "byte_size": s.byte_size}
                for s in response.regions.values()]


__all__ = ["GrpcClient"]
