"""What ``costscale demo`` shows is true: the live p99 is over a rolling window, dropped queries are
SLO misses, a figure without a sample is "-" (never nan), a non-terminal gets one line per phase,
library chatter stays off the display while costscale's errors pass, and Ctrl-C exits 130."""
from __future__ import annotations

import asyncio
import io
import logging
import math
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from daemon.demos.display import LiveDisplay, fmt_ms, fmt_pct, quiet_library_logs
from daemon.demos.load import P99_WINDOW_S, LoadStats
from variants.runtime.builtin_models import resolve_model
from variants.generator import quantize_int8


def test_live_p99_is_over_the_last_window_not_since_the_start() -> None:
    s = LoadStats()
    s.record_served(900.0, now=0.0)                       # slow, at the start
    for i in range(5):
        s.record_served(20.0 + i, now=P99_WINDOW_S + 1.0 + i)
    assert s.pct(99) == 900.0                             # since t=0 (the summary)
    assert s.recent_pct(99, now=P99_WINDOW_S + 5.0) == 24.0
    assert math.isnan(s.recent_pct(99, now=100.0))          # no sample in the window
    assert fmt_ms(s.recent_pct(99, now=100.0)) == "-"


def test_drops_count_as_slo_misses() -> None:
    s = LoadStats()
    s.record_served(100.0, now=1.0, instance_type="t3.xlarge", provider="CPUExecutionProvider")
    s.record_served(400.0, now=2.0)                       # over the 350 ms target
    for code in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT"):
        s.record_error(code)
    assert (s.ok, s.violations, s.dropped, s.answered, s.misses) == (2, 1, 3, 5, 4)
    assert s.miss_pct() == 80.0 and fmt_pct(s.miss_pct()) == "80.0%"
    assert s.served_by_type == {"t3.xlarge": 1} and s.providers == {"CPUExecutionProvider": 1}
    assert fmt_pct(LoadStats().miss_pct()) == "-"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_gets_one_line_per_phase() -> None:
    out = io.StringIO()
    d = LiveDisplay(out)
    for rate, line in ((8, "a1"), (8, "a2"), (8, "a3"), (20, "b1"), (20, "b2")):
        d.show(rate, line)
    d.close()
    assert out.getvalue() == "phase 1: a3\nphase 2: b2\n"

    tty = _Tty()
    d = LiveDisplay(tty)
    d.show(8, "a1")
    d.show(20, "b1")
    d.close()
    assert tty.getvalue() == "\r" + "a1".ljust(150) + "\r" + "b1".ljust(150) + "\n"


def test_library_chatter_is_kept_off_the_display(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = Path(resolve_model("builtin:mlp", tmp_path))
    sched = logging.getLogger("apscheduler.scheduler")
    execs = logging.getLogger("apscheduler.executors.default")
    own = logging.getLogger("costscale")
    with caplog.at_level(logging.WARNING):
        quantize_int8(src, tmp_path / "before.onnx")          # without the filter: the advice shows
        assert any("pre-processing before quantization" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with quiet_library_logs():
                quantize_int8(src, tmp_path / "int8.onnx")
                sched.warning('Execution of job "Daemon.model_tick" skipped: maximum number of running instances reached (1)')
                try:
                    raise asyncio.CancelledError()
                except BaseException:
                    execs.exception('Job "Daemon.reconcile_tick" raised an exception')
                try:
                    raise ValueError("a real bug")
                except ValueError:
                    execs.exception('Job "Daemon.fleet_tick" raised an exception')
                own.error("fleet: no pool fits 0.1 $/hr")
                own.warning("fleet: unpark i-1: TimeoutError")
                warnings.warn_explicit("quantization advice", UserWarning, "quantize.py", 1,
                                       module="onnxruntime.quantization.quantize")
                warnings.warn_explicit("our own", UserWarning, "demo.py", 1, module="daemon.demos.basic")
        assert [(r.name, r.getMessage()) for r in caplog.records] == [
            ("apscheduler.executors.default", 'Job "Daemon.fleet_tick" raised an exception'),
            ("costscale", "fleet: no pool fits 0.1 $/hr"),
            ("costscale", "fleet: unpark i-1: TimeoutError"),
        ]
        assert [str(w.message) for w in caught] == ["our own"]
        caplog.clear()
        sched.warning("after the demo")                       # the filters are gone again
        assert [r.getMessage() for r in caplog.records] == ["after the demo"]


@pytest.mark.slow
def test_ctrl_c_exits_130_and_prints_no_nan() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "demo", "--duration", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        header = proc.stdout.readline()           # the demo is up (its signal handlers are set)
        assert header.startswith("costscale demo: moto EC2 on http://127.0.0.1:"), header
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "nan" not in (out + err).lower()
    assert "Traceback" not in err, err[-2000:]
    rows = dict(line.strip().split("  ", 1) for line in out.splitlines() if line.startswith("  "))
    assert rows["latency p50 / p99"].strip() == "-"
    assert rows["SLO misses"].strip() == "0 of 0 answered (-): 0 over 350 ms, 0 dropped"
    assert "costscale demo summary (interrupted)" in out


def test_the_two_model_demo_refuses_flags_it_does_not_use(capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    assert main(["demo", "--models", "2", "--trace", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert "--models 2 runs its own two-model load" in err and "Traceback" not in err


def test_a_served_query_is_judged_against_its_own_models_slo() -> None:
    from daemon.demos.models import ModelLoad

    m = ModelLoad("dien", 100.0, 5.0, 30.0, 60.0)
    m.stats.record_served(150.0, 0.0)      # within the demo's 350 ms, over dien's 100 ms
    m.stats.record_served(90.0, 0.0)
    assert m.stats.violations == 1 and m.rate(59.0) == 5.0 and m.rate(60.0) == 30.0
