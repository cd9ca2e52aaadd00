"""The client over HTTP: TF Serving REST (`/v1`) and KServe v2 HTTP (`/v2`)."""

from __future__ import annotations

import base64
import json

import numpy as np
import requests

from ._base import ClientBase, Inputs, shm_params
from ._dtypes import TF_TO_KSERVE, from_raw, kserve_datatype, numpy_dtype, to_raw
from .errors import TensorportError
from .shm import Layout, SharedMemoryRegion
from .types import ModelMetadata, TensorSpec, VersionStatus

_HEADER_LENGTH = "Inference-Header-Content-Length"


def _version_path(model: str, version: int | None) -> str:
    path = f"/models/{requests.utils.quote(model, safe='')}"
    return path if version is None else f"{path}/versions/{int(version)}"


def _json_value(array: np.ndarray):
    """An array as TF Serving JSON: nested lists; binary strings as {"b64": ...}."""
    if array.dtype == object:
        encode = np.vectorize(lambda b: {"b64": base64.b64encode(bytes(b)).decode("ascii")}, otypes=[object])
        return encode(array).tolist() if array.ndim else encode(array).item()
    return array.tolist()


def _from_json(value, datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        def element(v):
            if isinstance(v, dict):
                return base64.b64decode(v["b64"])
            return v.encode("utf-8")
        nested = np.array(value, dtype=object)
        return np.vectorize(element, otypes=[object])(nested) if nested.size else nested
    return np.array(value, dtype=numpy_dtype(datatype))


class RestClient(ClientBase):
    """tensorport over HTTP.

    >>> with RestClient("http://localhost:8501") as client:
    ...     scores = client.predict("ranker", {"features": np.zeros((2, 16), np.float32)})["score"]
    """

    def __init__(self, url: str = "http://localhost:8501", *, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._signatures: dict[tuple[str, int | None, str], dict[str, str]] = {}

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs) -> requests.Response:
        response = self._session.request(method, self.url + path, timeout=self.timeout, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise TensorportError.from_http(response.status_code, message)
        return response

    # ---- health
    def server_live(self) -> bool:
        return bool(self._call("GET", "/v2/health/live").json().get("live"))

    def server_ready(self) -> bool:
        return bool(self._call("GET", "/v2/health/ready").json().get("ready"))

    def model_ready(self, model: str, version: int | None = None) -> bool:
        try:
            return bool(self._call("GET", f"/v2{_version_path(model, version)}/ready").json().get("ready"))
        except TensorportError as err:
            if err.kind in ("not_found", "unavailable"):
                return False
            raise

    # ---- status and metadata
    def model_status(self, model: str, version: int | None = None) -> list[VersionStatus]:
        """TF Serving's model status: one row per version."""
        body = self._call("GET", f"/v1{_version_path(model, version)}").json()
        return [VersionStatus(version=int(row["version"]), state=row["state"],
                              error_code=row["status"]["error_code"], error_message=row["status"]["error_message"])
                for row in body["model_version_status"]]

    def model_metadata(self, model: str, version: int | None = None) -> ModelMetadata:
        """KServe model metadata: inputs and outputs with datatypes and shapes."""
        body = self._call("GET", f"/v2{_version_path(model, version)}").json()

        def specs(rows):
            return tuple(TensorSpec(r["name"], r["datatype"], tuple(r["shape"])) for r in rows)

        return ModelMetadata(name=body["name"], versions=tuple(body["versions"]), platform=body["platform"],
                             inputs=specs(body["inputs"]), outputs=specs(body["outputs"]))

    # ---- TF Serving predict
    def _output_types(self, model: str, version: int | None, signature: str) -> dict[str, str]:
        key = (model, version, signature)
        if key not in self._signatures:
            body = self._call("GET", f"/v1{_version_path(model, version)}/metadata").json()
            defs = body["metadata"]["signature_def"]["signature_def"]
            if signature not in defs:
                raise TensorportError("invalid_argument", 400, f"model {model!r} has no signature {signature!r}")
            self._signatures[key] = {name: TF_TO_KSERVE.get(info["dtype"], "BYTES")
                                     for name, info in defs[signature]["outputs"].items()}
        return self._signatures[key]

    def predict(self, model: str, inputs: Inputs, *, version: int | None = None,
                signature: str | None = None) -> dict[str, np.ndarray]:
        """TF Serving Predict in the columnar format: {input: array} in, {output: array} out.
        Output dtypes come from the signature (fetched once per model version)."""
        arrays = self._arrays(model, version, inputs)
        body: dict[str, object] = {"inputs": {name: _json_value(a) for name, a in arrays.items()}}
        if signature:
            body["signature_name"] = signature
        types = self._output_types(model, version, signature or "serving_default")
        response = self._call("POST", f"/v1{_version_path(model, version)}:predict",
                              data=json.dumps(body), headers={"Content-Type": "application/json"})
        outputs = response.json()["outputs"]
        if len(types) == 1 and not (isinstance(outputs, dict) and set(outputs) == set(types)):
            # One output comes back unnamed, as the bare tensor.
            outputs = {next(iter(types)): outputs}
        return {name: _from_json(value, types.get(name, "BYTES")) for name, value in outputs.items()}

    # ---- KServe infer
    def _infer(self, model, version, inputs, outputs):
        header: dict[str, object] = {"inputs": [], "parameters": {"binary_data_output": True}}
        blobs = []
        for name, array in inputs.items():
            raw = to_raw(array)
            header["inputs"].append({"name": name, "shape": list(array.shape), "datatype": kserve_datatype(array),
                                     "parameters": {"binary_data_size": len(raw)}})
            blobs.append(raw)
        if outputs:
            header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in outputs]
        head = json.dumps(header).encode("utf-8")
        response = self._call("POST", f"/v2{_version_path(model, version)}/infer", data=b"".join([head, *blobs]),
                              headers={_HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"})
        return self._decode_infer(response)

    @staticmethod
    def _decode_infer(response: requests.Response) -> dict[str, np.ndarray]:
        length = response.headers.get(_HEADER_LENGTH)
        content = response.content
        body = json.loads(content[:int(length)] if length is not None else content)
        offset = int(length) if length is not None else 0
        results = {}
        for output in body["outputs"]:
            size = (output.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                results[output["name"]] = from_raw(content[offset:offset + size], output["datatype"], output["shape"])
                offset += size
            elif "data" in output:
                data = _from_json(output["data"], output["datatype"])
                results[output["name"]] = data.reshape(output["shape"])
        return results

    def _infer_in_region(self, model, version, inputs, region: SharedMemoryRegion, layout: Layout):
        body = {
            "inputs": [{"name": name, "shape": list(array.shape), "datatype": kserve_datatype(array),
                        "parameters": shm_params(region.name, *layout.inputs[name])}
                       for name, array in inputs.items()],
            "outputs": [{"name": name, "parameters": shm_params(region.name, *place)}
                        for name, place in layout.outputs.items()],
        }
        response = self._call("POST", f"/v2{_version_path(model, version)}/infer", json=body)
        return {o["name"]: (o["datatype"], tuple(o["shape"])) for o in response.json()["outputs"]}

    # ---- shared memory
    def _register(self, region: SharedMemoryRegion) -> None:
        self._call("POST", f"/v2/systemsharedmemory/region/{requests.utils.quote(region.name, safe='')}/register",
                   json={"key": region.key, "offset": 0, "byte_size": region.byte_size})

    def unregister_region(self, name: str) -> None:
        self._call("POST", f"/v2/systemsharedmemory/region/{requests.utils.quote(name, safe='')}/unregister")

    def shared_memory_status(self) -> list[dict]:
        """The regions registered with the server (every client's): name, key, offset, byte_size."""
        return self._call("GET", "/v2/systemsharedmemory/status").json()


__all__ = ["RestClient"]
