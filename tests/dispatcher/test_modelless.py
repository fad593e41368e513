"""Variant registry and model-less routing (INFaaS §3.1, §4.1): pure routing cases with exact
expected picks, the registry's persistence, and the live gRPC API (RegisterModel, ListVariants,
Submit by application) against a real in-process worker."""
from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from config.schema import Config
from dispatcher import modelless as ml
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from config.profiles import load_profiles_csv
from variants.registry import RegisteredModel, VariantRegistry, base_variant
from variants.infaas.selection import Request
from variants.infaas.state_machine import VariantState
from worker.options import WorkerOptions
from worker.server import WorkerServer

GRID = {("fast", "gpu"): ((1, 5.0), (8, 10.0)), ("slow", "cpu"): ((1, 50.0), (8, 200.0)),
        ("base", "cpu"): ((1, 40.0), (8, 100.0)), ("base", "gpu"): ((1, 8.0), (8, 20.0))}


def grid(v: str, hw: str):
    return GRID.get((v, hw), ())


METAS = [ml.VariantMeta("fast", "m", "gpu", 0.70, 8, 500.0), ml.VariantMeta("slow", "m", "cpu", 0.90, 8, 100.0)]


def W(name: str, hw: str, util: float, loaded=()):  # noqa: N802
    return ml.RouteWorker(name, hw, "t", util, frozenset(loaded))


def test_active_instance_on_least_loaded_worker() -> None:
    ws = [W("a", "gpu", 0.5, {"fast"}), W("b", "gpu", 0.1, {"fast"}), W("c", "cpu", 0.0, {"slow"})]
    r = ml.route(Request(latency_slo_ms=50, batch=4), METAS, ws, grid)
    assert r == ml.Route("fast", "b", False, 10.0)


def test_inactive_variant_lowest_load_plus_latency() -> None:
    ws = [W("g", "gpu", 0.3), W("c", "cpu", 0.0)]
    # both meet 500 ms: fast costs 500 + 10, slow 100 + 200 -> slow on the cpu worker
    r = ml.route(Request(latency_slo_ms=500, batch=8), METAS, ws, grid)
    assert (r.variant, r.worker, r.needs_load, r.expected_ms) == ("slow", "c", True, 300.0)


def test_accuracy_filter_and_typed_errors() -> None:
    ws = [W("g", "gpu", 0.0, {"fast"}), W("c", "cpu", 0.0)]
    assert ml.route(Request(min_accuracy=0.8, batch=1), METAS, ws, grid).variant == "slow"
    with pytest.raises(ml.RouteError) as ei:
        ml.route(Request(latency_slo_ms=20, min_accuracy=0.8, batch=8), METAS, ws, grid)
    assert ei.value.code == "INVALID_ARGUMENT" and ei.value.closest in ("fast", "slow")
    assert "closest" in str(ei.value)
    with pytest.raises(ml.RouteError) as ei2:
        ml.route(Request(), [], ws, grid)
    assert ei2.value.code == "NOT_FOUND" and ei2.value.closest is None


def test_any_hardware_base_variant_expands_per_class() -> None:
    metas = [ml.VariantMeta("base", "m", "any", 1.0, 8)]
    ws = [W("c", "cpu", 0.0, {"base"}), W("g", "gpu", 0.9, {"base"})]
    # active on both; least-loaded first even though the gpu is faster (INFaaS §4.1 case I)
    r = ml.route(Request(batch=8), metas, ws, grid)
    assert (r.variant, r.worker, r.expected_ms) == ("base", "c", 100.0)
    r2 = ml.route(Request(latency_slo_ms=50, batch=8), metas, ws, grid)
    assert (r2.variant, r2.worker, r2.expected_ms) == ("base", "g", 20.0)


def test_overloaded_everywhere_queues_instead_of_refusing() -> None:
    ws = [W("g", "gpu", 0.9, {"fast"})]
    st = {("fast", "g"): VariantState.OVERLOADED}
    r = ml.route(Request(latency_slo_ms=50, batch=1), METAS[:1], ws, grid, st)
    assert (r.variant, r.worker, r.needs_load) == ("fast", "g", False)


def test_no_worker_yet_queues_for_best_variant() -> None:
    r = ml.route(Request(latency_slo_ms=50, batch=1), METAS, [], grid)
    assert r.variant == "fast" and r.worker is None


def test_busy_fraction_exact() -> None:
    iv = [(0.0, 1.0), (1.5, 2.0), (-5.0, -4.0)]
    assert ml.busy_fraction(iv, now=2.0, horizon_s=2.0, workers=1) == pytest.approx(0.75)
    assert ml.busy_fraction(iv, now=2.0, horizon_s=2.0, workers=3) == pytest.approx(0.25)
    assert ml.busy_fraction(iv, now=2.0, horizon_s=2.0, workers=0) == 0.0


def test_registry_persists(tmp_path: Path) -> None:
    path = tmp_path / "s.db.variants.db"
    reg = VariantRegistry(path)
    rm = RegisteredModel("m1", "app", "/x.onnx", 100.0, 32, "m1")
    v = base_variant(rm, 0.9)
    reg.register_model(rm, [v])
    with pytest.raises(ValueError):
        reg.add_variants([base_variant(RegisteredModel("zz", "a", "/y", 1, 1, "zz"))])
    reg.close()
    reg2 = VariantRegistry(path)
    assert reg2.models() == [rm]
    got = reg2.variants(application="app")
    assert [x.name for x in got] == ["m1"] and got[0].accuracy == 0.9 and got[0].hardware == "any"
    assert reg2.variants(application="other") == []
    reg2.close()


# ---- live gRPC --------------------------------------------------------------------------------------

def _cfg(tmp: Path) -> Config:
    return Config.model_validate({
        "cluster": "t", "budget_per_hour": 5,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000, "application": "rec"}],
        "instance_types": [{"type": "c5n.2xlarge"}, {"type": "g4dn.xlarge"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0"}, "state_path": str(tmp / "state.db"),
    })


def test_live_register_list_and_submit_by_application(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    ws = WorkerServer(WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", models={"rm2": "builtin:mlp"},
                                    cache_dir=tmp_path / "cache", threads=1))
    wport = ws.start()
    try:
        asyncio.run(asyncio.wait_for(_live(cfg, tmp_path, wport), 60))
    finally:
        ws.stop()


async def _live(cfg: Config, tmp: Path, wport: int) -> None:
    from variants.runtime.builtin_models import build_mlp

    reg = VariantRegistry(tmp / "state.db.variants.db")
    reg.register_model(RegisteredModel("rm2", "rec", "builtin:mlp", 350, 1000, "rm2", True))
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg, models_dir=tmp / "models")
    port = await d.start("127.0.0.1:0")
    d.add_worker_direct("i-1", "c5n.2xlarge", f"127.0.0.1:{wport}")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.InferenceStub(ch)
            r = await stub.Submit(pb.SubmitRequest(application="rec", batch_size=4), timeout=20)
            assert (r.variant, r.instance_id, r.model) == ("rm2", "i-1", "rm2")
            # the reply says how accurate the variant that served it is (issue #13)
            assert r.accuracy > 0 and r.accuracy == pytest.approx(d._variant_meta["rm2"].accuracy)
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await stub.Submit(pb.SubmitRequest(application="nope", batch_size=1), timeout=5)
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await stub.Submit(pb.SubmitRequest(application="rec", batch_size=1, latency_slo_ms=0.001), timeout=5)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "closest: rm2" in ei.value.details()
            # register a new model: variants generated, profiled, listed
            onnx = build_mlp(tmp / "other.onnx", seed=3)
            rep = await stub.RegisterModel(pb.RegisterModelRequest(name="other", application="vision",
                                                                   onnx=onnx.read_bytes(), qos_ms=500), timeout=60)
            names = {v.name for v in rep.variants}
            assert {"other", "other-fp32-cpu", "other-int8-cpu", "other-fp16-gpu"} <= names
            lst = await stub.ListVariants(pb.ListVariantsRequest(application="vision"))
            assert {v.name for v in lst.variants} == names
            assert all(v.state == "Inactive" for v in lst.variants)
            # by application: an Inactive cpu variant is loaded on the cpu worker, then served
            r2 = await stub.Submit(pb.SubmitRequest(application="vision", batch_size=2), timeout=30)
            assert r2.model == "other" and r2.instance_id == "i-1"
            assert r2.variant in d.loaded_on(d.workers["i-1"]) and d.load_ops == 1
            lst2 = await stub.ListVariants(pb.ListVariantsRequest(model="other"))
            assert [v.state for v in lst2.variants if v.name == r2.variant] == ["Active"]
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await stub.RegisterModel(pb.RegisterModelRequest(name="bad name!", onnx=b"x"), timeout=5)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await d.stop(1.0)
        reg.close()


def _vision(tmp_path: Path, cfg: Config, variant: str = "other-fp32-cpu", accuracy: float = 1.0
            ) -> tuple[Dispatcher, VariantRegistry]:
    """A dispatcher whose registry holds application "vision": model "other" (its base variant) and
    one more variant of it, ``variant`` (a CPU variant of ``accuracy``)."""
    from variants.generator import Variant

    reg = VariantRegistry(":memory:")
    rm = RegisteredModel("other", "vision", "builtin:mlp", 500, 64, "rm2")
    precision = variant.split("-")[1]
    reg.register_model(rm, [base_variant(rm), Variant(variant, "other", "vision", precision, "cpu", "", 0,
                                                      tmp_path / "x.onnx", accuracy, True)])
    return Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv(None)), registry=reg,
                      models_dir=tmp_path / "m"), reg


def _hosting(d: Dispatcher, loaded: dict[str, set[str]]) -> None:
    """c5n.2xlarge workers added directly (inside a running loop: their channels need one), each
    with the variants ``loaded`` gives it."""
    for iid, vs in loaded.items():
        d.add_worker_direct(iid, "c5n.2xlarge", "127.0.0.1:9")
        d.workers[iid].loaded = set(vs)


def test_load_starts_only_after_admission(tmp_path: Path) -> None:
    """getVariant may pick an Inactive variant; its LoadVariant starts only once the query is
    admitted (not for a query refused because the queue is full)."""
    raw = _cfg(tmp_path).model_dump(mode="json", exclude_unset=True)
    raw["dispatcher"]["queue_limit"] = 1
    d, reg = _vision(tmp_path, Config.model_validate(raw))
    loads: list[tuple[str, str]] = []
    d.ensure_loaded = lambda w, v: loads.append((w, v))  # type: ignore[method-assign]

    async def run() -> None:
        _hosting(d, {"i-1": {"rm2"}})              # neither variant of "other" is loaded
        d.queries.queue["q-waiting"] = SimpleNamespace(variant="")  # type: ignore[assignment]   # the queue is full
        out = await d.submit(pb.SubmitRequest(application="vision", batch_size=2))
        assert isinstance(out, tuple) and out[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert loads == []
        d.queries.queue.clear()
        task = asyncio.ensure_future(d.submit(pb.SubmitRequest(application="vision", batch_size=2)))
        await asyncio.sleep(0)
        assert len(loads) == 1 and loads[0][0] == "i-1" and loads[0][1].startswith("other")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await d.workers["i-1"].client.close()

    asyncio.run(run())
    reg.close()


def test_speed_factor_ignores_profiling_noise() -> None:
    """A variant's speed factor comes from brief local profiles: microsecond timings, or a factor
    within 10 % of 1, are noise and give 1; a clear difference is kept (clipped to 0.25..4)."""
    from types import SimpleNamespace as NS

    from dispatcher.workers.placement import _speed_factor

    def prof(*pairs: tuple[int, float]) -> list:
        return [NS(batches=[NS(batch_size=b, mean_ms=ms) for b, ms in pairs])]

    base = prof((1, 2.0), (8, 4.0))
    assert _speed_factor(prof((1, 1.0), (8, 2.0)), base) == 0.5
    assert _speed_factor(prof((1, 2.1), (8, 4.2)), base) == 1.0           # +5 %: noise
    assert _speed_factor(prof((1, 40.0), (8, 80.0)), base) == 4.0         # clipped
    tiny = prof((1, 0.014), (8, 0.009))                                    # timer noise
    assert _speed_factor(prof((1, 0.009), (8, 0.008)), tiny) == 1.0
    assert _speed_factor([], base) == 1.0


def test_getvariant_sees_the_queries_waiting_for_a_workers_variant(tmp_path: Path) -> None:
    """Admission's view of the workers (``Admission.route_workers``): a worker's load includes its share of the
    queries already waiting for the variant it hosts, so an idle-looking worker with a queue behind
    it is not the least loaded (issue #25: without it INFaaS's fast variants' queues grew unseen)."""
    d, reg = _vision(tmp_path, _cfg(tmp_path))

    async def run() -> None:
        _hosting(d, {"i-1": {"other"}, "i-2": {"other-fp32-cpu"}})
        for k in range(3):                                   # three queries wait for "other"
            d.queries.queue[f"q{k}"] = SimpleNamespace(variant="other")  # type: ignore[assignment]
        loads = {w.worker: w.utilization for w in d.admission.route_workers()}
        one = d.placement.variant_ms("other", "c5n.2xlarge", 1.0)
        assert loads == {"i-1": pytest.approx(3 * one / 1000.0 / d.utilization_horizon_s), "i-2": 0.0}
        choice = ml.route(Request(None, math.inf, 0.0, 1), [d._variant_meta[n] for n in d.placement.variants_for("vision", "")],
                          d.admission.route_workers(), d.placement.grid, d.variant_states)
        assert choice.worker == "i-2"            # the least loaded: nothing waits for its variant
        d.queries.queue.clear()
        for w in d.workers.values():
            await w.client.close()
    asyncio.run(run())
    reg.close()


def test_an_applications_floor_holds_for_queries_that_ask_for_less(tmp_path: Path) -> None:
    """``models[].min_accuracy`` of an application is the floor of its queries that name a lower one:
    the least-loaded worker hosts a 0.7-accuracy variant, the floor is 0.8, so the query goes to the
    busier worker's 1.0 variant (with no floor: to the 0.7 one)."""
    raw = _cfg(tmp_path).model_dump(mode="json", exclude_unset=True)
    raw["models"].append({"name": "other", "onnx": "builtin:mlp", "qos_ms": 500, "max_batch": 64,
                          "application": "vision", "min_accuracy": 0.8})
    for floor, want in ((0.8, "other"), (0.0, "other-int8-cpu")):
        raw["models"][-1]["min_accuracy"] = floor
        d, reg = _vision(tmp_path, Config.model_validate(raw), "other-int8-cpu", 0.7)

        async def run() -> str:
            _hosting(d, {"i-1": {"other-int8-cpu"}, "i-2": {"other"}})
            d.queries.queue["q0"] = SimpleNamespace(variant="other")  # type: ignore[assignment]   # i-2 has work waiting
            v = d.admission.validate(pb.SubmitRequest(application="vision", batch_size=1))
            d.queries.queue.clear()
            for w in d.workers.values():
                await w.client.close()
            return v[3]  # type: ignore[return-value]
        assert asyncio.run(run()) == want, floor
        reg.close()


def test_admission_keeps_one_router_per_variant_set_until_the_registry_changes(tmp_path: Path) -> None:
    """The live getVariant builds its per-variant metadata once (``VariantPlacement.router``), not per
    query: two queries of one application share one router, whose choice is :func:`ml.route`'s on
    the same view; a registration (``refresh_variants``) forgets it, and a variant whose metadata
    was replaced gets a new one."""
    d, reg = _vision(tmp_path, _cfg(tmp_path))

    async def run() -> None:
        _hosting(d, {"i-1": {"other"}, "i-2": {"other-fp32-cpu"}})
        d.queries.queue["q0"] = SimpleNamespace(variant="other")  # type: ignore[assignment]
        first = d.admission.validate(pb.SubmitRequest(application="vision", batch_size=1))
        assert len(d.placement.routers) == 1
        router = next(iter(d.placement.routers.values()))
        second = d.admission.validate(pb.SubmitRequest(application="vision", batch_size=4))
        assert next(iter(d.placement.routers.values())) is router and len(d.placement.routers) == 1
        names = d.placement.variants_for("vision", "")
        for got, batch in ((first, 1), (second, 4)):
            want = ml.route(Request(None, math.inf, 0.0, batch), [d._variant_meta[n] for n in names],
                            d.admission.route_workers(), d.placement.grid, d.variant_states)
            assert (got[3], got[4].worker) == (want.variant, want.worker) == ("other-fp32-cpu", "i-2")
        d.placement.refresh_variants()
        assert d.placement.routers == {}
        d.admission.validate(pb.SubmitRequest(application="vision", batch_size=1))
        rebuilt = next(iter(d.placement.routers.values()))
        assert rebuilt is not router
        old = d.placement.variant_meta["other-fp32-cpu"]
        d.placement.variant_meta["other-fp32-cpu"] = dataclasses.replace(old, accuracy=0.5)
        assert d.placement.router(names, d.admission.route_workers()) is not rebuilt
        d.queries.queue.clear()
        for w in d.workers.values():
            await w.client.close()
    asyncio.run(run())
    reg.close()
