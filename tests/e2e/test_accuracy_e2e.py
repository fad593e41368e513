"""Acceptance (issue #13 "Live"): a spike past what the budget's pool serves at full accuracy is
served by less accurate variants with SLO attainment >= 99 %, and accuracy returns to the top variant
after it; the real daemon in-process against moto in server mode, two local worker processes.

The application is the digits family (:mod:`variants.families.digits`: four models trained here,
accuracies measured on the shipped validation split), registered through the registry as
``register_family`` does. Its models run in well under a millisecond on this machine, so the workers
pad each member to a latency profile written for this test (10, 20, 50 and 100 ms at batch 1 on
c5n.2xlarge, the most accurate slowest: a 10x latency range) -- the emulation every e2e test uses
(``config.emulation``), with the family's real accuracies. Pool: c5n.2xlarge x 2, pinned (the
budget buys no more). SLO 1 s. At full accuracy the pool serves 2 x 7.6 = 15.2 q/s with its p99
within the SLO (:func:`variants.accuracy.plan_round.max_utilization`: one query at a time, 100 ms each);
the spike is 30 q/s, twice that.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from config.profiles import LatencyProfile, load_profiles_csv, save_profiles_csv
from config.schema import Config
from daemon.demos.demo_config import demo_config
from variants.families import digits as dg
from variants.families.family import Member
from variants.families.profiles import ProfileRow
from variants.families.registration import register_family
from variants.registry import VariantRegistry, registry_path_for
from sim.replay.outcomes import SERVED
from tests.accuracy_replay import placements, replay_the_e2e, same_swaps
from tests.load_helpers import poisson_phase

pytestmark = pytest.mark.slow

TYPE = "c5n.2xlarge"
SLO_MS = 1000.0
#: member -> ms at batch 1 (linear in the batch: no batching economy): the most accurate is the slowest
LATENCY_MS = {"digits-pca8": 10.0, "digits-softmax": 20.0, "digits-mlp512x2": 50.0, "digits-svm": 100.0}
LOW_QPS, SPIKE_QPS = 5.0, 30.0
BATCHES = (1, 2, 4, 8, 16, 32)


def _profiles(tmp: Path) -> Path:
    """The shipped Kairos profiles (the config's model) and the members' test profiles."""
    table = load_profiles_csv(None)
    rows = list(table.profiles.values())
    for name, ms in LATENCY_MS.items():
        b = np.array(BATCHES, dtype=float)
        lat = ms * b
        rows.append(LatencyProfile(name, TYPE, b, lat, lat, lat))
    path = tmp / "profiles.csv"
    save_profiles_csv(path, rows)
    return path


@pytest.mark.parametrize("mode", ["plan", "slackfit"])
def test_a_spike_is_served_at_lower_accuracy_and_accuracy_comes_back(moto_endpoint: str, tmp_path: Path, mode: str,
                                                                     digits_members: list[Member]) -> None:
    """``plan``: the accuracy planner swaps variants and routes by its plan (Proteus); ``slackfit``: every
    member stays loaded and each dispatch picks one by the head's slack (SuperServe §4.2)."""
    live = asyncio.run(asyncio.wait_for(_scenario(moto_endpoint, tmp_path, digits_members, mode), timeout=300))
    _against_the_replay(live, mode, tmp_path)


def _against_the_replay(live: dict, mode: str, tmp: Path) -> None:  # type: ignore[type-arg]
    """Issue #25 item 5: the same arrivals replayed (:mod:`tests.accuracy_replay`): the same variant
    swaps in the same order (plan mode; :func:`tests.accuracy_replay.same_swaps`: either side may
    pass through a placement one swap from the next that the other skipped, as the live trigger reads
    the window a tick earlier or later from run to run) and SLO attainment within 1 point, over the
    queries after the warm-up, on both sides."""
    out = sorted(live["out"], key=lambda o: o[4])
    run = replay_the_e2e(live["config"], "digits", live["rows"], SLO_MS, [o[4] for o in out], tmp)
    lane = run.lanes["digits"]
    measured = np.array([o[0] != "warm" for o in out])
    live_ok = np.array([o[1] is not None and o[1] <= SLO_MS for o in out])
    replay_ok = (lane.outcome == SERVED) & (lane.latency <= SLO_MS)
    live_att, replay_att = live_ok[measured].mean(), replay_ok[measured].mean()
    swaps_live, swaps_replay = placements(live["plans"]), placements(run.accuracy_plans.get("digits", []))
    print(f"live vs replay ({mode}): attainment {live_att:.2%} vs {replay_att:.2%}; "
          f"placements live {swaps_live}, replay {swaps_replay}")
    assert abs(live_att - replay_att) <= 0.01
    if mode == "plan":
        assert same_swaps(swaps_live, swaps_replay)
        assert len(swaps_replay) >= 3 and swaps_replay[0] == swaps_replay[-1], "no burst was bridged"


async def _phase(stub, pb, rate: float, duration: float, rng, out: list, phase: str, until=None,  # noqa: ANN001
                 max_duration: float = 0.0) -> None:
    """Poisson arrivals of the application at ``rate`` for ``duration`` s (with ``until``: on until
    it holds, at most ``max_duration``); each answer as (phase, latency ms or None, variant, accuracy,
    sent at ``perf_counter``)."""
    async def one() -> None:
        t0 = time.perf_counter()
        try:
            r = await stub.Submit(pb.SubmitRequest(application="digits", batch_size=1), timeout=10.0)
        except grpc.aio.AioRpcError as exc:
            out.append((phase, None, exc.code().name, 0.0, t0))
            return
        out.append((phase, (time.perf_counter() - t0) * 1000.0, r.variant, r.accuracy, t0))

    await poisson_phase(lambda _: one(), rate, duration, rng, until, max_duration, tick_s=0.02)


async def _first_true(cond, t0: float, step_s: float = 0.02) -> float:  # noqa: ANN001
    """Seconds from ``t0`` until ``cond()`` first holds, polled every ``step_s``."""
    while not cond():
        await asyncio.sleep(step_s)
    return time.monotonic() - t0


def digits_cluster(endpoint: str, tmp: Path, members, mode: str, **extra) -> tuple[Config, list[ProfileRow]]:  # noqa: ANN001,ANN003
    """The scenario's config (the demo's, the pool pinned to two c5n.2xlarge, accuracy scaling in
    ``mode``, ``extra`` top-level fields over it) and the digits family registered as
    ``register_family`` does, with this test's latency rows (returned)."""
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    raw = demo_config(tmp, endpoint, ami, budget=2.5, rate=LOW_QPS, policy="kairos-strict",
                      pinned_pool={TYPE: 2}).model_dump()
    raw["profiles"] = str(_profiles(tmp))
    raw["intervals"] = {"fleet_s": 2, "model_s": 0.25, "reconcile_s": 30}
    raw["model_scaling"]["generate_variants"] = False
    raw["model_scaling"]["accuracy_scaling"] = {"enabled": True, "replan_s": 3.0, "mode": mode}
    cfg = Config.model_validate({**raw, **extra})
    reg = VariantRegistry(registry_path_for(cfg.state_path))
    rows = [ProfileRow("digits", m.name, TYPE, b, LATENCY_MS[m.name] * b, m.accuracy) for m in members for b in BATCHES]
    register_family(reg, dg.SPEC, members, rows, qos_ms=SLO_MS)
    reg.close()
    return cfg, rows


async def _scenario(endpoint: str, tmp: Path, members, mode: str) -> dict:  # type: ignore[type-arg]  # noqa: ANN001
    from daemon.process import start_with_local_workers
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cfg, rows = digits_cluster(endpoint, tmp, members, mode)
    acc = {m.name: m.accuracy for m in members}
    top = max(acc, key=acc.__getitem__)
    daemon, runner = await start_with_local_workers(cfg, [("rm2", "builtin:mlp", "rm2")], profiles_csv=cfg.profiles,
                                                   generate_variants=False)
    d = daemon.dispatcher
    try:
        await daemon.fleet_tick("start")
        t0 = time.monotonic()
        while len(d.workers) < 2 and time.monotonic() - t0 < 120:
            await asyncio.sleep(0.2)
        assert len(d.workers) == 2, "the pinned pool's workers did not register"
        rng = np.random.default_rng(13)
        out: list = []

        def placed_top() -> bool:
            if mode == "slackfit":   # every member resident on both workers
                return all(set(acc) <= d.loaded_on(w) for w in d.workers.values())
            # the plan routes the application to the most accurate member only
            fr = d.accuracy.router.workers_for("digits")
            return bool(fr) and all(d.accuracy.placement.get(w) == top for w in fr)

        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            # warm: the first plan loads the members onto the workers
            await _phase(stub, pb, LOW_QPS, 3.0, rng, out, "warm", until=placed_top, max_duration=60.0)
            await _phase(stub, pb, LOW_QPS, 10.0, rng, out, "low")
            await _phase(stub, pb, SPIKE_QPS, 25.0, rng, out, "spike")
            t_after = time.monotonic()
            back = asyncio.create_task(_first_true(placed_top, t_after))   # polled every 20 ms from the spike's end
            await _phase(stub, pb, LOW_QPS, 5.0, rng, out, "after", until=placed_top, max_duration=60.0)
            back_s = back.result() if back.done() else float("inf")
            back.cancel()
            await _phase(stub, pb, LOW_QPS, 8.0, rng, out, "settled")
        loop = daemon.model_loop.accuracy
        by = {ph: [o for o in out if o[0] == ph] for ph in ("warm", "low", "spike", "after", "settled")}
        measured = by["low"] + by["spike"] + by["after"] + by["settled"]
        within = sum(1 for _, ms, _, _, _ in measured if ms is not None and ms <= SLO_MS)
        attainment = within / len(measured)
        spike_variants = {v for _, ms, v, _, _ in by["spike"] if ms is not None}
        spike_acc = [a for _, ms, _, a, _ in by["spike"] if ms is not None]
        print(f"\naccuracy e2e ({mode}): {len(measured)} queries after warm-up, SLO attainment {attainment:.2%} "
              f"(<= {SLO_MS:g} ms); back to {top} {back_s:.2f} s after the spike; plans {len(loop.allocations)}, "
              f"re-pinned {d.accuracy.rerouted}, failed loads {loop.failed}, SlackFit picks {d.accuracy.bound}")
        for ph, rows_ in by.items():
            ok = [o for o in rows_ if o[1] is not None]
            errs = sorted({o[2] for o in rows_ if o[1] is None})
            print(f"  {ph}: {len(rows_)} sent, late {sum(1 for o in ok if o[1] > SLO_MS)}, errors {len(rows_) - len(ok)} {errs}, "
                  f"variants {sorted({o[2] for o in ok})}, mean accuracy {np.mean([o[3] for o in ok]) if ok else float('nan'):.4f}")
        for t, a in loop.allocations:
            print(f"  plan at {t - t0:.1f} s: demand {a.plan.demand_qps}, {a.placement}, served {a.plan.served_qps}")
        # both 100 % on this scenario (SlackFit was 93.6-98 % while the latency model predicted a
        # batch of 5 at the 1-query mean of its bucket, dispatcher.latency_model)
        assert attainment >= 0.99
        assert spike_variants - {top}, "the spike was not served by a less accurate variant"
        assert min(spike_acc) >= min(acc.values()) and np.mean(spike_acc) < acc[top]
        # the replies carry the accuracy of the variant that served them
        assert all(a == pytest.approx(acc[v]) for _, ms, v, a, _ in measured if ms is not None)
        settled = [(v, a) for _, ms, v, a, _ in by["settled"] if ms is not None]
        if mode == "plan":
            assert {v for v, _ in settled} == {top}, "accuracy did not come back to the top variant"
            # back to the top variant within 30 s of the spike's end, timed to 20 ms from the spike's
            # end to the first poll that sees every worker on it (README quotes the last runs'; the
            # floor leaves room for a loaded machine, the replan is on a 3 s timer)
            assert back_s <= 30.0, back_s
        else:      # a queue of two at low load may still go to the next variant for one call
            assert np.mean([a for _, a in settled]) >= acc[top] - 0.01, "accuracy did not come back"
        assert all(ms is not None for _, ms, _, _, _ in by["low"] + by["settled"])
    finally:
        await daemon.stop(grace=3.0)
        await runner.stop_all()
    return {"out": out, "plans": list(loop.allocations), "config": cfg.model_dump(), "rows": rows}
