"""Between the Open Inference Protocol's messages (``inference.ModelInferRequest`` and
``ModelInferResponse``, :mod:`dispatcher.proto.oip_pb2`) and costscale's own (``SubmitRequest``,
``SubmitReply``): datatypes, tensor contents, and the parameters costscale reads and writes.

Request parameters (all optional): ``latency_slo_ms`` and ``min_accuracy`` (numbers: int64,
double, uint64 or a decimal string, since tritonclient sends no floats), ``idempotency_key`` and
``variant`` (strings). Other parameters (Triton's ``timeout``, ``priority``, ...) are ignored.
Reply parameters: ``model`` (the model that served: for an application, the one getVariant
chose), ``variant``, ``instance_id``, ``instance_type``, ``provider``, ``queue_ms``,
``service_ms``, ``total_ms``, ``accuracy`` (the serving variant's; 0 when not known) and ``slo_met``.

Tensors are numeric (BOOL, INT8-64, UINT8-64, FP16, FP32, FP64), as raw little-endian bytes
(``raw_input_contents``, what tritonclient sends) or typed ``contents``; outputs go back as raw
bytes. BYTES and BF16 are refused with INVALID_ARGUMENT.
"""
from __future__ import annotations

import math
from typing import Callable
import grpc
import numpy as np

from dispatcher.proto import costscale_pb2 as pb, oip_pb2 as oip
from dispatcher.proto.tensors import array_to_tensor

SC = grpc.StatusCode
Error = tuple[grpc.StatusCode, str]

#: the protocol's datatype names and the numpy dtypes they are
DATATYPES: dict[str, np.dtype] = {name: np.dtype(t) for name, t in (
    ("BOOL", np.bool_), ("INT8", np.int8), ("INT16", np.int16), ("INT32", np.int32), ("INT64", np.int64),
    ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32), ("UINT64", np.uint64),
    ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64))}
DATATYPE_OF: dict[str, str] = {dt.name: name for name, dt in DATATYPES.items()}
#: the InferTensorContents field that carries each datatype (FP16 travels only as raw bytes)
CONTENTS_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
                  "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
                  "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
                  "FP32": "fp32_contents", "FP64": "fp64_contents"}


def _number(name: str, p: oip.InferParameter) -> float | Error:
    kind = p.WhichOneof("parameter_choice")
    value: object = getattr(p, kind) if kind else None
    if kind == "string_param":
        try:
            value = float(str(value).strip())
        except ValueError:
            return SC.INVALID_ARGUMENT, f"parameter {name}: expected a number, got {p.string_param!r}"
    elif kind not in ("int64_param", "double_param", "uint64_param"):
        return SC.INVALID_ARGUMENT, f"parameter {name}: expected a number, got {kind or 'nothing'}"
    x = float(value)  # type: ignore[arg-type]
    if not math.isfinite(x):
        return SC.INVALID_ARGUMENT, f"parameter {name}: expected a finite number, got {x}"
    return x


def _text(name: str, p: oip.InferParameter) -> str | Error:
    kind = p.WhichOneof("parameter_choice")
    if kind == "string_param":
        return p.string_param
    if kind in ("int64_param", "uint64_param"):
        return str(getattr(p, kind))
    return SC.INVALID_ARGUMENT, f"parameter {name}: expected a string, got {kind or 'nothing'}"


#: the request parameters a ModelInfer may carry, each with its reader (SubmitRequest field = name)
REQUEST_PARAMETERS: dict[str, Callable[[str, oip.InferParameter], float | str | Error]] = {
    "latency_slo_ms": _number, "min_accuracy": _number, "idempotency_key": _text, "variant": _text}


def _input_array(t: oip.ModelInferRequest.InferInputTensor, raw: bytes | None) -> np.ndarray | Error:
    dtype = DATATYPES.get(t.datatype)
    if dtype is None:
        return SC.INVALID_ARGUMENT, (f"input {t.name!r}: datatype {t.datatype!r} is not supported "
                                     f"(numeric tensors only: {', '.join(DATATYPES)})")
    shape = tuple(int(x) for x in t.shape)
    if any(x < 0 for x in shape):
        return SC.INVALID_ARGUMENT, f"input {t.name!r}: negative dimension in shape {list(shape)}"
    n = int(np.prod(shape, dtype=np.int64))
    if raw is not None:
        if len(raw) != n * dtype.itemsize:
            return SC.INVALID_ARGUMENT, (f"input {t.name!r}: {len(raw)} bytes for shape {list(shape)} of "
                                         f"{t.datatype} (need {n * dtype.itemsize})")
        return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(shape)
    field = CONTENTS_FIELD.get(t.datatype)
    values = getattr(t.contents, field) if field else ()
    if len(values) != n:
        how = f"{len(values)} values in contents.{field}" if field else "no raw_input_contents (FP16 travels as raw bytes)"
        return SC.INVALID_ARGUMENT, f"input {t.name!r}: {how} for shape {list(shape)} ({n} elements)"
    return np.asarray(values, dtype=dtype).reshape(shape)


def submit_request(r: oip.ModelInferRequest, *, model: str = "", application: str = "",
                   variant: str = "") -> pb.SubmitRequest | Error:
    """The costscale query for a ModelInfer request whose ``model_name`` the caller resolved to a
    model or an application (and ``model_version`` to a variant, or none)."""
    sub = pb.SubmitRequest(model=model, application=application, variant=variant)
    params = r.parameters
    for name, read in REQUEST_PARAMETERS.items():
        if name in params:
            value = read(name, params[name])
            if isinstance(value, tuple):
                return value
            setattr(sub, name, value)
    if not r.inputs:
        return SC.INVALID_ARGUMENT, "give at least one input tensor"
    if r.raw_input_contents and len(r.raw_input_contents) != len(r.inputs):
        return SC.INVALID_ARGUMENT, (f"{len(r.raw_input_contents)} raw_input_contents for {len(r.inputs)} inputs: "
                                     "give one per input, or none")
    for i, t in enumerate(r.inputs):
        a = _input_array(t, r.raw_input_contents[i] if r.raw_input_contents else None)
        if isinstance(a, tuple):
            return a
        if a.ndim == 0:
            return SC.INVALID_ARGUMENT, f"input {t.name!r}: give a shape with a batch dimension first"
        sub.inputs.append(array_to_tensor(t.name, a))
    return sub


def infer_response(r: oip.ModelInferRequest, reply: pb.SubmitReply) -> oip.ModelInferResponse | Error:
    """The ModelInfer response for costscale's reply: the outputs asked for (all when none is
    named) as raw bytes, and the reply parameters of the module docstring."""
    out = oip.ModelInferResponse(model_name=r.model_name, model_version=r.model_version, id=r.id)
    by_name = {t.name: t for t in reply.outputs}
    wanted = [o.name for o in r.outputs] or [t.name for t in reply.outputs]
    missing = [n for n in wanted if n not in by_name]
    if missing:
        return SC.INVALID_ARGUMENT, (f"unknown output(s) {', '.join(map(repr, missing))} "
                                     f"(the model has {', '.join(map(repr, by_name)) or 'none'})")
    for name in wanted:
        t = by_name[name]
        datatype = DATATYPE_OF.get(t.dtype)
        if datatype is None:
            return SC.INTERNAL, f"output {name!r}: dtype {t.dtype!r} has no protocol datatype"
        out.outputs.add(name=name, datatype=datatype, shape=list(t.shape))
        # costscale tensors carry native byte order: little-endian on every platform it runs on
        out.raw_output_contents.append(t.data)
    p = out.parameters
    for key in ("model", "variant", "instance_id", "instance_type", "provider"):
        p[key].string_param = getattr(reply, key)
    for key in ("queue_ms", "service_ms", "total_ms", "accuracy"):
        p[key].double_param = getattr(reply, key)
    p["slo_met"].bool_param = reply.slo_met
    return out

