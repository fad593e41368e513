"""The Open Inference Protocol servicer (KServe v2 / Triton ``inference.GRPCInferenceService``),
served by the dispatcher beside its own API on the same port, so stock clients (tritonclient,
KServe's, grpcurl) query costscale unchanged.

A ``model_name`` is a model or an application (INFaaS §3: model-less, getVariant picks the
variant); ``model_version`` is empty, ``1``, or the name of one of its variants. ModelInfer
becomes one costscale query through the dispatcher's ``submit`` -- the same admission, routing and
typed errors as ``Submit`` -- and its reply parameters say which variant and instance type served
it and its queue and service time (:mod:`dispatcher.api.oip_codec`). Like the other servicers it only
parses, calls and renders: it takes ``submit``, placement (the names it resolves, what each worker
holds), the worker registry (readiness) and the :class:`dispatcher.runtime.Runtime` (stopping).
"""
from __future__ import annotations

import asyncio
import logging
from importlib.metadata import PackageNotFoundError, version as dist_version
from typing import Awaitable, Callable, Union

import grpc
import onnx
from onnx import helper

from dispatcher.api.oip_codec import DATATYPE_OF, infer_response, submit_request
from dispatcher.workers.placement import VariantPlacement
from dispatcher.proto import costscale_pb2 as pb, oip_pb2 as oip, oip_pb2_grpc as oipg
from dispatcher.runtime import Runtime
from dispatcher.workers.registry import WorkerRegistry
from variants.runtime.builtin_models import BUILTIN_PREFIX, graph_inputs, mlp_model

SC = grpc.StatusCode
SERVICE_NAME = "inference.GRPCInferenceService"
#: Triton's platform name of an ONNX model
PLATFORM = "onnxruntime_onnx"
DEFAULT_VERSION = "1"
log = logging.getLogger("costscale.oip")
TensorList = list[oip.ModelMetadataResponse.TensorMetadata]


def _server_version() -> str:
    try:
        return dist_version("costscale")
    except PackageNotFoundError:   # a source tree never installed
        return "unknown"


def _tensors(values) -> TensorList:  # type: ignore[no-untyped-def]
    out = []
    for vi in values:
        tt = vi.type.tensor_type
        try:
            datatype = DATATYPE_OF.get(helper.tensor_dtype_to_np_dtype(tt.elem_type).name, "BYTES")
        except (KeyError, TypeError, ValueError):
            datatype = "BYTES"
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim]
        out.append(oip.ModelMetadataResponse.TensorMetadata(name=vi.name, datatype=datatype, shape=shape))
    return out


def onnx_signature(spec: str) -> tuple[TensorList, TensorList]:
    """Inputs and outputs of the ONNX model ``spec`` names (``builtin:mlp`` or a file path)."""
    if spec.startswith(BUILTIN_PREFIX):
        if spec != BUILTIN_PREFIX + "mlp":
            raise ValueError(f"unknown built-in model {spec!r}")
        model = mlp_model()
    else:
        model = onnx.load(spec, load_external_data=False)
    return _tensors(graph_inputs(model)), _tensors(model.graph.output)


Submit = Callable[[pb.SubmitRequest], Awaitable[Union[pb.SubmitReply, tuple[grpc.StatusCode, str]]]]


class OipServicer(oipg.GRPCInferenceServiceServicer):
    def __init__(self, submit: Submit, placement: VariantPlacement, registry: WorkerRegistry, rt: Runtime) -> None:
        self.submit = submit
        self.placement = placement
        self.registry = registry
        self.rt = rt
        self._signatures: dict[str, tuple[TensorList, TensorList]] = {}

    # -- names -------------------------------------------------------------------------------------
    def _resolve(self, name: str) -> tuple[str, str] | None:
        """(model, "") or ("", application) for a ``model_name``; None when unknown."""
        p = self.placement
        if name in p.models:
            return name, ""
        if name in p.apps or name in p.app_models:
            return "", name
        return None

    def _models_of(self, model: str, application: str) -> set[str]:
        p = self.placement
        if model:
            return {model}
        default = p.apps.get(application)
        return set(p.app_models.get(application, [])) | ({default.name} if default is not None else set())

    def _variant_of(self, version: str, models: set[str]) -> str | None:
        """The variant a ``model_version`` names ("" for none); None when it names none of ``models``'."""
        if version in ("", DEFAULT_VERSION):
            return ""
        meta = self.placement.variant_meta.get(version)
        return version if meta is not None and meta.model in models else None

    def _serving(self, models: set[str] | None = None) -> bool:
        """A live worker that takes queries (of a variant of one of ``models``, when given)."""
        if self.rt.stopping:
            return False
        p = self.placement
        for w in self.registry.workers.values():
            if w.draining or w.removed:
                continue
            if models is None or any(p.variant_model(v) in models for v in p.loaded_on(w)):
                return True
        return False

    # -- health and metadata -----------------------------------------------------------------------
    async def ServerLive(self, request: oip.ServerLiveRequest, context: grpc.aio.ServicerContext) -> oip.ServerLiveResponse:
        return oip.ServerLiveResponse(live=True)

    async def ServerReady(self, request: oip.ServerReadyRequest, context: grpc.aio.ServicerContext) -> oip.ServerReadyResponse:
        return oip.ServerReadyResponse(ready=self._serving())

    async def ModelReady(self, request: oip.ModelReadyRequest, context: grpc.aio.ServicerContext) -> oip.ModelReadyResponse:
        found = self._resolve(request.name)
        if found is None:
            return oip.ModelReadyResponse(ready=False)
        models = self._models_of(*found)
        variant = self._variant_of(request.version, models)
        if variant is None:
            return oip.ModelReadyResponse(ready=False)
        if variant:
            ready = not self.rt.stopping and any(variant in self.placement.loaded_on(w)
                                                 for w in self.registry.workers.values()
                                                 if not w.draining and not w.removed)
            return oip.ModelReadyResponse(ready=ready)
        return oip.ModelReadyResponse(ready=self._serving(models))

    async def ServerMetadata(self, request: oip.ServerMetadataRequest, context: grpc.aio.ServicerContext) -> oip.ServerMetadataResponse:
        return oip.ServerMetadataResponse(name="costscale", version=_server_version(), extensions=["parameters"])

    async def ModelMetadata(self, request: oip.ModelMetadataRequest, context: grpc.aio.ServicerContext) -> oip.ModelMetadataResponse:
        found = self._resolve(request.name)
        if found is None:
            await context.abort(SC.NOT_FOUND, f"unknown model {request.name!r}")
        model, application = found  # type: ignore[misc]
        p = self.placement
        spec = p.models[model] if model else p.apps.get(application)
        if spec is None:   # an application whose models are not loaded yet
            await context.abort(SC.UNAVAILABLE, f"application {application!r} has no model yet")
        models = self._models_of(model, application)
        if self._variant_of(request.version, models) is None:
            await context.abort(SC.NOT_FOUND, f"model {request.name!r} has no version {request.version!r}")
        variants = sorted(n for n, m in p.variant_meta.items() if m.model in models and n not in models)
        inputs, outputs = await self._signature(spec.onnx)
        return oip.ModelMetadataResponse(name=request.name, versions=[DEFAULT_VERSION, *variants], platform=PLATFORM,
                                         inputs=inputs, outputs=outputs)

    async def _signature(self, spec: str) -> tuple[TensorList, TensorList]:
        got = self._signatures.get(spec)
        if got is None:
            try:
                got = await asyncio.to_thread(onnx_signature, spec)
            except Exception as exc:  # noqa: BLE001 - an unreadable file: metadata without tensors
                log.warning("model metadata: cannot read %s: %s", spec, str(exc).splitlines()[0] if str(exc) else exc)
                return [], []
            self._signatures[spec] = got
        return got

    # -- inference ---------------------------------------------------------------------------------
    async def ModelInfer(self, request: oip.ModelInferRequest, context: grpc.aio.ServicerContext) -> oip.ModelInferResponse:
        found = self._resolve(request.model_name)
        if found is None:
            known = ", ".join(sorted(set(self.placement.models) | set(self.placement.apps)))
            await context.abort(SC.NOT_FOUND, f"unknown model {request.model_name!r} (known: {known})")
        model, application = found  # type: ignore[misc]
        variant = self._variant_of(request.model_version, self._models_of(model, application))
        if variant is None:
            await context.abort(SC.NOT_FOUND, f"model {request.model_name!r} has no version {request.model_version!r}")
        sub = submit_request(request, model=model, application=application, variant=variant or "")
        if isinstance(sub, tuple):
            await context.abort(*sub)
        spec = self.placement.models.get(model) if model else self.placement.apps.get(application)
        if request.outputs and spec is not None:   # unknown outputs refused before the query runs
            known = {t.name for t in (await self._signature(spec.onnx))[1]}
            unknown = [o.name for o in request.outputs if o.name not in known]
            if known and unknown:
                await context.abort(SC.INVALID_ARGUMENT, f"unknown output(s) {', '.join(map(repr, unknown))} "
                                                         f"(the model has {', '.join(map(repr, sorted(known)))})")
        out = await self.submit(sub)  # type: ignore[arg-type]
        if isinstance(out, tuple):
            await context.abort(*out)
        resp = infer_response(request, out)  # type: ignore[arg-type]
        if isinstance(resp, tuple):
            await context.abort(*resp)
        return resp  # type: ignore[return-value]
