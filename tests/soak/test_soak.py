"""The soak in ``make test`` (issue #40 deliverable 1): the real daemon (``costscale run --local-workers``)
on moto for about two and a half minutes, its wall clock sped up 1200 times (:mod:`bench.soak.wallclock`:
more than two calendar days, a fleet tick every 0.1 s, a model tick every 0.1 s), under Poisson load
with load steps through the public gRPC API, a worker killed every 25 s and the config reloaded
(SIGHUP: the budget alternating, and a pinned pool on and off, so instances come and go) every 15 s. At every sample (:mod:`bench.soak.run`): the budget held
per Status, no orphan instance, no duplicate launch, every query ended with OK or a typed status, the
state store within ``state_retention`` and ``forecast.retention_days``, the audit log within
``max_bytes x (backups + 1)``. After warm-up: threads, fds, worker channels and the asyncio tasks'
floor flat, RSS's floor within 10 %. At SIGTERM: exit 0, every instance terminated, every worker gone, and
the daemon's count of the queries that ended equal to the client's. The full run is
``bench/soak_bench.py`` (BENCHMARKS "Soak")."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import report
from bench.soak.run import TYPED, Soak, SoakSpec
from bench.soak_bench import FLAT_SLACK

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: RSS growth after the short run's warm-up, judged by its floor (:func:`bench.soak.report.verdict`: in a
#: short run RSS swings by a tenth around each reload): the dispatcher's idempotency cache (10,000
#: queries) is still filling at 30 q/s, so more room than the full bench's 5 % on its mean
RSS_GROWTH = 0.10


def test_soak_short(tmp_path: Path) -> None:
    spec = SoakSpec(duration_s=150.0, warmup_s=60.0, rate=20.0, step_rate=40.0, step_every_s=30.0, fleet_s=0.1,
                    sample_every_s=3.0, kill_every_s=25.0, hup_every_s=15.0, audit_max_bytes=4096, audit_backups=2,
                    reload_pinned={"r5n.large": 1, "t3.xlarge": 1}, park_s=3.0, scale_in_s=10.0,
                    generate_variants=False)
    res = Soak(spec, tmp_path).run()
    assert res.violations == [], res.violations[:20]
    assert res.exit_code == 0 and res.live_after == [] and res.workers_left == []
    assert sum(res.daemon_queries.values()) == res.sent == sum(res.outcomes.values())
    assert res.outcomes["OK"] > 0 and set(res.outcomes) <= {"OK", *TYPED}
    assert res.kills >= 1 and res.reloads >= 5
    assert res.calendar_days > 1.5          # 150 s x 1200 (the first sample is a few seconds in)
    g = report.growth(res.samples, spec.warmup_s)
    assert report.verdict(res.to_json(), g, RSS_GROWTH, FLAT_SLACK, rss_floor=True) == []
    # the bounds were reached, not only respected: the store forgot plans, intents and instances older
    # than a day (each reload pins a t3.xlarge or lets it retire) and demand minutes older than
    # forecast.retention_days, and the audit log was rotated to its last backup
    log = (tmp_path / "daemon.log").read_text()
    assert "state store: forgot" in log
    oldest = [s["demand_oldest"] for s in res.samples if s.get("demand_oldest") is not None]
    assert any(b > a for a, b in zip(oldest, oldest[1:]))   # the oldest minute held moved on: minutes were pruned
    assert max(s["audit_files"] for s in res.samples) == spec.audit_backups + 1
    assert all(s["audit_bytes"] <= spec.audit_max_bytes * (spec.audit_backups + 1) for s in res.samples)

