"""What the REST and gRPC clients share: input normalisation and the shared-memory flow
(lay tensors out in a region, run, read outputs back), built on a few transport methods."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ._dtypes import as_array, raw_size
from .shm import Layout, SharedMemoryRegion
from .types import ModelMetadata

Inputs = Mapping[str, object]


def normalise_inputs(inputs: Inputs) -> dict[str, np.ndarray]:
    if not isinstance(inputs, Mapping) or not inputs:
        raise TypeError("inputs must be a non-empty mapping of input name to array")
    return {str(name): as_array(value) for name, value in inputs.items()}


def shm_params(region: str, offset: int, size: int) -> dict[str, object]:
    return {"shared_memory_region": region, "shared_memory_offset": offset, "shared_memory_byte_size": size}


class ClientBase:
    """KServe v2 calls common to both transports. Subclasses provide the transport."""

    def _arrays(self, model: str, version: int | None, inputs: Inputs) -> dict[str, np.ndarray]:
        """Inputs as arrays. An ndarray is sent as it is; anything else (a list, a scalar)
        takes the dtype the model declares for that input, looked up once per client."""
        if not isinstance(inputs, Mapping) or not inputs:
            raise TypeError("inputs must be a non-empty mapping of input name to array")
        if all(isinstance(v, np.ndarray) for v in inputs.values()):
            return normalise_inputs(inputs)
        cache = self.__dict__.setdefault("_declared", {})
        if (model, version) not in cache:
            cache[(model, version)] = {s.name: s.dtype for s in self.model_metadata(model, version).inputs}
        declared = cache[(model, version)]
        arrays = {}
        for name, value in inputs.items():
            dtype = declared.get(str(name))
            if isinstance(value, np.ndarray) or dtype is None or dtype == object:
                arrays[str(name)] = as_array(value)
            else:
                arrays[str(name)] = np.asarray(value, dtype=dtype)
        return arrays

    # ---- transport hooks
    def model_metadata(self, model: str, version: int | None = None) -> ModelMetadata:
        raise NotImplementedError

    def _infer(self, model: str, version: int | None, inputs: dict[str, np.ndarray],
               outputs: Sequence[str] | None) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _infer_in_region(self, model: str, version: int | None, inputs: dict[str, np.ndarray],
                         region: SharedMemoryRegion, layout: Layout) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Runs with every input and output in `region` at `layout`; returns each output's
        datatype and shape."""
        raise NotImplementedError

    def _register(self, region: SharedMemoryRegion) -> None:
        raise NotImplementedError

    def unregister_region(self, name: str) -> None:
        raise NotImplementedError

    # ---- shared behaviour
    def infer(self, model: str, inputs: Inputs, *, version: int | None = None,
              outputs: Sequence[str] | None = None, region: SharedMemoryRegion | None = None,
              output_shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
        """KServe v2 inference: numpy arrays in, {output name: numpy array} out.

        With `region` (created by this process and registered with `register_region`), the
        inputs are written into the region and the server writes the outputs there too; only
        their descriptions travel over the socket. Output sizes come from the model's metadata,
        with a dynamic first dimension taken as the batch size of the inputs; `output_shapes`
        gives them for other cases.
        """
        arrays = self._arrays(model, version, inputs)
        if region is None:
            return self._infer(model, version, arrays, outputs)
        specs = self._output_specs(model, version, arrays, outputs, output_shapes)
        layout = Layout(arrays, specs)
        if layout.byte_size > region.byte_size:
            raise ValueError(f"the request needs {layout.byte_size} bytes of shared memory; "
                             f"region {region.name!r} has {region.byte_size}")
        for name, array in arrays.items():
            region.write(layout.inputs[name][0], array)
        described = self._infer_in_region(model, version, arrays, region, layout)
        results = {}
        for name, (datatype, shape) in described.items():
            offset, room = layout.outputs[name]
            size = raw_size(datatype, shape)
            if size > room:
                raise ValueError(f"output {name!r} is {size} bytes, more than the {room} laid out for it")
            results[name] = region.read(offset, datatype, shape, size)
        return results

    def infer_shared_memory(self, model: str, inputs: Inputs, *, version: int | None = None,
                            outputs: Sequence[str] | None = None,
                            output_shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
        """One request through shared memory from start to end: creates a region sized for
        it, registers it, runs, copies the outputs out, then unregisters and unlinks the
        region whatever happens."""
        arrays = self._arrays(model, version, inputs)
        specs = self._output_specs(model, version, arrays, outputs, output_shapes)
        size = Layout(arrays, specs).byte_size
        with SharedMemoryRegion(size) as region, self.register_region(region):
            return self.infer(model, arrays, version=version, outputs=list(specs), region=region,
                              output_shapes={name: shape for name, (_, shape, _) in specs.items()})

    @contextlib.contextmanager
    def register_region(self, region: SharedMemoryRegion) -> Iterator[SharedMemoryRegion]:
        """Registers `region` under its own name for the `with` block, then unregisters it."""
        self._register(region)
        try:
            yield region
        finally:
            self.unregister_region(region.name)

    def _output_specs(self, model, version, arrays, outputs, output_shapes):
        """{output: (datatype, shape, byte size)} for the outputs a request will produce."""
        metadata = self.model_metadata(model, version)
        names = list(outputs) if outputs else [o.name for o in metadata.outputs]
        batch = next(iter(arrays.values())).shape[:1]
        given = dict(output_shapes or {})
        specs = {}
        for name in names:
            spec = metadata.output(name)
            if spec.datatype == "BYTES":
                raise ValueError(f"output {name!r} is BYTES, whose size is unknown in advance; "
                                 "shared memory needs fixed-size outputs (ask for others with outputs=[...])")
            if name in given:
                shape = tuple(int(d) for d in given[name])
            else:
                shape = tuple(spec.shape)
                if shape and shape[0] == -1 and batch:
                    shape = (batch[0], *shape[1:])
                if any(d < 0 for d in shape):
                    raise ValueError(f"output {name!r} has dynamic shape {spec.shape}; give it in output_shapes")
            specs[name] = (spec.datatype, shape, raw_size(spec.datatype, shape))
        return specs
