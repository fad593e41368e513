"""The replay's timeline as a picture (``costscale replay --plot FILE.png``): demand (each model's,
when several) and the allowable capacity of the pool, each model's share of queries within its SLO
when several, $/hr against the budget, p99 against the QoS target, launches and
retirements marked, and an application's served accuracy per minute with its variant swaps (issue
#25); with ``forecast.mode`` shadow or on, each model's forecast over the lead per minute (issue #39),
shaded down to the rate measured over that minute. matplotlib (the ``bench`` extra) is imported only here.
"""
from __future__ import annotations

from typing import Any

from config.errors import UsageError


def plot_replay(run: Any, out: dict[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("replay --plot needs matplotlib (pip install 'costscale[bench]')") from None
    tl = out["timeline"]
    hours = [t / 3600.0 for t in tl["t_s"]]
    accuracy = tl.get("accuracy_by_model") or {}
    fig, axes = plt.subplots(4 if accuracy else 3, 1, figsize=(11, 10.5 if accuracy else 8), sharex=True)
    ax1, ax2, ax3 = axes[:3]
    several = bool(tl.get("demand_by_model"))
    colors = ["tab:cyan", "tab:orange", "tab:olive", "tab:pink", "tab:brown", "tab:red"]
    ax1.plot(hours, tl["demand_qps"], color="black" if several else "tab:blue", lw=1,
             label="demand, every model (q/s)" if several else "demand (q/s)")
    for k, (m, series) in enumerate((tl.get("demand_by_model") or {}).items()):
        ax1.plot(hours, series, color=colors[k % len(colors)], lw=0.9, label=f"{m} demand (q/s)")
    ax1.plot(hours, tl["goodput_qps"], color="tab:green", lw=1, ls="--" if several else "-", alpha=0.7,
             label="served within SLO (q/s)")
    cap = [c if c is not None else float("nan") for c in tl["capacity_qps"]]
    ax1.step(hours, cap, where="post", color="tab:gray", lw=1, ls="--",
             label="each model's planned capacity, summed (q/s)" if several else "pool's allowable capacity (q/s)")
    for k, (m, pairs) in enumerate((getattr(run, "forecast_minutes", None) or {}).items()):
        if not any(f is not None for f, _ in pairs):
            continue
        hrs = [i / 60.0 for i in range(len(pairs) + 1)]      # minute i is [i, i + 1) minutes from 0
        fc = [f if f is not None else float("nan") for f, _ in pairs]
        ax1.step(hrs, fc + fc[-1:], where="post", color="tab:purple", lw=0.9, alpha=0.8,
                 label=f"{m} forecast over the lead (q{round(100 * run.cfg.forecast.quantile)}, q/s)")
        ax1.fill_between(hrs[:-1], [q for _, q in pairs], fc, step="post", color="tab:purple", alpha=0.12)
    for t, _, n in run.launches:
        ax1.axvline(t / 3600.0, color="tab:red", alpha=0.25, lw=0.8)
    for t, n in run.terminations:
        ax1.axvline(t / 3600.0, color="tab:purple", alpha=0.25, lw=0.8)
    ax1.set_ylabel("q/s")
    ax1.legend(loc="upper left", fontsize=8)
    source = out["source"] if len(out["source"]) <= 70 else out["source"][:67] + "..."
    ax1.set_title(f"costscale replay: {out['model']}, {source} - ${out['cost_usd']:.2f}, "
                  f"{100 * out['slo_attainment']:.2f} % within SLO (red: launches, purple: retirements)", fontsize=10)
    ax2.step(hours, tl["cost_per_hour"], where="post", color="tab:orange", label="pool $/hr")
    ax2.axhline(out["budget_per_hour"], color="black", ls=":", label="budget")
    for name, b in (out.get("baselines") or {}).items():
        if name == "static_budget" or out["hours"] <= 0:
            continue
        ax2.axhline(b["cost_usd"] / out["hours"], lw=0.8, ls="--", alpha=0.6, label=f"{name} mean $/hr")
    ax2.set_ylabel("$/hr")
    ax2.legend(loc="upper left", fontsize=8)
    if tl.get("attainment_by_model"):    # several models, several SLOs: each one's attainment
        for k, (m, series) in enumerate(tl["attainment_by_model"].items()):
            ax3.plot(hours, [100 * a if a is not None else float("nan") for a in series], lw=1,
                     color=colors[k % len(colors)],
                     label=f"{m}: % of each minute's queries within its {out['models'][m]['qos_ms']:g} ms")
        ax3.axhline(99.0, color="black", ls=":", label="99 %")
        ax3.set_ylabel("% within SLO")
    else:
        p99 = [p if p is not None else float("nan") for p in tl["p99_ms"]]
        ax3.plot(hours, p99, color="tab:blue", lw=1, label="p99 of each minute's queries (ms; gaps: > 1 % missed)")
        ax3.axhline(out["qos_ms"], color="black", ls=":", label="QoS")
        ax3.set_ylabel("ms")
    ax3.legend(loc="upper left", fontsize=8)
    if accuracy:    # served accuracy per minute, each application against its most accurate variant
        ax4 = axes[3]
        apps = (out.get("accuracy") or {}).get("applications") or {}
        for k, (m, series) in enumerate(accuracy.items()):
            ax4.plot(hours, [a if a is not None else float("nan") for a in series], lw=1,
                     color=colors[k % len(colors)], label=f"{m}: mean accuracy served each minute (%)")
            if m in apps:
                ax4.axhline(apps[m]["top"], color=colors[k % len(colors)], ls=":", lw=0.8,
                            label=f"{m}: most accurate variant ({apps[m]['top']:.2f} %)")
            for t, *_ in getattr(run, "variant_swaps", {}).get(m, []):
                ax4.axvline(t / 3600.0, color="tab:gray", alpha=0.15, lw=0.6)
        ax4.set_ylabel("accuracy %")
        ax4.legend(loc="lower left", fontsize=8)
        ax4.set_title("served accuracy (grey: variant swaps routed)", fontsize=9)
    axes[-1].set_xlabel("hours")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["plot_replay"]
