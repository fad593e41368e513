"""``costscale status``: what a running daemon holds, spends and decides, from its dispatcher's
Status RPC (:mod:`dispatcher.api.status`; the Prometheus metrics read the same reply).

    costscale status [--dispatcher HOST:PORT] [--json] [--watch [--interval S]]

The pool by type, market and state (pending, running, parked, draining; a spot instance in its
zone: ``r5n.large spot us-east-1a``), $/hr billed now against the budget (spot at its spot price),
dollars spent today (UTC), each model's demand and SLO attainment over the last 1, 5 and 15
minutes, the models being profiled and the conservative pool each is served on meanwhile, the
variants on each worker, the last ten fleet and model decisions with their reasons, and the last
error. ``--json`` prints one object (with ``--watch``, one per line). Bad flags: one
line, exit 2; the dispatcher unreachable: one line, exit 1.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from config.hostport import hostport_arg
from daemon.commands.common.client_flags import add_client_flags, call
from daemon.processes.split import process_of
from scaler.planner.pools import pool_text

DEFAULT_DISPATCHER = "127.0.0.1:50051"
#: how long one Status call may take (s)
CALL_TIMEOUT_S = 5.0
WINDOW_NAMES = {60: "1m", 300: "5m", 900: "15m"}
STATES = ("pending", "running", "parked", "draining")


def _interval(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not 0.1 <= x <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds between 0.1 and 3600, got {text!r}")
    return x


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="pool, spend, demand, SLO attainment and decisions of a running daemon")
    p.add_argument("--dispatcher", type=hostport_arg, default=DEFAULT_DISPATCHER, metavar="HOST:PORT",
                   help=f"the daemon's dispatcher (default {DEFAULT_DISPATCHER})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    p.add_argument("--interval", type=_interval, default=2.0, metavar="S", help="seconds between refreshes (2)")
    add_client_flags(p)
    p.set_defaults(func=run_status)


def fetch(target: str, conn: argparse.Namespace | None = None):  # type: ignore[no-untyped-def]
    """The Status reply; ``conn``: the connection flags (:mod:`daemon.commands.common.client_flags`)."""
    from dispatcher.proto import costscale_pb2 as pb

    return call(target, "Status", pb.StatusRequest(), conn, timeout=CALL_TIMEOUT_S)


def _iso(t: float) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds") if t > 0 else None


def _shadow(sh) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """``forecast.mode: shadow``'s comparison: planned $/hr and dollars of the ahead and applied pools,
    and their served-within-SLO estimate by capacity (None: no minute counted yet)."""
    return {"ahead_usd_per_hr": round(sh.ahead_usd_per_hr, 6), "applied_usd_per_hr": round(sh.applied_usd_per_hr, 6),
            "ahead_usd": round(sh.ahead_usd, 6), "applied_usd": round(sh.applied_usd, 6),
            "ahead_served_pct": sh.ahead_served_pct if sh.HasField("ahead_served_pct") else None,
            "applied_served_pct": sh.applied_served_pct if sh.HasField("applied_served_pct") else None}


def shadow_line(sh: dict[str, Any]) -> str:
    """The status line of ``mode: shadow``'s comparison, e.g. ``shadow: planning ahead would hold $2.412/hr
    against $2.196/hr applied ($0.5021 against $0.4830 so far, +3.95 %); served within SLO by capacity
    (estimate): ahead 100.00 %, applied 95.41 %``."""
    extra = (f", {100.0 * (sh['ahead_usd'] / sh['applied_usd'] - 1.0):+.2f} %" if sh["applied_usd"] > 0 else "")
    served = ("; served within SLO by capacity (estimate): "
              f"ahead {_pct_or_dash(sh['ahead_served_pct'])}, applied {_pct_or_dash(sh['applied_served_pct'])}")
    return (f"  shadow: planning ahead would hold ${sh['ahead_usd_per_hr']:.3f}/hr against "
            f"${sh['applied_usd_per_hr']:.3f}/hr applied (${sh['ahead_usd']:.4f} against ${sh['applied_usd']:.4f} "
            f"so far{extra}){served}")


def _pct_or_dash(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} %"


def status_dict(r) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The ``--json`` object."""
    instances: dict[str, dict[str, int]] = {}
    markets: dict[tuple[str, str, str], dict[str, int]] = {}
    for c in r.instances:
        states = instances.setdefault(c.instance_type, {})
        states[c.state] = states.get(c.state, 0) + c.count
        market = c.market or "on_demand"   # an older daemon: its pool priced on-demand
        markets.setdefault((c.instance_type, market, c.zone), {})[c.state] = c.count
    models = {}
    for m in r.models:
        win = {WINDOW_NAMES.get(w.seconds, f"{w.seconds}s"): w for w in m.windows}
        models[m.name] = {
            "demand_qps": {k: round(w.demand_qps, 4) for k, w in win.items()},
            "attainment": {k: round(w.attainment, 6) if w.HasField("attainment") else None for k, w in win.items()},
            "served_accuracy": {k: round(w.served_accuracy, 6) if w.HasField("served_accuracy") else None
                                for k, w in win.items()},
            "queries": dict(sorted(m.queries.items())), "served": int(m.queries.get("OK", 0)),
            "slo_violations": m.slo_violations, "workers": m.workers,
            "planned": {"demand_qps": round(m.planned_qps, 4), "capacity_qps": round(m.capacity_qps, 4),
                        "short_qps": round(m.short_qps, 4)} if m.planned else None,
            "forecast": {"qps": round(m.forecast_qps, 4), "forecaster": m.forecaster}
            if m.HasField("forecast_qps") else None}
    counts: dict[str, dict[str, int]] = {}
    for c in r.decision_counts:
        counts.setdefault(c.loop, {})[c.kind] = c.count
    return {
        "cluster": r.cluster, "daemon": r.daemon,
        "forecast": {"mode": r.forecast_mode, "lead_s": round(r.forecast_lead_s, 1),
                     "shadow": _shadow(r.forecast_shadow) if r.HasField("forecast_shadow") else None}
        if r.forecast_mode else None,
        "budget_per_hour": r.budget_per_hour, "pool_cost_per_hour": round(r.cost_per_hour, 6),
        "spent_usd_today": round(r.spent_usd_today, 6), "spent_usd_total": round(r.spent_usd_total, 6),
        "instances": instances, "pool": dict(sorted(r.pool.items())),
        "instances_by_market": [{"instance_type": t, "market": m, "zone": z or None, "states": st}
                                for (t, m, z), st in sorted(markets.items())],
        "pool_cost_per_hour_by_market": {m: round(c, 6) for m, c in sorted(r.cost_per_hour_by_market.items())},
        "queued": r.queued, "in_flight": r.in_flight, "served": r.served, "rejected": r.rejected,
        "arrival_qps": round(r.arrival_qps, 4), "workers": [
            {"instance_id": w.instance_id, "instance_type": w.instance_type, "state": w.state,
             "variants": list(w.variants), "utilization": round(w.utilization, 4), "served": w.served,
             "model": w.model or None}
            for w in r.worker_list],
        "parked": r.parked, "capacity_hint": r.capacity_hint, "models": models,
        "decisions": [{"at": _iso(x.at_unix), "loop": x.loop, "kind": x.kind, "summary": x.summary,
                       "reason": x.reason} for x in r.decisions],
        "decision_counts": counts,
        "profiling": [{"model": p.model, "conservative_pool": dict(sorted(p.conservative_pool.items()))
                       if p.on_conservative_pool else None, "reason": p.reason, "types_left": list(p.types_left),
                       "probing": p.probing} for p in r.profiling],
        "last_error": r.last_error or None, "last_error_at": _iso(r.last_error_at_unix) if r.last_error else None,
        "replica": {"id": r.replica.id, "lease_holder": r.replica.lease_holder, "live": list(r.replica.live),
                    "owners": dict(sorted(r.replica.owners.items())),
                    "releasing": dict(sorted(r.replica.releasing.items())),
                    "forwarding_to": r.replica.forwarding_to or None, "owners_version": r.replica.owners_version}
        if r.HasField("replica") else None,
    }


def hosts_of(live: list[str]) -> dict[str, list[str]]:
    """The hosts that run several processes (``dispatcher.processes``: replica ids ``pI@HOST:PORT``,
    ``daemon.processes.split``), each with its live processes in order."""
    out: dict[str, list[int]] = {}
    for rid in live:
        got = process_of(rid)
        if got is not None:
            out.setdefault(got[1], []).append(got[0])
    return {h: [f"p{i}" for i in sorted(ps)] for h, ps in sorted(out.items())}


def replica_lines(s: dict[str, Any]) -> list[str]:
    """Which replica this is and which replica owns which worker (dispatcher replicas only)."""
    r = s.get("replica")
    if not r:
        return []
    role = "lease holder (runs the fleet loop)" if r["lease_holder"] else "standby"
    how = f"forwards its queries to {r['forwarding_to']}" if r["forwarding_to"] else "serves its queries itself"
    out = [f"replica  {r['id']}: {role}; {how}; live: {', '.join(r['live']) or '-'}; owners version {r['owners_version']}"]
    for host, procs in hosts_of(r["live"]).items():   # dispatcher.processes: one host, several processes
        out.append(f"host     {host}: {len(procs)} dispatcher process{'es' * (len(procs) > 1)} ({', '.join(procs)})")
    by: dict[str, list[str]] = {}
    for iid, owner in r["owners"].items():
        by.setdefault(owner, []).append(iid)
    for owner, iids in sorted(by.items()):
        out.append(f"  {owner} owns {', '.join(sorted(iids))}")
    for iid, to in r["releasing"].items():
        out.append(f"  {iid} moving to {to} (its old owner finishing its query)")
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ago(t: float, now: float) -> str:
    s = max(now - t, 0.0)
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def pool_lines(s: dict[str, Any]) -> list[str]:
    """The pool table: a row per type, or with spot capacity a row per (type, market, zone), with
    the spend by market under it."""
    rows = s.get("instances_by_market", [])
    if not any(x["market"] == "spot" for x in rows):   # on-demand only: the table as before spot
        return ([f"{'pool':22}" + "".join(f"{x:>9}" for x in STATES)]
                + [f"  {t:20}" + "".join(f"{st.get(x, 0):>9}" for x in STATES)
                   for t, st in sorted(s["instances"].items())])
    out = [f"{'pool':42}" + "".join(f"{x:>9}" for x in STATES)]
    for x in rows:
        where = f"{x['instance_type']} {x['market']}" + (f" {x['zone']}" if x["zone"] else "")
        out.append(f"  {where:40}" + "".join(f"{x['states'].get(st, 0):>9}" for st in STATES))
    by = s.get("pool_cost_per_hour_by_market", {})
    out.append("  $/hr by market: " + ", ".join(f"{m} {c:.3f}" for m, c in by.items()))
    return out


def render(s: dict[str, Any], target: str, now: float) -> str:
    """The human view of :func:`status_dict`."""
    out = [f"cluster {s['cluster']} at {target}" + ("" if s["daemon"] else " (a dispatcher without a daemon)")]
    share = s["pool_cost_per_hour"] / s["budget_per_hour"] if s["budget_per_hour"] else 0.0
    out.append(f"spend    {s['pool_cost_per_hour']:.3f} $/hr of {s['budget_per_hour']:g} budget ({100 * share:.0f}%);"
               f" ${s['spent_usd_today']:.{2 if s['spent_usd_today'] >= 1 else 4}f} today (UTC)")
    out.append(f"queries  {s['served']} served, {s['rejected']} refused, {s['queued']} waiting, "
               f"{s['in_flight']} in flight, {s['arrival_qps']:.1f} q/s")
    out.extend(replica_lines(s))
    out.append("")
    out.extend(pool_lines(s))
    if not s["instances"]:
        out.append("  (no instances)")
    out.append("")
    out.append(f"{'model':22}{'demand q/s 1m/5m/15m':>26}{'SLO attainment 1m/5m/15m':>30}{'accuracy 5m':>13}"
               f"{'workers':>9}{'short q/s':>11}")
    for name, m in s["models"].items():
        d = "/".join(f"{m['demand_qps'].get(k, 0):.1f}" for k in ("1m", "5m", "15m"))
        a = "/".join(_pct(m["attainment"].get(k)) for k in ("1m", "5m", "15m"))
        acc = m["served_accuracy"].get("5m")
        short = "-" if m.get("planned") is None else f"{m['planned']['short_qps']:.1f}"
        out.append(f"  {name:20}{d:>26}{a:>30}{'-' if acc is None else f'{acc:.3f}':>13}"
                   f"{m.get('workers', 0):>9}{short:>11}")
    ahead = {n: m["forecast"] for n, m in s["models"].items() if m.get("forecast")}
    if s.get("forecast") and s["forecast"]["mode"] != "off":
        fc = s["forecast"]
        out.append(f"  forecast ({fc['mode']}, over {fc['lead_s']:.0f} s): " + (", ".join(
            f"{n} {f['qps']:.1f} q/s ({f['forecaster']})" for n, f in ahead.items()) or "none yet (reactive)"))
        if fc.get("shadow"):
            out.append(shadow_line(fc["shadow"]))
    for p in s["profiling"]:
        pool = p["conservative_pool"]
        meanwhile = (f"served on a conservative pool {pool_text(pool) or '(empty)'} "
                     f"until then: {p['reason']}" if pool is not None else p["reason"])
        out.append(f"  {p['model']}: being profiled ({'probes up; ' if p['probing'] else ''}not measured yet on "
                   f"{', '.join(p['types_left'])}); {meanwhile}")
    out.append("")
    out.append("workers")
    for w in s["workers"]:
        out.append(f"  {w['instance_id']:20} {w['instance_type']:14} {w['state']:9} {', '.join(w['variants']) or '-'}")
    if not s["workers"]:
        out.append("  (none registered)")
    out.append("")
    out.append("decisions (newest last)")
    for x in s["decisions"]:
        at = datetime.fromisoformat(x["at"]).astimezone().strftime("%H:%M:%S") if x["at"] else "?"
        out.append(f"  {at} {x['loop']:5} {x['kind']:9} {x['summary']}" + (f"  -- {x['reason']}" if x["reason"] else ""))
    if not s["decisions"]:
        out.append("  (none yet)")
    err = s["last_error"]
    when = f" ({_ago(datetime.fromisoformat(s['last_error_at']).timestamp(), now)})" if err and s["last_error_at"] else ""
    out.append("")
    out.append(f"last error: {err}{when}" if err else "last error: none")
    return "\n".join(out)


def _show(args: argparse.Namespace, clear: bool) -> None:
    s = status_dict(fetch(args.dispatcher, args))
    if args.json:
        print(json.dumps(s), flush=True)
        return
    text = render(s, args.dispatcher, time.time())
    print(("\033[H\033[2J" if clear else "") + text, flush=True)


def run_status(args: argparse.Namespace) -> int:
    if not args.watch:
        _show(args, clear=False)
        return 0
    clear = not args.json and sys.stdout.isatty()
    try:
        while True:
            _show(args, clear)
            if not args.json and not clear:
                print("", flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:   # the way out of --watch
        return 0
