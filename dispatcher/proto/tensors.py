"""The one codec between numpy arrays and ``costscale.v1.Tensor`` messages (dispatcher and worker
share it), and the atomic file write both use for uploaded model bytes. No onnx imports."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from dispatcher.proto import costscale_pb2 as pb


def tensor_to_array(t: pb.Tensor) -> np.ndarray:
    """Decode a Tensor message; ValueError on a bad dtype or a size that does not match the shape."""
    try:
        dtype = np.dtype(t.dtype)
    except TypeError:
        raise ValueError(f"tensor {t.name!r}: unknown dtype {t.dtype!r}") from None
    if dtype.hasobject:
        raise ValueError(f"tensor {t.name!r}: dtype {t.dtype!r} is not a plain numeric type")
    shape = tuple(int(d) for d in t.shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"tensor {t.name!r}: negative dimension in {shape}")
    expect = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(t.data) != expect:
        raise ValueError(f"tensor {t.name!r}: {len(t.data)} bytes for shape {list(shape)} of {dtype.name} (need {expect})")
    return np.frombuffer(t.data, dtype=dtype).reshape(shape)


def array_to_tensor(name: str, a: np.ndarray) -> pb.Tensor:
    a = np.ascontiguousarray(a)
    return pb.Tensor(name=name, shape=list(a.shape), dtype=a.dtype.name, data=a.tobytes())


def replace_atomic(path: Path, write: Callable[[Path], None], suffix: str = ".tmp") -> None:
    """Create ``path`` (parents too) by ``write``-ing a temporary file of its own beside it and
    renaming it over ``path``: a concurrent reader never sees half a file, and concurrent writers
    (two workers caching the same variant) never share, or rename away, each other's file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`replace_atomic`)."""
    replace_atomic(path, lambda tmp: tmp.write_bytes(data))
