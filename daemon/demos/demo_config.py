"""The demo's cluster (``costscale demo`` and the demos built on it): which model it serves at which
SLO, which instance types it may run and how many of each, and the config the daemon runs with
(:func:`demo_config`: an embedded EC2 at ``endpoint``, short loop intervals, terminate on shutdown).
"""
from __future__ import annotations

import secrets
from pathlib import Path

from config.schema import Config

DEMO_MODEL = "rm2"          # Kairos rm2 profile, QoS 350 ms (Kairos §7): sleeps dominate, robust on 2 cores
DEMO_QOS_MS = 350.0
# the Kairos §7 types (the ones with AWS profiles), each with a cap on how many the demo may run
DEMO_TYPES = {"g4dn.xlarge": 3, "c5n.2xlarge": 3, "r5n.large": 4, "t3.xlarge": 3}


def demo_config(state_dir: Path, endpoint: str, ami: str, budget: float, rate: float,
                policy: str = "kairos", pinned_pool: dict[str, int] | None = None) -> Config:
    return Config.model_validate({
        "cluster": f"demo-{secrets.token_hex(3)}",
        "region": "us-east-1",
        "budget_per_hour": budget,
        "objective": "min_cost",
        "headroom": 0.5,
        "models": [{"name": DEMO_MODEL, "onnx": "builtin:mlp", "qos_ms": DEMO_QOS_MS, "max_batch": 1000,
                    "profile": DEMO_MODEL}],
        "instance_types": [{"type": t, "max": n} for t, n in DEMO_TYPES.items()],
        "launch": {"ami_id": ami, "tags": {"purpose": "costscale-demo"}},
        "pinned_pool": pinned_pool,
        "dispatcher": {"listen": "127.0.0.1:0", "policy": policy, "on_deadline": "drop",
                       "cluster_token": secrets.token_hex(16)},
        "intervals": {"fleet_s": 4, "model_s": 1, "reconcile_s": 20},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": rate},
        "state_path": str(state_dir / "state.db"),
        "on_shutdown": "terminate",
        "aws": {"endpoint_url": endpoint},
    })


__all__ = ["DEMO_MODEL", "DEMO_QOS_MS", "DEMO_TYPES", "demo_config"]
