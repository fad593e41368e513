"""A reload's budget reaches Status and /metrics (``costscale_budget_dollars_per_hour``): they showed the
budget the daemon started with after SIGHUP changed it (found by the soak, issue #40), while the fleet
loop planned within the new one."""
from __future__ import annotations

from config.profiles import load_profiles_csv
from dispatcher.latency_model import LatencyModel
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import make_config


def test_status_shows_the_reloaded_budget() -> None:
    start = make_config()
    d = Dispatcher(start, LatencyModel.from_profiles(load_profiles_csv()))
    assert d.status_reply().budget_per_hour == 2.5
    d.reload(start.model_copy(update={"budget_per_hour": 2.0}))
    assert d.status_reply().budget_per_hour == 2.0
    assert d.cfg.dispatcher == start.dispatcher and d.cfg.models == start.models   # the rest as at start
