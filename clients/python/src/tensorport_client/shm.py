"""POSIX shared-memory regions (`/dev/shm/NAME`, registered with the server under key `/NAME`)
that a client creates, fills with inputs, and reads outputs from.

A region is a context manager: leaving the `with` block unmaps and unlinks it, so nothing is
left in /dev/shm even when the block raises. Registration with a server is a second context
manager, `client.register_region(region)`, which unregisters on exit.
"""

from __future__ import annotations

import uuid
from multiprocessing import shared_memory

import numpy as np

from ._dtypes import from_raw, kserve_datatype, to_raw

# Offsets of tensors laid out by `Layout` are multiples of this, so every typed view of the
# region is aligned for its element type (and for the server's runtime).
ALIGNMENT = 64


def _align(offset: int) -> int:
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class SharedMemoryRegion:
    """A shared-memory object this process created and owns."""

    def __init__(self, byte_size: int, name: str | None = None):
        if byte_size <= 0:
            raise ValueError(f"a region needs a positive size, got {byte_size}")
        self.name = name or f"tensorport_{uuid.uuid4().hex[:16]}"
        self.byte_size = byte_size
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            name=self.name, create=True, size=byte_size)

    @property
    def key(self) -> str:
        """The key the server opens: `/NAME` for `/dev/shm/NAME`."""
        return "/" + self.name

    @property
    def closed(self) -> bool:
        return self._shm is None

    def _buffer(self) -> memoryview:
        if self._shm is None:
            raise ValueError(f"shared-memory region {self.name!r} is closed")
        return self._shm.buf

    def _window(self, offset: int, size: int) -> memoryview:
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise ValueError(f"{size} bytes at offset {offset} do not fit region {self.name!r} of {self.byte_size} bytes")
        return self._buffer()[offset:offset + size]

    def write(self, offset: int, array) -> int:
        """Copies `array`'s raw bytes to `offset`; returns how many bytes were written."""
        raw = to_raw(np.asarray(array))
        self._window(offset, len(raw))[:] = raw
        return len(raw)

    def read(self, offset: int, datatype: str, shape, byte_size: int | None = None) -> np.ndarray:
        """A copy of the tensor at `offset`, safe to keep after the region is closed.
        `byte_size` is needed for BYTES tensors, whose size the shape does not give."""
        if byte_size is None:
            from ._dtypes import raw_size

            byte_size = raw_size(datatype, shape)
        return from_raw(self._window(offset, byte_size), datatype, shape)

    def view(self, offset: int, dtype, shape) -> np.ndarray:
        """An array over the region's memory itself (no copy). Drop it before closing the
        region: the mapping cannot be released while a view exists."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._window(offset, count * dtype.itemsize), dtype=dtype).reshape(shape)

    def close(self) -> None:
        """Unlinks the object and unmaps it. Safe to call twice."""
        shm, self._shm = self._shm, None
        if shm is None:
            return
        # Unlink first: the name disappears from /dev/shm even if a view still pins the mapping.
        shm.unlink()
        try:
            shm.close()
        except BufferError as err:
            raise BufferError(
                f"region {self.name!r} was unlinked, but arrays from view() still use its memory; "
                "drop them before closing") from err

    def __enter__(self) -> SharedMemoryRegion:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.byte_size} bytes"
        return f"SharedMemoryRegion({self.name!r}, {state})"


class Layout:
    """Where each input and output of one request lives in a region: tensors one after the
    other, each at an ALIGNMENT boundary."""

    def __init__(self, inputs: dict[str, np.ndarray], outputs: dict[str, tuple[str, tuple[int, ...], int]]):
        self.inputs: dict[str, tuple[int, int]] = {}
        self.outputs: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, array in inputs.items():
            size = len(to_raw(array)) if kserve_datatype(array) == "BYTES" else array.nbytes
            self.inputs[name] = (offset, size)
            offset = _align(offset + size)
        for name, (_datatype, _shape, size) in outputs.items():
            self.outputs[name] = (offset, size)
            offset = _align(offset + size)
        self.byte_size = max(offset, ALIGNMENT)
