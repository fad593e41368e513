"""INFaaS §4.1 getVariant: Active first (least-loaded worker), then Inactive (lowest load +
inference latency, least-utilized worker of its hardware), else NoVariant naming the closest."""
from __future__ import annotations

import pytest

from variants.infaas.selection import NoVariant, Request, VariantInfo, WorkerLoad, get_variant
from variants.infaas.state_machine import VariantState

A, I, O, F = VariantState.ACTIVE, VariantState.INACTIVE, VariantState.OVERLOADED, VariantState.INTERFERED

CPU = VariantInfo("r50-cpu", "resnet50", "cpu", latency_ms=200, accuracy=0.76, max_batch=8, load_latency_ms=1000)
INF = VariantInfo("r50-inf", "resnet50", "inferentia", latency_ms=20, accuracy=0.76, max_batch=16, load_latency_ms=3000)
GPU = VariantInfo("r50-gpu", "resnet50", "gpu", latency_ms=15, accuracy=0.76, max_batch=64, load_latency_ms=500,
                  batch_latency_ms=((1, 5.0), (8, 9.0), (64, 15.0)))
MOB = VariantInfo("mnet-cpu", "mobilenet", "cpu", latency_ms=30, accuracy=0.70, max_batch=8, load_latency_ms=200)
VARIANTS = [CPU, INF, GPU, MOB]
LOADS = {
    "c1": WorkerLoad("c1", "cpu", 0.7), "c2": WorkerLoad("c2", "cpu", 0.2),
    "g1": WorkerLoad("g1", "gpu", 0.5), "g2": WorkerLoad("g2", "gpu", 0.1),
    "i1": WorkerLoad("i1", "inferentia", 0.3),
}


def test_active_variant_on_least_loaded_worker() -> None:
    states = {("r50-cpu", "c1"): A, ("r50-cpu", "c2"): A, ("r50-gpu", "g1"): A}
    c = get_variant(Request("resnet50", 300), VARIANTS, states, LOADS)
    assert (c.variant, c.worker, c.needs_load) == ("r50-cpu", "c2", False)


def test_overloaded_and_interfered_are_skipped() -> None:
    states = {("r50-cpu", "c2"): O, ("r50-cpu", "c1"): F, ("r50-gpu", "g1"): A}
    c = get_variant(Request("resnet50", 300), VARIANTS, states, LOADS)
    assert (c.variant, c.worker, c.needs_load) == ("r50-gpu", "g1", False)


def test_active_must_meet_requirements() -> None:
    # the Active CPU variant misses 50 ms; nothing else Active -> Inactive path: lowest load +
    # inference latency: gpu 500 + 15 < inferentia 3000 + 20; least-utilized gpu worker g2
    states = {("r50-cpu", "c2"): A}
    c = get_variant(Request("resnet50", 50), VARIANTS, states, LOADS)
    assert (c.variant, c.worker, c.needs_load, c.expected_ms) == ("r50-gpu", "g2", True, 505.0)  # 500 + 5 ms at batch 1


def test_inactive_skips_workers_where_variant_is_loaded_but_busy() -> None:
    states = {("r50-gpu", "g2"): O}
    c = get_variant(Request("resnet50", 50), VARIANTS, states, LOADS)
    assert (c.variant, c.worker, c.needs_load) == ("r50-gpu", "g1", True)


def test_batch_uses_profile_grid_and_max_batch() -> None:
    # batch 4 rounds up to the 8 grid point (9 ms) on the GPU variant; cpu/inf max_batch too small for 32
    c = get_variant(Request("resnet50", 10, batch=4), VARIANTS, {("r50-gpu", "g1"): A}, LOADS)
    assert (c.variant, c.expected_ms) == ("r50-gpu", 9.0)
    c = get_variant(Request("resnet50", 300, batch=32), VARIANTS, {("r50-cpu", "c2"): A}, LOADS)
    assert (c.variant, c.needs_load) == ("r50-gpu", True)


def test_any_model_of_the_application_with_accuracy() -> None:
    states = {("mnet-cpu", "c2"): A}
    assert get_variant(Request(None, 50, min_accuracy=0.7), VARIANTS, states, LOADS).variant == "mnet-cpu"
    # 0.75 excludes mobilenet: a resnet50 variant gets loaded
    assert get_variant(Request(None, 50, min_accuracy=0.75), VARIANTS, states, LOADS).variant == "r50-gpu"


def test_no_variant_names_the_closest() -> None:
    with pytest.raises(NoVariant) as e:
        get_variant(Request("resnet50", 10, batch=64), VARIANTS, {}, LOADS)
    assert e.value.closest == "r50-gpu"          # 15 ms at batch 64 misses 10 ms by 50 %, the least
    assert "closest: r50-gpu" in str(e.value) and "latency <= 10 ms" in str(e.value)
    with pytest.raises(NoVariant) as e:
        get_variant(Request("resnet50", 300, min_accuracy=0.8), VARIANTS, {}, LOADS)
    assert e.value.closest == "r50-cpu"          # all miss accuracy equally; tie -> name order
    with pytest.raises(NoVariant) as e:
        get_variant(Request("mobilenet", 300, batch=16), VARIANTS, {}, LOADS)
    assert e.value.closest == "mnet-cpu"
    with pytest.raises(NoVariant) as e:
        get_variant(Request("bert", 300), VARIANTS, {}, LOADS)
    assert e.value.closest is None


def test_no_worker_for_a_matching_variant() -> None:
    loads = {"c1": LOADS["c1"]}
    states = {("r50-cpu", "c1"): O}
    with pytest.raises(NoVariant) as e:
        get_variant(Request("resnet50", 300), VARIANTS, states, loads)
    assert "no worker can serve" in str(e.value)
