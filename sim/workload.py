"""Query workloads for the simulator: arrival times and batch sizes, seeded and deterministic.

Arrivals (Kairos §7: a Poisson process of 100s of queries per second):
- :func:`poisson_arrivals`: exponential inter-arrivals at a rate;
- :func:`gamma_arrivals`: Gamma inter-arrivals with a given squared coefficient of variation
  (CV² = 1 is Poisson; > 1 burstier; < 1 smoother);
- :func:`ramp_arrivals`: a non-homogeneous Poisson process whose rate moves linearly from λ1 to
  λ2 at τ queries/s² and then holds (load changes, Kairos §8.4), by thinning;
- :func:`load_trace_csv`: replay of a CSV trace with columns timestamp, model, batch_size
  (:func:`read_trace_csv` reads every row, for the replay's model/application mapping).
Batch sizes come from :func:`scaler.planner.batch_mix.sample_batches` (deeprecsys, lognormal, gaussian,
fixed:N). :func:`make_workload` draws arrivals and batches from independent child streams of one
seed, so changing the rate does not change the batch sequence.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from config.sections.batch_dist import DEFAULT_MAX_BATCH, BatchDist
from config.files import unreadable
from scaler.planner.batch_mix import sample_batches


@dataclass(frozen=True)
class Workload:
    arrivals: np.ndarray   # seconds, ascending, starting near 0
    batches: np.ndarray    # int batch sizes

    def __len__(self) -> int:
        return int(self.arrivals.size)

    @property
    def duration_s(self) -> float:
        return float(self.arrivals[-1]) if self.arrivals.size else 0.0


def _check_rate(rate: float) -> None:
    if not rate > 0:
        raise ValueError(f"rate must be > 0 queries/s, not {rate!r}")


def _renewal(inter: np.ndarray, duration: float | None) -> np.ndarray:
    t = np.cumsum(inter)
    return t[t < duration] if duration is not None else t


def _count_for(rate: float, duration: float, cv2: float = 1.0) -> int:
    # enough draws to cover ``duration`` with overwhelming probability (mean + 10 sd + 10)
    mean = rate * duration
    return int(mean + 10 * np.sqrt(max(mean * max(cv2, 1.0), 1.0)) + 10)


def poisson_arrivals(rate: float, rng: np.random.Generator, *, duration: float | None = None,
                     n: int | None = None) -> np.ndarray:
    """Poisson arrivals at ``rate`` q/s: all arrivals in [0, duration), or exactly ``n`` of them."""
    return gamma_arrivals(rate, 1.0, rng, duration=duration, n=n)


def gamma_arrivals(rate: float, cv2: float, rng: np.random.Generator, *, duration: float | None = None,
                   n: int | None = None) -> np.ndarray:
    """Renewal arrivals with Gamma inter-arrival times of mean 1/rate and squared CV ``cv2``
    (shape 1/cv2, scale cv2/rate)."""
    _check_rate(rate)
    if not cv2 > 0:
        raise ValueError(f"cv2 must be > 0, not {cv2!r}")
    if (duration is None) == (n is None):
        raise ValueError("give exactly one of duration or n")
    count = int(n) if n is not None else _count_for(rate, float(duration), cv2)  # type: ignore[arg-type]
    shape = 1.0 / cv2
    if cv2 == 1.0:
        inter = rng.exponential(1.0 / rate, count)
    else:
        inter = rng.gamma(shape, 1.0 / (rate * shape), count)
    return _renewal(inter, duration)


def ramp_rate(t: np.ndarray, rate1: float, rate2: float, slope: float) -> np.ndarray:
    """Instantaneous rate at times ``t``: from ``rate1`` towards ``rate2`` at ``slope`` q/s², then held."""
    t = np.asarray(t, dtype=float)
    if rate2 >= rate1:
        return np.minimum(rate1 + slope * t, rate2)
    return np.maximum(rate1 - slope * t, rate2)


def ramp_arrivals(rate1: float, rate2: float, slope: float, duration: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Non-homogeneous Poisson arrivals in [0, duration) whose rate ramps λ1→λ2 at ``slope``
    q/s² (Lewis–Shedler thinning of a Poisson process at max(λ1, λ2))."""
    _check_rate(rate1)
    _check_rate(rate2)
    if not slope > 0:
        raise ValueError(f"ramp slope must be > 0 q/s², not {slope!r}")
    top = max(rate1, rate2)
    cand = poisson_arrivals(top, rng, duration=duration)
    keep = rng.random(cand.size) * top < ramp_rate(cand, rate1, rate2, slope)
    return cand[keep]


@dataclass(frozen=True)
class TraceRows:
    """A trace CSV as read: per row (file order) its time, the ``model`` column and the batch size;
    ``lines`` the file line of each row (for messages)."""

    times: np.ndarray
    names: list[str]
    batches: np.ndarray
    lines: np.ndarray


def read_trace_csv(path: str | Path) -> TraceRows:
    """Read a trace CSV (header: timestamp, model, batch_size; timestamps in seconds, any origin;
    ``model`` names a model or an application). Raises ``ValueError`` with one line naming the
    file, the line and the problem."""
    p = Path(path)
    times: list[float] = []
    names: list[str] = []
    sizes: list[int] = []
    lines: list[int] = []
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = set(reader.fieldnames or [])
            need = {"timestamp", "model", "batch_size"}
            if not need <= cols:
                raise ValueError(f"{p}: trace CSV lacks column(s) {', '.join(sorted(need - cols))}")
            for row in reader:
                lineno = reader.line_num
                try:
                    ts, b = float(row["timestamp"]), int(float(row["batch_size"]))
                except (TypeError, ValueError):
                    raise ValueError(f"{p}: line {lineno}: bad timestamp or batch_size") from None
                if b < 1 or not np.isfinite(ts):
                    raise ValueError(f"{p}: line {lineno}: batch_size must be >= 1 and timestamp finite")
                if not row["model"]:
                    raise ValueError(f"{p}: line {lineno}: empty model")
                times.append(ts)
                names.append(row["model"])
                sizes.append(b)
                lines.append(lineno)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read trace: {unreadable(exc)}") from None
    return TraceRows(np.asarray(times, dtype=float), names, np.asarray(sizes, dtype=np.int64),
                     np.asarray(lines, dtype=np.int64))


def trace_workload(rows: TraceRows, keep: np.ndarray | None = None, origin: float | None = None) -> Workload:
    """The rows selected by ``keep`` (all when None), sorted by time and shifted so that ``origin``
    (default: the first selected time) is 0."""
    t, b = (rows.times, rows.batches) if keep is None else (rows.times[keep], rows.batches[keep])
    order = np.argsort(t, kind="stable")
    t = t[order]
    start = origin if origin is not None else (float(t[0]) if t.size else 0.0)
    return Workload(t - start, b[order])


def load_trace_csv(path: str | Path, model: str | None = None) -> Workload:
    """Replay a trace CSV (see :func:`read_trace_csv`). Rows of other models are skipped when
    ``model`` is given; times are shifted to start at 0 and sorted."""
    rows = read_trace_csv(path)
    keep = None if model is None else np.asarray([n == model for n in rows.names], dtype=bool)
    if not rows.names or (keep is not None and not keep.any()):
        raise ValueError(f"{Path(path)}: no queries" + (f" for model {model!r}" if model else ""))
    return trace_workload(rows, keep)


def make_workload(rate: float, duration: float, batch_dist: BatchDist | str = "deeprecsys", *, seed: int = 0,
                  cv2: float = 1.0, max_batch: int = DEFAULT_MAX_BATCH) -> Workload:
    """Arrivals at ``rate`` for ``duration`` s (Poisson, or Gamma with ``cv2`` != 1) and batch sizes
    from ``batch_dist``, from independent child streams of ``seed``."""
    arr_ss, bat_ss = np.random.SeedSequence(seed).spawn(2)
    arrivals = gamma_arrivals(rate, cv2, np.random.default_rng(arr_ss), duration=duration)
    batches = sample_batches(batch_dist, arrivals.size, np.random.default_rng(bat_ss), max_batch)
    return Workload(arrivals, batches)


def unit_poisson_workload(n: int, batch_dist: BatchDist | str = "deeprecsys", *, seed: int = 0,
                          max_batch: int = DEFAULT_MAX_BATCH) -> Workload:
    """``n`` Poisson arrivals conditioned to end exactly at time ``n`` (rate 1): scale by 1/λ to get
    rate λ with the last arrival at n/λ. Used with common random numbers by :mod:`sim.capacity`."""
    arr_ss, bat_ss = np.random.SeedSequence(seed).spawn(2)
    t = np.cumsum(np.random.default_rng(arr_ss).exponential(1.0, n))
    t *= n / t[-1]
    batches = sample_batches(batch_dist, n, np.random.default_rng(bat_ss), max_batch)
    return Workload(t, batches)
