"""Variant metadata and placement: which models and variants the dispatcher knows, where each
variant is loaded, and the Load/Unload calls that change it (INFaaS §3-4: the model-less API's
registry, ``register_model`` and what routing knows of the variants).

What routing knows comes from the variant registry (:meth:`VariantPlacement.refresh_variants`):
each variant's model, hardware, accuracy, batch size, load time and its speed factor against its
model's base variant (from local profiles, ignoring profiling noise). A worker's loaded variants
are its Health reply's (authoritative) or, before the first one, the config's models; a load or an
unload updates them at once. Loads are started by getVariant (``ensure_loaded``), the model loop
and unpark; a parked worker is loaded only by unpark.

:class:`VariantPlacement` is a part of :class:`dispatcher.server.Dispatcher` (``d.placement``; the
Dispatcher forwards its public methods and state under the names the daemon and the tests use).
Owns: ``models``, ``apps``, ``cfg_models``, ``registry``, ``models_dir``, ``variant_meta``,
``variant_path``, ``app_models``, ``grid_cache``, ``routers``, ``variant_states``, ``loading``, ``load_ops``,
``unload_ops``. Takes: the worker registry (its workers, read only), the latency model, the catalog,
the :class:`dispatcher.runtime.Runtime` (clock, tasks), the round trigger (a variant loaded or
unloaded changes where queries may go) and the object store (RegisterModel's files).
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import grpc
import numpy as np

from config.catalog import InstanceType
from config.files import write_atomic
from config.schema import ModelSpec
from dispatcher import modelless as ml
from dispatcher.object_store import ObjectError, ObjectStore, parse_s3_uri
from dispatcher.policy import LatencyPredictor
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.runtime import RoundTrigger, Runtime
from dispatcher.workers.registry import WorkerRegistry, WorkerState
from variants.runtime.executor import ANY_HARDWARE
from variants.naming import base_name
from variants.prepare import generate_and_profile, hardware_classes

if TYPE_CHECKING:
    from variants.generator import Variant
    from variants.registry import VariantRegistry

SC = grpc.StatusCode

#: base latencies below this (ms) are timer noise on a brief local profile: no speed factor from them
SPEED_MIN_BASE_MS = 0.1
#: a measured speed factor this close to 1 is within the brief profile's noise: taken as 1
SPEED_NOISE = 0.10


def _speed_factor(mine: list, base: list) -> float:
    """Relative speed of a variant against its model's base variant, from their local profiles
    (1 when either is unprofiled): the variant's latency on a type = the model's profile there × this.
    Only measurable differences count: base latencies under ``SPEED_MIN_BASE_MS`` or a factor within
    ``SPEED_NOISE`` of 1 give 1, so routing and the model loop do not act on profiling noise."""
    if not mine or not base:
        return 1.0
    a = {b.batch_size: b.mean_ms for b in mine[0].batches}
    c = {b.batch_size: b.mean_ms for b in base[0].batches if b.mean_ms >= SPEED_MIN_BASE_MS}
    common = sorted(set(a) & set(c))
    if not common:
        return 1.0
    f = float(np.clip(np.mean([a[k] / c[k] for k in common]), 0.25, 4.0))
    return 1.0 if abs(f - 1.0) <= SPEED_NOISE else f


class VariantPlacement:
    """The models and variants the dispatcher knows and where they are loaded (see the module
    docstring)."""

    def __init__(self, models: Sequence[ModelSpec], worker_registry: WorkerRegistry, predictor: LatencyPredictor,
                 catalog: Mapping[str, InstanceType], rt: Runtime, trigger: RoundTrigger, objects: ObjectStore,
                 registry: VariantRegistry | None = None, models_dir: str | Path | None = None) -> None:
        self.worker_registry = worker_registry
        self.predictor = predictor
        #: the allowed instance types (the Dispatcher updates it in place on a config reload)
        self.catalog = catalog
        self.rt = rt
        self.trigger = trigger
        self.objects = objects
        self.models: dict[str, ModelSpec] = {m.name: m for m in models}
        self.cfg_models = tuple(m.name for m in models)
        self.apps: dict[str, ModelSpec] = {}
        for m in models:
            if m.application and m.application not in self.apps:
                self.apps[m.application] = m
        # model-less API (INFaaS §3.1): the variant registry and what routing knows of it
        self.registry = registry
        self.models_dir = Path(models_dir) if models_dir else None
        self.variant_meta: dict[str, ml.VariantMeta] = {}
        self.variant_path: dict[str, str] = {}
        self.app_models: dict[str, list[str]] = {}
        self.grid_cache: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {}
        self.routers: dict[tuple[tuple[str, ...], frozenset[str]], ml.Router] = {}
        self.variant_states: dict[tuple[str, str], object] = {}   # (variant, worker) -> VariantState
        self.loading: dict[tuple[str, str], asyncio.Task] = {}
        self.load_ops = 0
        self.unload_ops = 0
        self.refresh_variants()

    # -- what routing knows ------------------------------------------------------------------------
    def refresh_variants(self) -> None:
        """Reload what routing knows from the registry (after a registration or a generation)."""
        self.grid_cache.clear()
        self.routers.clear()
        if self.registry is None:
            return
        metas: dict[str, ml.VariantMeta] = {}
        paths: dict[str, str] = {}
        apps: dict[str, list[str]] = {}
        for rm in self.registry.models():
            if rm.name not in self.models:
                self.models[rm.name] = ModelSpec(name=rm.name, onnx=rm.onnx_path, qos_ms=rm.qos_ms,
                                                 max_batch=rm.max_batch, profile=rm.profile,
                                                 application=rm.application)
            apps.setdefault(rm.application, []).append(rm.name)
            if rm.application not in self.apps:
                self.apps[rm.application] = self.models[rm.name]
        variants = self.registry.variants()
        profs = {v.name: self.registry.profiles_of(v.name) for v in variants}
        for v in variants:
            m = self.models.get(v.model)
            prof = profs[v.name]
            load_ms = min((p.load_ms for p in prof), default=0.0)
            if v.name == v.model:
                speed = 1.0
            else:
                speed = _speed_factor(prof, profs[v.model] if v.model in profs else self.registry.profiles_of(v.model))
            metas[v.name] = ml.VariantMeta(v.name, v.model, v.hardware, v.accuracy,
                                           v.tuned_batch or (m.max_batch if m else 1), load_ms, speed)
            paths[v.name] = str(v.path)
        self.variant_meta, self.variant_path, self.app_models = metas, paths, apps

    def variant_model(self, variant: str) -> str:
        meta = self.variant_meta.get(variant)
        return meta.model if meta is not None else variant

    def variant_accuracy(self, variant: str) -> float:
        """The registered accuracy of ``variant`` (a name routing expanded with ``@hardware`` too);
        0 when not known."""
        meta = self.variant_meta.get(variant) or self.variant_meta.get(base_name(variant))
        return meta.accuracy if meta is not None else 0.0

    def variant_ms(self, variant: str, instance_type: str, batch: float) -> float:
        """Predicted ms of ``variant`` on ``instance_type`` at ``batch``: its model's latency model there
        times the variant's speed factor (what routing, the model loop and accuracy scaling use)."""
        meta = self.variant_meta[variant]
        return meta.speed_factor * self.predictor.predict_ms(self.models[meta.model].profile_name, instance_type, batch)

    def runs_on(self, variant: str, hardware: str) -> bool:
        """Whether ``variant`` runs on a worker of ``hardware`` (its class, or any)."""
        return self.variant_meta[variant].hardware in (ANY_HARDWARE, hardware)

    def variants_for(self, application: str, model: str) -> list[str]:
        models = [model] if model else self.app_models.get(application, [])
        return sorted(n for n, v in self.variant_meta.items() if v.model in models)

    def _fastest_type(self, pkey: str, hardware: str) -> str | None:
        types = [t for t, it in self.catalog.items() if it.hardware == hardware]
        if not types:
            return None
        return min(types, key=lambda t: (self.predictor.predict_ms(pkey, t, 1.0), t))

    def speed_factor(self, variant: str) -> float:
        """Relative speed of a variant against its model's base variant (computed by
        :meth:`refresh_variants`; 1 for an unknown variant)."""
        meta = self.variant_meta.get(variant)
        return meta.speed_factor if meta is not None else 1.0

    def grid(self, variant: str, hardware: str) -> tuple[tuple[int, float], ...]:
        """(batch, ms) profile of ``variant`` on the fastest allowed type of ``hardware``."""
        key = (variant, hardware)
        got = self.grid_cache.get(key)
        if got is None:
            meta = self.variant_meta.get(variant)
            m = self.models.get(meta.model) if meta else None
            t = self._fastest_type(m.profile_name, hardware) if m else None
            if m is None or t is None:
                got = ()
            else:
                got = tuple((b, self.variant_ms(variant, t, float(b))) for b in ml.grid_batches(m.max_batch))
            self.grid_cache[key] = got
        return got

    #: (variants, hardware classes) sets whose getVariant router is kept (then forgotten all at once)
    MAX_ROUTERS = 256

    def router(self, names: Sequence[str], workers: Sequence[ml.RouteWorker]) -> ml.Router:
        """getVariant over the variants ``names`` expanded to the hardware classes of ``workers``
        (:func:`ml.route_hardware`), its per-variant metadata built once and kept until the registry
        changes (:meth:`refresh_variants` clears it with the grid it was built on): :func:`ml.route`
        without rebuilding it per query. A router whose variants' metadata is no longer the
        registry's (replaced since) is rebuilt."""
        metas = [self.variant_meta[n] for n in names]
        hardware = frozenset(ml.route_hardware(metas, workers))
        key = (tuple(names), hardware)
        got = self.routers.get(key)
        if got is None or any(a is not b for a, b in zip(got.variants, metas)):
            if len(self.routers) >= self.MAX_ROUTERS:
                self.routers.clear()
            got = self.routers[key] = ml.Router(metas, hardware, self.grid)
        return got

    def loaded_on(self, w: WorkerState) -> set[str]:
        return set(w.loaded) if w.loaded is not None else set(self.cfg_model_names())

    def cfg_model_names(self) -> list[str]:
        return list(self.cfg_models)

    # -- Load / Unload -----------------------------------------------------------------------------
    def _variant_request(self, variant: str) -> pb.VariantRequest:
        model = self.variant_model(variant)
        path = self.variant_path.get(variant, "")
        spec = self.models[model].onnx if variant == model and model in self.models else path
        speed = self.speed_factor(variant)
        if spec and not spec.startswith("builtin:") and Path(spec).is_file() and Path(spec).stat().st_size < 32 << 20:
            return pb.VariantRequest(model=model, variant=variant, onnx=Path(spec).read_bytes(), speed_factor=speed)
        return pb.VariantRequest(model=model, variant=variant, onnx_path=spec, speed_factor=speed)

    def ensure_loaded(self, instance_id: str, variant: str) -> asyncio.Task | None:
        """Start loading ``variant`` on a worker (once); queued queries of it wait for the load."""
        w = self.worker_registry.workers.get(instance_id)
        if w is None or variant in self.loaded_on(w):
            return None
        key = (variant, instance_id)
        task = self.loading.get(key)
        if task is None:
            task = self.rt.spawn(self.load_variant(instance_id, variant))
            self.loading[key] = task
            task.add_done_callback(lambda t: self.loading.pop(key, None))
        return task

    async def load_variant(self, instance_id: str, variant: str, allow_parked: bool = False) -> tuple[bool, str]:
        """Worker.LoadVariant; on success the dispatcher routes the variant's queries there. A
        parked worker is refused (only :meth:`dispatcher.workers.roles.WorkerRoles.unpark` loads onto it)."""
        w = self.worker_registry.workers.get(instance_id)
        if w is None:
            return False, f"unknown worker {instance_id}"
        if w.parked and not allow_parked:
            return False, f"worker {instance_id} is parked"
        w.ops_in_flight += 1
        try:
            req = await asyncio.to_thread(self._variant_request, variant)
            reply = await w.client.load_variant(req, timeout=60.0)
        except Exception as exc:  # noqa: BLE001 - a failed load leaves placement unchanged
            return False, f"LoadVariant {variant} on {instance_id}: {exc}"
        finally:
            w.ops_in_flight -= 1
            w.last_op_at = self.rt.clock()
        if not reply.ok:
            return False, reply.message
        w.loaded = self.loaded_on(w) | {variant}
        self.load_ops += 1
        self.trigger.kick()
        return True, reply.message

    async def unload_variant(self, instance_id: str, variant: str) -> tuple[bool, str]:
        """Stop routing ``variant`` to the worker first, then Worker.UnloadVariant (the worker
        finishes a running query of it before it unloads). Health replies that were asked before
        the unload finished do not bring the variant back."""
        w = self.worker_registry.workers.get(instance_id)
        if w is None:
            return False, f"unknown worker {instance_id}"
        w.loaded = self.loaded_on(w) - {variant}
        self.variant_states.pop((variant, instance_id), None)
        w.ops_in_flight += 1
        try:
            reply = await w.client.unload_variant(
                pb.VariantRequest(model=self.variant_model(variant), variant=variant), timeout=30.0)
        except Exception as exc:  # noqa: BLE001
            return False, f"UnloadVariant {variant} on {instance_id}: {exc}"
        finally:
            w.ops_in_flight -= 1
            w.last_op_at = self.rt.clock()
        self.unload_ops += 1
        self.trigger.kick()
        return bool(reply.ok), reply.message

    # -- ListVariants and RegisterModel (INFaaS §3.1) ----------------------------------------------
    def variant_info(self, name: str, rows: Mapping[str, Variant] | None = None) -> pb.VariantInfo:
        """What ListVariants says of ``name``; ``rows``: registry rows by name, fetched once by the
        caller (without it, one registry lookup)."""
        if rows is not None:
            v = rows.get(name)
        else:
            v = self.registry.variant(name) if self.registry is not None else None
        meta = self.variant_meta.get(name)
        state = "Inactive"
        instances = sorted(w.instance_id for w in self.worker_registry.workers.values() if name in self.loaded_on(w))
        if instances:
            states = {str(getattr(self.variant_states.get((name, i)), "value", "active")) for i in instances}
            state = "Overloaded" if "overloaded" in states else ("Interfered" if "interfered" in states else "Active")
        model = self.models.get(meta.model) if meta else None
        return pb.VariantInfo(
            name=name, model=meta.model if meta else "", application=(model.application or model.name) if model else "",
            precision=v.precision if v else "fp32", hardware=v.hardware if v else ANY_HARDWARE, provider=v.provider if v else "",
            tuned_batch=v.tuned_batch if v else 0, accuracy=v.accuracy if v else 1.0,
            accuracy_estimated=v.accuracy_estimated if v else True, state=state, instances=instances)

    def list_variants(self, model: str = "", application: str = "") -> list[pb.VariantInfo]:
        names = sorted(n for n, m in self.variant_meta.items()
                       if (not model or m.model == model)
                       and (not application or m.model in self.app_models.get(application, [])))
        rows = {v.name: v for v in self.registry.variants(model=model or None)} if self.registry is not None else {}
        return [self.variant_info(n, rows) for n in names]

    def _fetch(self, uri: str, what: str) -> bytes:
        """An S3 object a request names (ObjectError for a local path or a missing object)."""
        parse_s3_uri(uri, what)
        return self.objects.get(uri)

    async def register_model(self, r: pb.RegisterModelRequest) -> pb.RegisterModelReply | tuple[grpc.StatusCode, str]:
        """INFaaS §3.1 register_model: store the ONNX file, generate and profile its variants."""
        if self.registry is None or self.models_dir is None:
            return SC.UNIMPLEMENTED, "this dispatcher runs without a variant registry"
        from variants.runtime.builtin_models import ModelError, resolve_model
        from variants.registry import RegisteredModel

        name, app = r.name.strip(), (r.application.strip() or r.name.strip())
        try:
            ModelSpec(name=name or "?", qos_ms=r.qos_ms if r.qos_ms > 0 else 1.0)
        except Exception:
            return SC.INVALID_ARGUMENT, f"bad model name {r.name!r}: 1-63 letters, digits, '.', '_' or '-'"
        if name in self.cfg_model_names():
            return SC.ALREADY_EXISTS, f"model {name!r} comes from the config"
        if r.qos_ms < 0 or r.max_batch < 0:
            return SC.INVALID_ARGUMENT, "qos_ms and max_batch must be >= 0"
        if bool(r.onnx) == bool(r.onnx_uri):
            return SC.INVALID_ARGUMENT, "give exactly one of onnx (the file's bytes) and onnx_uri (s3://bucket/key)"
        if r.validation and r.validation_uri:
            return SC.INVALID_ARGUMENT, "give at most one of validation (bytes) and validation_uri (s3://bucket/key)"
        out_dir = self.models_dir / name
        try:   # the files come as bytes or from S3, never from a path on this host (issue #14)
            onnx = r.onnx or await asyncio.to_thread(self._fetch, r.onnx_uri, "onnx_uri")
            validation = r.validation or (await asyncio.to_thread(self._fetch, r.validation_uri, "validation_uri")
                                          if r.validation_uri else b"")
            src = out_dir / "source.onnx"
            await asyncio.to_thread(write_atomic, src, onnx)
            src = await asyncio.to_thread(resolve_model, str(src), self.models_dir)
            val = out_dir / "validation.npz" if validation else None
            if val is not None:
                await asyncio.to_thread(write_atomic, val, validation)
        except (ModelError, ObjectError) as exc:
            return SC.INVALID_ARGUMENT, str(exc)
        hws = hardware_classes(self.catalog) or ("cpu",)
        rm = RegisteredModel(name=name, application=app, onnx_path=str(src), qos_ms=float(r.qos_ms or 1000.0),
                             max_batch=int(r.max_batch or 64), profile=name)
        try:
            variants = await asyncio.to_thread(generate_and_profile, src, rm, out_dir, hws, val, self.registry)
        except ValueError as exc:
            return SC.INVALID_ARGUMENT, str(exc).splitlines()[0]
        except Exception as exc:  # noqa: BLE001 - a model we cannot convert is the caller's problem
            return SC.INVALID_ARGUMENT, f"cannot generate variants of {name!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        self.models.pop(name, None)
        self.refresh_variants()
        rows = {v.name: v for v in variants}
        return pb.RegisterModelReply(name=name, variants=[self.variant_info(v.name, rows) for v in variants])
