"""The soak's verdict and its figures: each sampled series' growth after warm-up (the mean of its last
tenth of samples over the mean of the first tenth after warm-up), the bounds checked against them,
the summary table and the plot (``soak.png``: one panel per series over time)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

#: the series plotted and summarised: (key in a sample, label)
SERIES = (("rss_mib", "daemon RSS (MiB)"), ("threads", "threads"), ("fds", "open fds"),
          ("tasks", "asyncio tasks"), ("channels", "gRPC channels to workers"), ("series", "/metrics series"),
          ("store_bytes", "state store db+WAL (bytes)"), ("store_rows", "state store rows"),
          ("audit_bytes", "audit log, all files (bytes)"))
#: must not grow after warm-up: threads, fds, worker channels and asyncio tasks judged by their floor (the
#: least of the last tenth of samples against the least of the first tenth: a leak raises it, while a
#: scrape's thread, a restarted worker's channel and fds for a moment, and the tasks of the queries in
#: flight, a task or two each, come and go); /metrics series by their max (bounded by the config, not
#: by time: an outcome code or a variant placed on a type seen for the first time adds one)
FLAT = ("threads", "fds", "tasks", "channels", "series")
FLOOR = ("threads", "fds", "tasks", "channels")


def with_rows(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**s, "store_rows": sum(s["rows"].values())} for s in samples]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def growth(samples: Sequence[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, float]]:
    """Per series: ``start`` (mean of the first tenth after warm-up), ``end`` (mean of the last tenth),
    ``ratio`` (end / start), and ``min``/``max`` after warm-up."""
    after = [s for s in with_rows(samples) if s["t"] >= warmup_s]
    if not after:
        return {}
    k = max(1, len(after) // 10)
    out = {}
    for key, _ in SERIES:
        xs = [float(s[key]) for s in after if s.get(key) is not None]
        if not xs:
            continue
        start, end = _mean(xs[:k]), _mean(xs[-k:])
        out[key] = {"start": start, "end": end, "ratio": end / start if start else float("nan"),
                    "min": min(xs), "max": max(xs), "floor_start": min(xs[:k]), "floor_end": min(xs[-k:])}
    return out


def verdict(res: dict[str, Any], g: dict[str, dict[str, float]], rss_growth: float, flat_slack: dict[str, float],
            rss_floor: bool = False) -> list[str]:
    """What broke the soak's bounds: the invariants (``res['violations']``), RSS grown over
    ``rss_growth`` (a ratio: 0.05 is 5 %: the mean of the last tenth of samples over the first tenth
    after warm-up), a :data:`FLAT` series risen after warm-up by more than ``flat_slack[key]``.
    ``rss_floor``: RSS judged by its floor instead (the least of the last tenth over the least of the
    first tenth), for a short run whose RSS swings by up to a tenth around its reloads and pool changes,
    while a leak would raise the floor."""
    bad = list(res["violations"])
    rss = g.get("rss_mib")
    ratio = (rss["floor_end"] / rss["floor_start"] if rss_floor else rss["ratio"]) if rss else 1.0
    if ratio > 1.0 + rss_growth:
        bad.append(f"RSS grew {100 * (ratio - 1):.1f} % after warm-up{' (its floor)' if rss_floor else ''} "
                   f"(bound {100 * rss_growth:g} %)")
    for key in FLAT:
        if key not in g:
            continue
        x = g[key]
        if key in FLOOR and x["floor_end"] > x["floor_start"] + flat_slack.get(key, 0.0):
            bad.append(f"{key} not flat after warm-up: floor {x['floor_start']:.0f} first, {x['floor_end']:.0f} last")
        elif key not in FLOOR and x["max"] > x["start"] + flat_slack.get(key, 0.0):
            bad.append(f"{key} not flat after warm-up: start {x['start']:.1f}, max {x['max']:.0f}")
    return bad


def table(res: dict[str, Any], g: dict[str, dict[str, float]]) -> str:
    """The summary table (markdown): the run's totals, then each series' growth after warm-up."""
    s = res["samples"][-1] if res["samples"] else {}
    answered = sum(res["outcomes"].values())
    lines = [
        "| run | value |", "|---|---|",
        f"| wall time | {res['wall_s']:.0f} s |",
        f"| fleet ticks (run / skipped while one ran) | {s.get('fleet_ticks', 0)} / {s.get('fleet_skipped', 0)} |",
        f"| calendar time the daemon lived (wall clock x{res['spec']['speed']:g}) | {res.get('calendar_days', 0):.2f} days |",
        f"| model ticks | {s.get('model_ticks', 0)} |",
        f"| queries sent / ended (client) / ended (daemon's count) | {res['sent']} / {answered} / "
        f"{sum(res['daemon_queries'].values())} |",
        f"| outcomes | {', '.join(f'{k} {v}' for k, v in sorted(res['outcomes'].items()))} |",
        f"| workers killed / config reloads / instances launched | {res['kills']} / {res['reloads']} / {res['launched']} |",
        f"| samples / invariant violations | {len(res['samples'])} / {len(res['violations'])} |",
        f"| CPU s: daemon / daemon+workers+moto / the bench itself | {res['cpu_s'].get('daemon', 0):.0f} / "
        f"{res['cpu_s'].get('daemon_and_workers', 0):.0f} / {res['cpu_s'].get('bench', 0):.0f} |",
        "", "| series (after warm-up; start/end: means of the first/last tenth) | start | end | max | end/start |"
        " floor first/last tenth |", "|---|---|---|---|---|---|",
    ]
    for key, label in SERIES:
        if key in g:
            x = g[key]
            lines.append(f"| {label} | {x['start']:.4g} | {x['end']:.4g} | {x['max']:.4g} | {x['ratio']:.3f} "
                         f"| {x['floor_start']:.4g} / {x['floor_end']:.4g} |")
    return "\n".join(lines)


def plot(res: dict[str, Any], warmup_s: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = with_rows(res["samples"])
    t = [s["t"] / 60.0 for s in samples]
    panels = [*SERIES, ("queries", "queries sent / ended per s"), ("ticks", "fleet ticks (cumulative)"),
              ("cost", "pool $/hr vs budget")]
    fig, axes = plt.subplots(4, 3, figsize=(15, 13), sharex=True)
    for ax, (key, label) in zip(axes.flat, panels):
        if key == "queries":
            for k, name in (("sent", "sent"), ("answered", "ended")):
                v = [s[k] for s in samples]
                ax.plot(t[1:], [(b - a) / max(1e-9, (tb - ta) * 60) for a, b, ta, tb in zip(v, v[1:], t, t[1:])],
                        label=name, lw=0.8)
            ax.legend(fontsize=7)
        elif key == "ticks":
            ax.plot(t, [s["fleet_ticks"] for s in samples], lw=0.9)
        elif key == "cost":
            ax.plot(t, [s["cost_per_hour"] for s in samples], lw=0.9, label="pool")
            ax.plot(t, [s["budget_per_hour"] for s in samples], lw=0.9, ls="--", label="budget")
            ax.legend(fontsize=7)
        elif key == "store_rows":
            for table_name in samples[0]["rows"] if samples else ():
                ax.plot(t, [s["rows"][table_name] for s in samples], lw=0.9, label=table_name)
            ax.legend(fontsize=7)
        else:
            ax.plot(t, [s.get(key) if s.get(key) is not None else float("nan") for s in samples], lw=0.9)
        ax.axvline(warmup_s / 60.0, color="grey", lw=0.6, ls=":")
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("wall minutes (dotted: end of warm-up)", fontsize=8)
    fig.suptitle(f"costscale soak: {res['sent']} queries, {samples[-1]['fleet_ticks'] if samples else 0} fleet ticks "
                 f"({res.get('calendar_days', 0):.1f} calendar days at x{res['spec']['speed']:g})", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


__all__ = ["FLAT", "SERIES", "growth", "plot", "table", "verdict"]
