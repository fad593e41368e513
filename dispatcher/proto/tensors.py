"""The one codec between numpy arrays and ``costscale.v1.Tensor`` messages (dispatcher and worker
share it). No onnx imports."""
from __future__ import annotations

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
