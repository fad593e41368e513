"""Live admission's getVariant with each worker's load computed when getVariant asks for it (issue
#39, speed: ``Admission.lazy_route_workers``, ``Router.route``'s ``util``) against the path it
replaced, every load computed up front (``Admission.route_workers`` before, kept verbatim below):
the same loads float for float, the same route, on seeded workers with recent calls, calls under
way and queries waiting; fewer loads computed when an Active instance serves the query."""
from __future__ import annotations

import asyncio
import collections
import math
import random
from pathlib import Path
from types import SimpleNamespace

from dispatcher import modelless as ml
from dispatcher.admission import Admission
from dispatcher.proto import costscale_pb2 as pb
from variants.infaas.selection import Request
from variants.infaas.state_machine import VariantState
from tests.dispatcher.test_modelless import _cfg, _hosting, _vision


# -- the reference: Admission.route_workers before the lazy loads, verbatim ---------------------------

def reference_route_workers(self: Admission) -> list[ml.RouteWorker]:
    """The live workers as getVariant sees them, each with its load (:func:`ml.routing_load`: recent
    busy time, the call under way, its share of the queries waiting for its variants)."""
    now = self.rt.clock()
    p = self.placement
    live = [(w, frozenset(p.loaded_on(w))) for w in self.registry.workers.values() if not w.draining and not w.removed]
    waiting = collections.Counter(q.variant for q in self.book.waiting() if q.variant)
    hosts = collections.Counter(v for _, vs in live for v in vs if v in waiting)
    horizon = self.registry.utilization_horizon_s
    out = []
    for w, vs in live:
        share = (ml.waiting_share_ms(vs, waiting, hosts, lambda v, t=w.instance_type:
                                     p.variant_ms(v, t, 1.0) if v in p.variant_meta else 0.0)
                 if waiting else 0.0)
        out.append(ml.RouteWorker(w.instance_id, w.hardware, w.instance_type,
                                  ml.routing_load(w.busy, now, horizon, None if w.idle else w.busy_until, share), vs))
    return out


def test_admissions_lazy_loads_route_as_every_load_computed_first(tmp_path: Path) -> None:
    d, reg = _vision(tmp_path, _cfg(tmp_path), accuracy=0.9)
    rng = random.Random(39)
    now = [1000.0]
    d.admission.rt.clock = lambda: now[0]                # type: ignore[method-assign]   # a clock that stands still
    names = d.placement.variants_for("vision", "")
    metas = [d._variant_meta[n] for n in names]
    counts = collections.Counter()                        # type: ignore[var-annotated]

    async def run() -> None:
        _hosting(d, {f"i-{k}": [{"other"}, {"other-fp32-cpu"}, {"other", "other-fp32-cpu"}, set()][k % 4]
                     for k in range(12)})
        ws = d.admission.registry.workers
        for case in range(150):
            now[0] += rng.choice([0.05, 0.5, 3.0])
            for w in ws.values():                         # recent calls (ties: equal lengths), some under way
                w.busy.clear()
                t = now[0] - 2.5
                for _ in range(rng.randint(0, 6)):
                    t += rng.choice([0.1, 0.25, 0.4])
                    w.busy.append((t, t + rng.choice([0.05, 0.1, 0.2])))
                w.idle = rng.random() < 0.6
                w.busy_until = now[0] + rng.choice([-0.1, 0.0, 0.05, 0.3])
            d.queries.queue.clear()
            for k in range(rng.choice([0, 0, 2, 5])):
                d.queries.queue[f"q{k}"] = SimpleNamespace(variant=rng.choice(["other", "other-fp32-cpu", ""]))
            d.variant_states.clear()
            degraded = rng.random() < 0.25                # every instance Overloaded or Interfered: step 2
            for w in ws:
                for n in names:
                    if degraded or rng.random() < 0.3:
                        d.variant_states[(n, w)] = rng.choice([VariantState.OVERLOADED, VariantState.INTERFERED]
                                                              if degraded else list(VariantState))
            want = reference_route_workers(d.admission)
            got = d.admission.route_workers()
            assert [(*w[:3], w[3].hex(), w[4]) for w in got] == [(*w[:3], w[3].hex(), w[4]) for w in want]
            blank, util = d.admission.lazy_route_workers()
            assert [w._replace(utilization=0.0) for w in blank] == [w._replace(utilization=0.0) for w in want]
            assert all(w.utilization != w.utilization for w in blank)
            asked: list[str] = []

            def counted(wid: str) -> float:
                asked.append(wid)
                return util(wid)
            acc = rng.choice([0.0, 0.95])
            batch = rng.choice([1, 4])
            req = Request(None, math.inf, acc, batch)
            router = d.placement.router(names, want)
            try:
                ref = ("ok", ml.route(req, metas, want, d.placement.grid, d.variant_states))
            except ml.RouteError as exc:
                ref = ("error", exc.code, str(exc))
            try:
                lazy = ("ok", router.route(req, blank, d.variant_states, util=counted))
            except ml.RouteError as exc:
                lazy = ("error", exc.code, str(exc))
            assert lazy == ref
            assert [util(w.worker).hex() for w in want] == [w.utilization.hex() for w in want]
            v = d.admission.validate(pb.SubmitRequest(application="vision", batch_size=batch, min_accuracy=acc))
            if ref[0] == "ok":
                assert (v[3], v[4]) == (ref[1].variant, ref[1])  # type: ignore[index, union-attr]
            counts["asked"] += len(set(asked))
            counts["workers"] += len(want)
            counts[ref[0] if ref[0] == "error" else ref[1].needs_load] += 1  # type: ignore[union-attr]
        d.queries.queue.clear()
        for w in d.workers.values():
            await w.client.close()
    asyncio.run(run())
    reg.close()
    assert counts["asked"] < 0.7 * counts["workers"] and counts[False] > 50 and counts[True] > 0
