"""Pool arithmetic: a pool is a mapping instance type (or slot) -> count. Added up, priced, digested
for client tokens, and written in one line for logs; what the planner, the fleet, the replay's
ledger and the status lines share (pure)."""
from __future__ import annotations

import hashlib
from typing import Iterable, Mapping


def pool_sum(pools: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Several pools (type → count) added up, types with no instance left out (each model's
    share of a joint plan, the pools held for models being profiled)."""
    out: dict[str, int] = {}
    for p in pools:
        for t, n in p.items():
            if n:
                out[t] = out.get(t, 0) + int(n)
    return out


def pool_cost(pool: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """Σ $/hr of a pool; KeyError naming every type without a price."""
    missing = sorted(t for t, n in pool.items() if n and t not in prices)
    if missing:
        raise KeyError(f"no price for instance type(s) {', '.join(missing)}")
    return float(sum(prices[t] * n for t, n in pool.items() if n))


def pool_digest(pool: Mapping[str, int]) -> str:
    """A short stable digest of a pool (type → count), zero counts ignored."""
    canon = ",".join(f"{t}={int(n)}" for t, n in sorted(pool.items()) if int(n) > 0)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def pool_text(by_type: Mapping[str, int]) -> str:
    """``g4dn.xlarge×1, r5n.large×2``: a pool (or counts by type) in one line for logs."""
    return ", ".join(f"{t}×{n}" for t, n in sorted(by_type.items()) if n)


__all__ = ["pool_cost", "pool_digest", "pool_sum", "pool_text"]
