"""getVariant's fast path in the replay (issue #39, replay speed) against the path it replaced:
:meth:`sim.replay.infaas.ReplayInfaas._route_workers` (the ordered workers' loads summed inline) must
give the workers and loads that the previous version below gives, float for float, at every
arrival of a replay of the resnet family under INFaaS (each load computed when getVariant asks for it, the
route the one over every load computed first); and the state map the replay keeps per
worker set (:meth:`dispatcher.modelless.Router.state_map`, until the model loop's next states) must
be the one ``Router.route`` builds, with the same route. The previous version is kept verbatim."""
from __future__ import annotations

import collections
import itertools
from pathlib import Path

import pytest

from config.profiles import load_profiles_csv
from config.schema import load_config
from dispatcher import modelless as ml
from sim.replay import infaas as ri
from sim.replay.infaas import UTILIZATION_HORIZON_S, ReplayInfaas, _routing_load
from dispatcher.policy import QueryView, WorkerView
from sim.patterns import parse_pattern, pattern_workload
from sim.replay.matching_round import MatchingRound
from sim.replay.report import report
from sim.replay.variant_lane import VariantLoop
from sim.replay.run import ReplaySpec, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "replay-accuracy.yaml"
_NONE: frozenset[str] = frozenset()
_MODEL = ri._MODEL


# -- the reference: _route_workers before the inline sums, verbatim -------------------------------

def reference_route_workers(self: ReplayInfaas, now: float) -> list[ml.RouteWorker]:
    lane = self.lane
    busy = lane.busy or {}
    unordered = lane.busy_unordered
    lo = now - UTILIZATION_HORIZON_S
    waiting = collections.Counter(map(_MODEL, itertools.chain(lane._retry.values(), lane._queue.values())))
    hosts = collections.Counter(w.variant for w in lane.workers.values()
                                if not (w.draining or w.leaving) and w.variant in waiting) if waiting else None
    shares: dict[tuple[str, str], float] = {}
    static, loading, new, none = self._static, self.loading, tuple.__new__, ()
    out = []
    for wid, w in lane.workers.items():
        if w.draining or w.leaving:
            continue
        dq = busy.get(wid)
        if dq:
            while dq and dq[0][1] < lo:      # as the dispatcher prunes ``WorkerState.busy``
                dq.popleft()
        share = 0.0
        if hosts is not None and w.variant:   # ml.waiting_share_ms for its one variant, once per (variant, type)
            key = (w.variant, w.itype)
            share = shares.get(key)  # type: ignore[assignment]
            if share is None:
                share = shares[key] = ml.waiting_share_ms((w.variant,), waiting, hosts,
                                                          lambda v, t=w.itype: lane.vtimes[v].pred_ms(t)[1])
        load = _routing_load(dq or none, now, lo, wid not in unordered,
                             w.busy_until if w.query >= 0 else None, share)
        hw_loaded = static.get((w.itype, w.variant))
        if hw_loaded is None:
            hw_loaded = static[(w.itype, w.variant)] = (self.hardware.get(w.itype, "cpu"),
                                                        frozenset((w.variant,)) if w.variant else frozenset())
        # an ml.RouteWorker, built as its named tuple's __new__ does (it runs for every worker at every arrival)
        out.append(new(ml.RouteWorker, (wid, hw_loaded[0], w.itype, load,
                                        hw_loaded[1] if wid not in loading else _NONE)))
    return out


# -- the check --------------------------------------------------------------------------------------

def _family(pattern: str, seconds: float, seed: int):  # type: ignore[no-untyped-def]
    cfg = load_config(EXAMPLE)
    acc = cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})
    cfg = cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={"accuracy_scaling": acc})})
    return cfg, pattern_workload(parse_pattern(pattern), seconds, cfg.workload.batch_dist, seed=seed,
                                 max_batch=cfg.models[0].max_batch)


@pytest.mark.parametrize("pattern,seed", [("macroburst:low=20,high=150,low_s=40,high_s=20", 3),
                                          ("macroburst:low=60,high=120,low_s=30,high_s=30", 4)])
def test_the_replays_getvariant_is_the_previous_one(monkeypatch: pytest.MonkeyPatch, pattern: str, seed: int) -> None:
    """Bursts: workers come and go, getVariant and the model loop load variants, queries wait."""
    seen: collections.Counter[str] = collections.Counter()
    last: list[object] = [None]
    fast_rw, fast_route = ReplayInfaas._route_workers, ml.Router.route
    arrival: list[object] = []

    def route_workers(self: ReplayInfaas, now: float):  # type: ignore[no-untyped-def]
        want = reference_route_workers(self, now)            # prunes the calls as the fast path does
        got, roster, util = fast_rw(self, now)
        assert [(*w[:3], w[4]) for w in got] == [(*w[:3], w[4]) for w in want]
        assert all(w[3] != w[3] for w in got)                # the loads come from util, when asked
        assert [type(w) for w in got] == [ml.RouteWorker] * len(want)
        assert [(w.worker, w.loaded) for w in roster.workers] == [(w.worker, w.loaded) for w in want]
        assert roster.hws == frozenset(ml.route_hardware(self.metas, want))
        assert roster.router is self._routers[roster.hws]
        seen["arrivals"] += 1
        seen["rosters"] += roster is not last[0]
        seen["loads"] = self._loading_n
        last[0] = roster
        seen["loaded"] += sum(1 for w in want if w.utilization > 0.0)
        asked: list[str] = []

        def counted(wid: str) -> float:
            asked.append(wid)
            return util(wid)                                 # type: ignore[no-any-return]
        arrival[:] = [want, util, asked]
        return got, roster, counted

    def route(self: ml.Router, request, workers, states=None, st=None, util=None):  # type: ignore[no-untyped-def]
        assert st is not None and st == self.state_map(workers, states)
        assert list(st) == list(self.state_map(workers, states))          # the same order, too
        want_workers, fast_util, asked = arrival
        want = fast_route(self, request, want_workers, states)          # every load computed first, as before
        got = fast_route(self, request, workers, states, st, util)     # each load when getVariant asks for it
        assert got == want
        assert fast_route(self, request, want_workers, states, st) == want
        # every worker's load, asked for now or later in this arrival, is the one computed before
        assert [fast_util(w.worker).hex() for w in workers] == [w.utilization.hex() for w in want_workers]
        seen["asked"] += len(set(asked))
        seen["workers"] += len(workers)
        seen["inactive"] += sum(1 for s in st.values() if s is not ri.VariantState.ACTIVE)
        return got

    monkeypatch.setattr(ReplayInfaas, "_route_workers", route_workers)
    monkeypatch.setattr(ml.Router, "route", route)
    cfg, wl = _family(pattern, 120.0, seed)
    replay(cfg, load_profiles_csv(None), wl, 120.0, ReplaySpec())
    assert seen["arrivals"] == len(wl.arrivals) and seen["loaded"] > 2 * len(wl.arrivals)
    assert seen["rosters"] > 3 and seen["loads"] > 0     # workers came, changed variant or loaded
    assert seen["inactive"] > len(wl.arrivals)            # the model loop's states reach the kept maps
    assert seen["asked"] < 0.95 * seen["workers"]          # getVariant asked for fewer loads than workers


def reference_match(self: VariantLoop, qs: list[QueryView], views: list[WorkerView], now: float) -> None:
    """``VariantLoop._match`` before it skipped the groups no idle worker hosts, verbatim."""
    if self.late:          # every worker holds every variant: one group
        MatchingRound._match(self, qs, views, now)
        return
    groups: dict[str, list[QueryView]] = {}
    for v in qs:
        groups.setdefault(v.model, []).append(v)
    live = self._live or []
    for variant, gqs in groups.items():
        mine = [w for w in live if w.variant == variant]
        if any(w.idle for w in mine):
            MatchingRound._match(self, gqs, self._views(mine), now)


def _outcome(cfg, wl) -> tuple:  # type: ignore[no-untyped-def]
    run = replay(cfg, load_profiles_csv(None), wl, 120.0, ReplaySpec())
    lanes = tuple((name, lane.outcome.tobytes(), getattr(lane, "qvariant", lane.outcome).tobytes(), lane.calls)
                  for name, lane in run.lanes.items())
    rep = report(run)
    return lanes, rep["cost_usd"], rep["slo_attainment"], rep["plans"], len(run.targets)


@pytest.mark.parametrize("accuracy", [False, True])
def test_the_matching_rounds_skip_only_groups_with_no_idle_worker(monkeypatch: pytest.MonkeyPatch,
                                                                   accuracy: bool) -> None:
    """The application's rounds, INFaaS (accuracy scaling off) and accuracy-planned: the same
    outcomes, variants, calls, dollars and plans as with the previous ``_match``."""
    cfg, wl = _family("macroburst:low=20,high=150,low_s=40,high_s=20", 120.0, 5)
    if accuracy:
        cfg = load_config(EXAMPLE)
    got = _outcome(cfg, wl)
    monkeypatch.setattr(VariantLoop, "_match", reference_match)
    assert _outcome(cfg, wl) == got


def test_the_left_sum_is_the_fold_bit_for_bit() -> None:
    """``_left_sum`` (``sum`` up to Python 3.11) adds as ``functools.reduce(operator.add, ...)``:
    one rounding per addition, left to right, on seeded sums of durations that round."""
    import functools
    import operator
    import random

    rng = random.Random(39)
    for _ in range(20_000):
        xs = tuple(rng.choice([rng.random(), rng.uniform(0.0, 0.3), 0.1, 0.2, 1e-17, 3e15 * rng.random()])
                   for _ in range(rng.randint(0, 30)))
        start = rng.choice([0.0, rng.random(), 0.1, 1e-17])
        assert ri._left_sum(xs, start).hex() == functools.reduce(operator.add, xs, start).hex()
