"""Issue #17 item 9: the daemon's log is decisions, one readable line each, not library chatter."""
from __future__ import annotations

import logging

from daemon.process import CHATTY_LIBRARIES, quiet_libraries
from scaler.fleet.reports import ApplyReport, ReconcileReport


def test_library_chatter_stays_below_info() -> None:
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET)
    quiet_libraries()
    assert logging.getLogger("apscheduler.executors.default").getEffectiveLevel() == logging.WARNING
    assert not logging.getLogger("apscheduler.scheduler").isEnabledFor(logging.INFO)
    assert not logging.getLogger("botocore.credentials").isEnabledFor(logging.INFO)


def test_a_decision_is_one_readable_line() -> None:
    rep = ApplyReport("g1-x", {"g4dn.xlarge": 1, "r5n.large": 2}, launched={"g4dn.xlarge": ["i-1"], "r5n.large": ["i-2", "i-3"]}, terminated=["i-9"])
    line = rep.summary()
    assert "\n" not in line and "ApplyReport(" not in line
    assert line.startswith("launched g4dn.xlarge: i-1, r5n.large: i-2 i-3") and "terminated i-9" in line
    assert ApplyReport("g1-x", {}).summary() == "no change"
    assert ReconcileReport(adopted=["i-1", "i-2"]).summary() == "adopted i-1, i-2"
